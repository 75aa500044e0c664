#pragma once
// Test support: flips the bits `mask` of the byte at `offset` of a file in place (a damaged checkpoint).

#include <cstddef>
#include <fstream>
#include <string>

inline void flip_bit(const std::string& path, std::size_t offset, unsigned char mask) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  char byte = 0;
  f.read(&byte, 1);
  byte = static_cast<char>(byte ^ mask);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&byte, 1);
}
