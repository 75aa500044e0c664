#pragma once

// How the communicators' error messages write a size, a buffer size and a timeout, the same in every backend:
// "1.0 MiB", "262144 floats (1.0 MiB)", "300.0 s".

#include <chrono>
#include <cstddef>
#include <string>

namespace dtrain::trainer {

// "1.0 MiB"
std::string describe_bytes(std::size_t bytes);
// "262144 floats (1.0 MiB)"
std::string describe_floats(std::size_t count);
// "300.0 s"
std::string describe_seconds(std::chrono::milliseconds timeout);

}  // namespace dtrain::trainer
