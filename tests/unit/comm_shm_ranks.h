#pragma once

// Real processes for the shm backend's tests: run_ranks forks one child per rank; each builds a ShmCommunicator on
// a fresh segment (ShmCommOptions::name), runs the test's body and reports through a page shared with the parent.
// The parent waits for every child within a bound and kills what is left, so a hang fails the test instead of
// hanging it.

#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "trainer/comm/shm/communicator.h"

namespace shm_test {

using dtrain::trainer::CommError;
using dtrain::trainer::ShmCommOptions;
using dtrain::trainer::ShmCommunicator;

inline std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// What a rank tells the parent. code: 0 the body returned, 2 a CommError, 3 any other exception (a wrong result).
struct RankReport {
  int code = -1;
  std::int64_t mark_ns = 0;        // set by the body (e.g. just before the collective expected to fail)
  std::int64_t failed_ns = 0;      // when the exception was caught
  int stage = 0;                   // set by the body for the parent's `during` (set_stage, stage_of)
  std::uint64_t hash = 0;          // set by the body
  char message[2048] = {};
};

struct RunOptions {
  std::chrono::milliseconds timeout{10'000};
  std::size_t chunk_bytes = 4096;                       // small, so that odd sizes take many pipelined chunks
  std::size_t arena_bytes = std::size_t{256} << 20;
  std::size_t ring_bytes = std::size_t{1} << 20;       // of each point-to-point ring (shm/p2p.h)
  std::function<void(int rank)> before_join;            // in the child, before its communicator exists
  // In the parent once every child is forked: the pids, the shared reports and the segment's name.
  std::function<void(std::vector<pid_t>&, RankReport*, const std::string&)> during;
  std::chrono::seconds limit{60};                       // the bound on the whole run
};

struct RankRun {
  std::string name;                 // the segment's name
  std::vector<RankReport> reports;  // copies, by rank
  std::vector<int> status;          // waitpid statuses, by rank
};

// The stage word is shared between a child and the parent while both run.
inline void set_stage(RankReport& report, int stage) { __atomic_store_n(&report.stage, stage, __ATOMIC_SEQ_CST); }
inline int stage_of(const RankReport& report) { return __atomic_load_n(&report.stage, __ATOMIC_SEQ_CST); }

using RankBody = std::function<void(ShmCommunicator& comm, RankReport& report)>;

inline std::string fresh_name() {
  static int runs = 0;
  return "dtrain-unit-shm-" + std::to_string(::getpid()) + "-" + std::to_string(runs++);
}

inline RankRun run_ranks(int world, const RankBody& body, const RunOptions& options = {}) {
  RankRun run;
  run.name = fresh_name();
  const std::size_t bytes = sizeof(RankReport) * static_cast<std::size_t>(world);
  void* shared = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (shared == MAP_FAILED) throw std::runtime_error("mmap of the report page failed");
  auto* reports = static_cast<RankReport*>(shared);
  for (int r = 0; r < world; ++r) new (&reports[r]) RankReport;
  std::vector<pid_t> pids;
  for (int rank = 0; rank < world; ++rank) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      RankReport& report = reports[rank];
      try {
        if (options.before_join) options.before_join(rank);
        ShmCommOptions o;
        o.rank = rank;
        o.size = world;
        o.name = run.name;
        o.timeout = options.timeout;
        o.geometry.chunk_bytes = options.chunk_bytes;
        o.geometry.arena_bytes = options.arena_bytes;
        o.geometry.ring_bytes = options.ring_bytes;
        ShmCommunicator comm(o);
        body(comm, report);
        report.code = 0;
      } catch (const CommError& error) {
        report.failed_ns = now_ns();
        std::snprintf(report.message, sizeof(report.message), "%s", error.what());
        report.code = 2;
      } catch (const std::exception& error) {
        report.failed_ns = now_ns();
        std::snprintf(report.message, sizeof(report.message), "%s", error.what());
        report.code = 3;
      }
      ::_exit(0);  // no exit handlers, no flush of the parent's buffered output copied into this child
    }
    pids.push_back(pid);
  }
  if (options.during) options.during(pids, reports, run.name);
  const auto deadline = std::chrono::steady_clock::now() + options.limit;
  run.status.assign(static_cast<std::size_t>(world), -1);
  for (int rank = 0; rank < world; ++rank) {
    int status = 0;
    while (::waitpid(pids[rank], &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        ::kill(pids[rank], SIGKILL);
        ::waitpid(pids[rank], &status, 0);
        std::snprintf(reports[rank].message, sizeof(reports[rank].message), "rank %d hung: killed by the test", rank);
        reports[rank].code = 4;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    run.status[rank] = status;
  }
  run.reports.assign(reports, reports + world);
  ::munmap(shared, bytes);
  return run;
}

// Rank r's known data: floats in [-1, 1) from a generator seeded by (seed, rank), the same in every process.
inline std::vector<float> data_of(int rank, std::size_t n, std::uint32_t seed = 7) {
  std::mt19937 generator(seed * 1000u + static_cast<std::uint32_t>(rank));
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> data(n);
  for (auto& x : data) x = uniform(generator);
  return data;
}

// The sum the shm backend states (shm/sum.h): rank 0's value, plus rank 1's, plus rank 2's, ... in fp32.
inline std::vector<float> rank_order_sum(int world, std::size_t n, std::uint32_t seed = 7) {
  std::vector<float> total = data_of(0, n, seed);
  for (int r = 1; r < world; ++r) {
    const std::vector<float> x = data_of(r, n, seed);
    for (std::size_t i = 0; i < n; ++i) total[i] += x[i];
  }
  return total;
}

// Throws (a code-3 report) unless got[0, n) has the bits of want[0, n).
template <typename T>
void expect_same(const T* got, const T* want, std::size_t n, const std::string& what) {
  for (std::size_t i = 0; i < n; ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(T)) != 0) {
      throw std::runtime_error(what + ": element " + std::to_string(i) + " of " + std::to_string(n) + " is " +
                               std::to_string(static_cast<double>(got[i])) + ", expected " +
                               std::to_string(static_cast<double>(want[i])));
    }
  }
}

// The CommError `call` throws, as text; a std::runtime_error (a code-3 report) when it throws none.
inline std::string shm_error_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const CommError& error) {
    return error.what();
  }
  throw std::runtime_error("no CommError");
}

// Throws (a code-3 report) unless `part` is in `text`.
inline void expect_text(const std::string& text, const std::string& part) {
  if (text.find(part) == std::string::npos) throw std::runtime_error("'" + part + "' is not in: " + text);
}

inline std::uint64_t fnv1a(const void* data, std::size_t bytes) {
  std::uint64_t hash = 1469598103934665603ull;
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < bytes; ++i) hash = (hash ^ p[i]) * 1099511628211ull;
  return hash;
}

}  // namespace shm_test
