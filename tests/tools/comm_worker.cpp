// dtrain-comm-worker: a worker for tests and measurements of the trainer's communicator. Run it under the launcher
// (dtrain run -n N -- dtrain-comm-worker MODE), or with RANK, WORLD_SIZE, DTRAIN_STORE_ADDR and DTRAIN_JOB_TOKEN set
// by a test; it joins through make_communicator_from_env. DTRAIN_COMM_TIMEOUT_MS sets CommOptions::timeout.
//   check        every collective and a DdpReducer pass on known integer data; prints "comm-worker rank R ok"
//   die K        one allreduce, then rank K kills itself (SIGKILL) and the others run another allreduce, which must
//                fail: they print "comm-error after MS ms: MESSAGE" and exit 0 (1 if it did not fail); they ignore
//                SIGTERM meanwhile, so the launcher's stop of the job does not end them before they can say it
//   stall K      like die, but rank K sleeps through 3 timeouts without issuing the allreduce, then exits 0
//   loop         4 MiB allreduces back to back until one fails; prints "looping" once joined (a test then kills
//                a rank) and "comm-error after N allreduces: MESSAGE" at the failure, exiting 0
//   bench [C]    table for collective C (default allreduce) at 1 MiB and 25 MiB (bench.h); exits 1 if any element
//                was wrong
//   overlap MS   DdpReducer over 64 MiB of gradients with a simulated backward of MS ms of arithmetic spread over
//                the grads_ready calls; prints its timings against backward and allreduce done one after the other
// Exits 1 with a message on a wrong value, 2 on bad usage, 3 on an unexpected CommError.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "trainer/comm/bench.h"
#include "trainer/comm/communicator.h"
#include "trainer/parallel/ddp/reducer.h"

namespace {

using namespace dtrain::trainer;
using Clock = std::chrono::steady_clock;

struct Mismatch : std::runtime_error {
  using std::runtime_error::runtime_error;
};

float value(int rank, std::size_t i) { return static_cast<float>((rank + 1) * 1000 + static_cast<int>(i % 997)); }

float sum_over_ranks(int size, std::size_t i) {
  float total = 0;
  for (int r = 0; r < size; ++r) total += value(r, i);
  return total;
}

void expect_none_wrong(const std::string& what, std::size_t wrong) {
  if (wrong != 0) throw Mismatch(what + ": " + std::to_string(wrong) + " elements differ from the expected values");
}

void check(Communicator& comm) {
  const int n = comm.size();
  const int me = comm.rank();
  const std::size_t count = 300'001;

  std::vector<float> data(count);
  for (std::size_t i = 0; i < count; ++i) data[i] = value(me, i);
  comm.broadcast(data.data(), count, 0)->wait();
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < count; ++i) wrong += data[i] != value(0, i);
  expect_none_wrong("broadcast", wrong);

  for (std::size_t i = 0; i < count; ++i) data[i] = value(me, i);
  comm.allreduce(data.data(), count)->wait();
  wrong = 0;
  for (std::size_t i = 0; i < count; ++i) wrong += data[i] != sum_over_ranks(n, i);
  expect_none_wrong("allreduce", wrong);

  const std::size_t chunk = 10'007;
  std::vector<float> in(chunk * n), out(chunk);
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = value(me, i);
  comm.reduce_scatter(in.data(), out.data(), chunk)->wait();
  wrong = 0;
  for (std::size_t i = 0; i < chunk; ++i) wrong += out[i] != sum_over_ranks(n, me * chunk + i);
  expect_none_wrong("reduce_scatter", wrong);

  std::vector<float> mine(chunk), gathered(chunk * n);
  for (std::size_t i = 0; i < chunk; ++i) mine[i] = value(me, i);
  comm.all_gather(mine.data(), gathered.data(), chunk)->wait();
  wrong = 0;
  for (int r = 0; r < n; ++r) {
    for (std::size_t i = 0; i < chunk; ++i) wrong += gathered[r * chunk + i] != value(r, i);
  }
  expect_none_wrong("all_gather", wrong);

  // DDP: rank r's gradient is n * (i % 101) * (r + 1), so the mean over ranks is (i % 101) * n (n + 1) / 2.
  std::vector<float> grads(count);
  for (std::size_t i = 0; i < count; ++i) grads[i] = static_cast<float>(n * (i % 101) * (me + 1));
  DdpReducer reducer(comm, grads.data(), count, DdpOptions{64 << 10, 256 << 10});
  reducer.begin_backward(true);
  for (std::size_t end = count; end > 0;) {
    std::size_t size = std::min<std::size_t>(9'999, end);
    reducer.grads_ready(end - size, size);
    end -= size;
  }
  reducer.finish_backward();
  wrong = 0;
  for (std::size_t i = 0; i < count; ++i) wrong += grads[i] != static_cast<float>((i % 101) * (n + 1) * n / 2);
  expect_none_wrong("DdpReducer mean", wrong);
  std::printf("comm-worker rank %d of %d (%s) ok\n", me, n, comm.backend().c_str());
}

int fail_after_peer(Communicator& comm, int victim, bool kill, std::chrono::milliseconds timeout) {
  // The launcher stops the job as soon as rank K is gone, maybe before a survivor has finished the first allreduce;
  // survivors outlive that SIGTERM (the SIGKILL after the stop's grace period still ends them) so that each reports
  // its own CommError, which is what the test observes.
  std::signal(SIGTERM, SIG_IGN);
  std::vector<float> data(1 << 20, 1.0f);
  comm.allreduce(data.data(), data.size())->wait();
  if (comm.rank() == victim) {
    std::fflush(stdout);
    if (kill) raise(SIGKILL);
    std::this_thread::sleep_for(3 * timeout);
    std::printf("comm-worker rank %d stalled and exits\n", comm.rank());
    return 0;
  }
  const auto start = Clock::now();
  try {
    comm.allreduce(data.data(), data.size())->wait();
  } catch (const CommError& error) {
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
    std::printf("comm-error after %lld ms: %s\n", static_cast<long long>(ms), error.what());
    return 0;
  }
  std::printf("comm-worker rank %d: the allreduce succeeded although rank %d was gone\n", comm.rank(), victim);
  return 1;
}

// Allreduces of 4 MiB back to back until one fails (a test kills a peer meanwhile); prints "looping" once joined.
int loop_until_failure(Communicator& comm) {
  std::vector<float> data(1 << 20, 0.0f);
  comm.allreduce(data.data(), data.size())->wait();
  std::printf("looping\n");
  std::fflush(stdout);
  for (long done = 0;; ++done) {
    try {
      comm.allreduce(data.data(), data.size())->wait();
    } catch (const CommError& error) {
      std::printf("comm-error after %ld allreduces: %s\n", done, error.what());
      return 0;
    }
  }
}

int bench(Communicator& comm, const std::string& collective) {
  CollectiveBenchOptions options;
  options.collective = collective;
  options.iterations = 20;
  auto rows = run_collective_bench(comm, options);
  if (comm.rank() == 0) std::printf("%s", format_collective_bench(collective, comm.size(), rows).c_str());
  for (const auto& row : rows) {
    if (row.wrong != 0) return 1;
  }
  return 0;
}

// Busy work standing in for backward's compute: a fixed amount of arithmetic (not a sleep, and not a wall-clock
// spin), so that a comm thread competing for the same core makes it take longer, as it would a real backward.
double spin(long iterations) {
  volatile double sink = 0;
  for (long i = 0; i < iterations; ++i) sink = sink + static_cast<double>(i) * 0.5;
  return sink;
}

// Iterations of spin() per millisecond on this core, measured before any communication starts: the best of 20
// short probes, so that a moment of interference from other processes does not shrink the simulated backward.
long spin_per_ms() {
  const long probe = 200'000;
  double best_ms = 1e9;
  for (int i = 0; i < 20; ++i) {
    const auto start = Clock::now();
    spin(probe);
    best_ms = std::min(best_ms, std::chrono::duration<double, std::milli>(Clock::now() - start).count());
  }
  return static_cast<long>(probe / std::max(best_ms, 1e-3));
}

double since_ms(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// 64 MiB of gradients in 64 "layers" of 1 MiB; backward_ms of compute spread over them. Prints, for the last of 5
// passes: backward alone (a no_sync pass), the synced pass (its backward, the comm time, the exposed wait and the
// hidden fraction), the allreduce of the whole buffer alone, and the step time with overlap against doing the two
// one after the other.
void overlap(Communicator& comm, int backward_ms) {
  const long per_layer = spin_per_ms() * backward_ms / 64;
  const std::size_t count = (64u << 20) / sizeof(float);
  const std::size_t chunk = count / 64;
  std::vector<float> grads(count, 1.0f);
  DdpReducer reducer(comm, grads.data(), count);
  const auto backward = [&] {
    for (std::size_t end = count; end > 0; end -= chunk) {
      spin(per_layer);
      reducer.grads_ready(end - chunk, chunk);
    }
  };
  double alone = 0, with_comm = 0, allreduce_alone = 0;
  for (int pass = 0; pass < 5; ++pass) {
    reducer.begin_backward(false);
    auto start = Clock::now();
    backward();
    alone = since_ms(start);
    reducer.finish_backward();

    reducer.begin_backward(true);
    start = Clock::now();
    backward();
    with_comm = since_ms(start);
    reducer.finish_backward();

    start = Clock::now();
    comm.allreduce(grads.data(), count)->wait();
    allreduce_alone = since_ms(start);
  }
  const auto& stats = reducer.last_stats();
  std::printf("overlap rank %d: backward alone %.1f ms, with comm %.1f ms; comm %.1f ms in %zu buckets, exposed %.1f "
              "ms, hidden %.2f; allreduce alone %.1f ms; step %.1f ms overlapped vs %.1f ms serial\n",
              comm.rank(), alone, with_comm, stats.comm_ms, stats.buckets, stats.exposed_ms, stats.hidden_fraction(),
              allreduce_alone, with_comm + stats.exposed_ms, alone + allreduce_alone);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: dtrain-comm-worker check|die RANK|stall RANK|loop|bench [COLLECTIVE]|overlap MS\n");
    return 2;
  }
  const std::string mode = argv[1];
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // a line printed before the launcher stops this rank is not lost
  CommOptions options;
  if (const char* ms = std::getenv("DTRAIN_COMM_TIMEOUT_MS")) options.timeout = std::chrono::milliseconds(std::atoi(ms));
  try {
    auto comm = make_communicator_from_env(options);
    if (mode == "check") {
      check(*comm);
      return 0;
    }
    if ((mode == "die" || mode == "stall") && argc == 3) {
      return fail_after_peer(*comm, std::atoi(argv[2]), mode == "die", options.timeout);
    }
    if (mode == "loop") return loop_until_failure(*comm);
    if (mode == "bench") return bench(*comm, argc >= 3 ? argv[2] : "allreduce");
    if (mode == "overlap" && argc == 3) {
      overlap(*comm, std::atoi(argv[2]));
      return 0;
    }
    std::fprintf(stderr, "dtrain-comm-worker: unknown mode '%s'\n", mode.c_str());
    return 2;
  } catch (const Mismatch& error) {
    std::fprintf(stderr, "comm-worker: %s\n", error.what());
    return 1;
  } catch (const CommError& error) {
    std::fprintf(stderr, "comm-worker: %s\n", error.what());
    return 3;
  } catch (const std::invalid_argument& error) {
    std::fprintf(stderr, "comm-worker: %s\n", error.what());
    return 2;
  }
}
