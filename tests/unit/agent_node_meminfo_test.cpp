#include <doctest/doctest.h>
#include <sys/sysinfo.h>

#include <fstream>

#include "agent/node/facts.h"
#include "tests/unit/read_file.h"
#include "tests/unit/temp_dir.h"

using namespace dtrain;

namespace {

// The kernel's own count of RAM, through another interface than /proc/meminfo.
std::uint64_t sysinfo_total_bytes() {
  struct sysinfo info {};
  REQUIRE(::sysinfo(&info) == 0);
  return static_cast<std::uint64_t>(info.totalram) * info.mem_unit;
}

}  // namespace

TEST_CASE("this machine's /proc/meminfo gives the RAM sysinfo(2) reports") {
  const auto total = node::parse_mem_total(read_file("/proc/meminfo"));
  REQUIRE_MESSAGE(total.ok(), total.status.message());
  CHECK(total.value == sysinfo_total_bytes());
  CHECK(node::gather_facts().mem_total_bytes == sysinfo_total_bytes());
}

TEST_CASE("MemTotal is read wherever it is in the file, in kB") {
  const auto total = node::parse_mem_total("MemFree:  100 kB\nMemTotal:       65843212 kB\nBuffers: 1 kB\n");
  REQUIRE(total.ok());
  CHECK(total.value == 65843212ULL * 1024);
}

TEST_CASE("malformed meminfo text is an error that names the line, and the facts then leave the RAM unknown") {
  for (const char* bad : {"MemTotal: lots kB\n", "MemTotal: 1024\n", "MemTotal: 1024 MB\n", "MemTotal: -1 kB\n",
                          "MemTotal: 1024 kB extra\n", "MemTotal:\n"}) {
    CAPTURE(bad);
    const auto total = node::parse_mem_total(bad);
    CHECK(total.status.code() == StatusCode::invalid_argument);
    CHECK(total.status.message().find("MemTotal line") != std::string::npos);
  }
  const auto none = node::parse_mem_total("MemFree: 100 kB\n");
  CHECK(none.status.code() == StatusCode::not_found);
  CHECK(none.status.message().find("no MemTotal line") != std::string::npos);
  CHECK(node::parse_mem_total("").status.code() == StatusCode::not_found);

  TempDir proc("meminfo");
  std::ofstream(proc.file("meminfo")) << "MemTotal: many kB\n";
  CHECK(node::gather_facts("/sys", proc.path).mem_total_bytes == 0);
  std::ofstream(proc.file("meminfo")) << "MemTotal: 2048 kB\n";
  CHECK(node::gather_facts("/sys", proc.path).mem_total_bytes == 2048ULL * 1024);
}
