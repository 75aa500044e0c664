// The node's GEMM rate cache (agent/node/cpu_gemm.h): its text round-trips, a rate of another CPU or thread count
// is refused as stale, and a corrupt, empty, foreign or unreadable file is refused with a message that names it and
// says to run `dtrain doctor`, never a crash.

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "agent/node/cpu_gemm.h"
#include "temp_dir.h"

namespace node_cpu_gemm_test {

using dtrain::StatusCode;
using dtrain::node::CpuGemmRate;
using dtrain::node::format_cpu_gemm;
using dtrain::node::parse_cpu_gemm;
using dtrain::node::read_cpu_gemm;
using dtrain::node::write_cpu_gemm;

CpuGemmRate sample() {
  CpuGemmRate rate;
  rate.flops_per_s = 1.25e11;
  rate.threads = 8;
  rate.cpu_model = "Intel(R) Xeon(R) Platinum 8480+";
  rate.size = 512;
  rate.measured_unix_ms = 1718000000123;
  return rate;
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
}

TEST_CASE("the cache round-trips through write and read, through a directory it creates") {
  TempDir dir("cpu-gemm");
  const std::string path = dir.file("state/dtrain/cpu_gemm.json");
  REQUIRE(write_cpu_gemm(path, sample()).ok());
  const auto read = read_cpu_gemm(path, "Intel(R) Xeon(R) Platinum 8480+", 8);
  REQUIRE(read.ok());
  CHECK(read.value.flops_per_s == 1.25e11);
  CHECK(read.value.threads == 8);
  CHECK(read.value.cpu_model == "Intel(R) Xeon(R) Platinum 8480+");
  CHECK(read.value.size == 512);
  CHECK(read.value.measured_unix_ms == 1718000000123);
  CHECK(format_cpu_gemm(read.value) == format_cpu_gemm(sample()));
  // No temporary file is left beside it.
  CHECK(std::distance(std::filesystem::directory_iterator(dir.file("state/dtrain")),
                      std::filesystem::directory_iterator()) == 1);
}

TEST_CASE("a rate of another CPU model or another thread count is stale and refused") {
  TempDir dir("cpu-gemm");
  const std::string path = dir.file("cpu_gemm.json");
  REQUIRE(write_cpu_gemm(path, sample()).ok());
  const auto other_cpu = read_cpu_gemm(path, "AMD EPYC 9654 96-Core Processor", 8);
  CHECK(other_cpu.status.code() == StatusCode::failed_precondition);
  CHECK(other_cpu.status.message().find("AMD EPYC 9654") != std::string::npos);
  CHECK(other_cpu.status.message().find("dtrain doctor") != std::string::npos);
  const auto other_threads = read_cpu_gemm(path, "Intel(R) Xeon(R) Platinum 8480+", 4);
  CHECK(other_threads.status.code() == StatusCode::failed_precondition);
  CHECK(other_threads.status.message().find("with 8 threads") != std::string::npos);
}

TEST_CASE("no cache is not_found, with how to get one") {
  TempDir dir("cpu-gemm");
  const auto none = read_cpu_gemm(dir.file("cpu_gemm.json"), "x", 1);
  CHECK(none.status.code() == StatusCode::not_found);
  CHECK(none.status.message().find("dtrain doctor") != std::string::npos);
}

TEST_CASE("corrupt caches are refused with the file's name and the fix, never a throw") {
  const std::string path = "/state/cpu_gemm.json";
  const char* texts[] = {
      "",
      "not json {",
      "[1, 2]",
      "{\"format\": \"dtrain-cpu-gemm/2\", \"cpu_model\": \"x\", \"threads\": 1, \"flops_per_s\": 1e9}",
      "{\"cpu_model\": \"x\", \"threads\": 1, \"flops_per_s\": 1e9}",
      "{\"format\": \"dtrain-cpu-gemm/1\", \"cpu_model\": \"x\", \"threads\": 1, \"flops_per_s\": -5}",
      "{\"format\": \"dtrain-cpu-gemm/1\", \"cpu_model\": \"x\", \"threads\": 1, \"flops_per_s\": \"fast\"}",
      "{\"format\": \"dtrain-cpu-gemm/1\", \"cpu_model\": \"x\", \"threads\": 0, \"flops_per_s\": 1e9}",
      "{\"format\": \"dtrain-cpu-gemm/1\", \"cpu_model\": \"x\", \"threads\": -2, \"flops_per_s\": 1e9}",
      "{\"format\": \"dtrain-cpu-gemm/1\", \"cpu_model\": 7, \"threads\": 1, \"flops_per_s\": 1e9}",
      "{\"format\": \"dtrain-cpu-gemm/1\", \"cpu_model\": \"x\", \"threads\": 1, \"flops_per_s\": 1e9, \"size\": \"big\"",
  };
  for (const char* text : texts) {
    CAPTURE(text);
    const auto parsed = parse_cpu_gemm(text, path);
    CHECK(parsed.status.code() == StatusCode::invalid_argument);
    CHECK(parsed.status.message().find(path) != std::string::npos);
    CHECK(parsed.status.message().find("dtrain doctor") != std::string::npos);
  }
  // Optional fields of another type are left out, not refused.
  const auto odd = parse_cpu_gemm(
      "{\"format\": \"dtrain-cpu-gemm/1\", \"cpu_model\": \"x\", \"threads\": 2, \"flops_per_s\": 1e9, \"size\": "
      "\"big\", \"measured_unix_ms\": \"now\"}",
      path);
  REQUIRE(odd.ok());
  CHECK(odd.value.size == 0);
  CHECK(odd.value.threads == 2);
}

TEST_CASE("a cache that is a directory or garbage on disk is refused through read_cpu_gemm") {
  TempDir dir("cpu-gemm");
  std::filesystem::create_directory(dir.file("cpu_gemm.json"));
  const auto directory = read_cpu_gemm(dir.file("cpu_gemm.json"), "x", 1);
  CHECK(directory.status.code() == StatusCode::invalid_argument);
  CHECK(directory.status.message().find("cannot be read") != std::string::npos);
  write_text(dir.file("garbage.json"), std::string("\0\xff\xfe{", 4));
  CHECK(read_cpu_gemm(dir.file("garbage.json"), "x", 1).status.code() == StatusCode::invalid_argument);
}

TEST_CASE("the CPU model comes from cpuinfo's model name, else unknown") {
  TempDir dir("cpu-gemm");
  write_text(dir.file("cpuinfo"), "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel Xeon  \n");
  CHECK(dtrain::node::cpu_model_name(dir.path) == "Intel Xeon");
  write_text(dir.file("cpuinfo"), "processor\t: 0\n");
  CHECK(dtrain::node::cpu_model_name(dir.path) == "unknown");
  CHECK(dtrain::node::cpu_model_name(dir.file("missing")) == "unknown");
}

}  // namespace node_cpu_gemm_test
