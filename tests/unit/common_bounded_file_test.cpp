#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "common/io/bounded_file.h"

using dtrain::FileBound;
using dtrain::LineReader;
using dtrain::read_bounded_file;
using dtrain::StatusCode;
namespace fs = std::filesystem;

namespace {

struct TempDir {
  fs::path path;
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "bounded-file-XXXXXX").string();
    path = ::mkdtemp(pattern.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(path / name, std::ios::binary) << text;
    return (path / name).string();
  }
};

}  // namespace

TEST_CASE("bounded file: a regular file within the bound is read whole") {
  TempDir dir;
  const auto read = read_bounded_file(dir.write("a", "hello\n"), FileBound{6});
  REQUIRE(read.ok());
  CHECK(read.value == "hello\n");
}

TEST_CASE("bounded file: a larger file is refused with its size and the bound, or cut when asked") {
  TempDir dir;
  const std::string path = dir.write("big", std::string(100, 'x'));
  const auto refused = read_bounded_file(path, FileBound{99});
  CHECK(refused.status.code() == StatusCode::invalid_argument);
  CHECK(refused.status.message() == path + " is 100 bytes, more than the 99 read here");
  const auto cut = read_bounded_file(path, FileBound{10, true});
  REQUIRE(cut.ok());
  CHECK(cut.value == std::string(10, 'x'));
}

TEST_CASE("bounded file: /dev/zero, a directory and a FIFO are refused at once, naming what they are") {
  TempDir dir;
  const auto zero = read_bounded_file("/dev/zero", FileBound{1 << 20});
  CHECK(zero.status.code() == StatusCode::invalid_argument);
  CHECK(zero.status.message() == "/dev/zero is a character device, not a regular file");

  const auto directory = read_bounded_file(dir.path.string(), FileBound{1 << 20});
  CHECK(directory.status.message() == dir.path.string() + " is a directory, not a regular file");

  // No writer ever opens the FIFO: a blocking open would wait forever.
  const std::string fifo = (dir.path / "fifo").string();
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  const auto start = std::chrono::steady_clock::now();
  const auto piped = read_bounded_file(fifo, FileBound{1 << 20});
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(1));
  CHECK(piped.status.message() == fifo + " is a FIFO (named pipe), not a regular file");
  CHECK(LineReader::open(fifo, 100).status.code() == StatusCode::invalid_argument);
}

TEST_CASE("bounded file: a missing file is not_found; a symlink is refused only when asked") {
  TempDir dir;
  CHECK(read_bounded_file((dir.path / "missing").string(), FileBound{10}).status.code() == StatusCode::not_found);
  const std::string target = dir.write("target", "ok");
  const std::string link = (dir.path / "link").string();
  REQUIRE(::symlink(target.c_str(), link.c_str()) == 0);
  CHECK(read_bounded_file(link, FileBound{10}).value == "ok");
  const auto refused = read_bounded_file(link, FileBound{10, false, false});
  CHECK(refused.status.message() == link + " is a symlink, not a regular file");
}

TEST_CASE("bounded file: lines come one at a time; a line past the bound is skipped and counted") {
  TempDir dir;
  const std::string long_line(3 << 20, 'y');  // spans several reads
  const std::string path = dir.write("log", "one\n" + long_line + "\ntwo\n\nlast");
  auto reader = LineReader::open(path, 1 << 20);
  REQUIRE(reader.ok());
  std::string line;
  REQUIRE(reader.value.next(line));
  CHECK(line == "one");
  REQUIRE(reader.value.next(line));
  CHECK(line == "two");
  REQUIRE(reader.value.next(line));
  CHECK(line.empty());
  REQUIRE(reader.value.next(line));
  CHECK(line == "last");
  CHECK_FALSE(reader.value.next(line));
  CHECK(reader.value.long_lines() == 1);
  CHECK(reader.value.status().ok());
}

TEST_CASE("bounded file: a long last line without a newline is skipped too") {
  TempDir dir;
  auto reader = LineReader::open(dir.write("log", "a\n" + std::string(50, 'z')), 10);
  REQUIRE(reader.ok());
  std::string line;
  REQUIRE(reader.value.next(line));
  CHECK(line == "a");
  CHECK_FALSE(reader.value.next(line));
  CHECK(reader.value.long_lines() == 1);
}

TEST_CASE("bounded file: a small file under a large bound costs its size, not the bound") {
  TempDir dir;
  const std::string path = dir.write("small", "{}");
  const auto read = read_bounded_file(path, FileBound{std::size_t{1} << 40});  // no 1 TiB buffer
  REQUIRE(read.ok());
  CHECK(read.value == "{}");
  CHECK(read.value.capacity() < 4096);
}
