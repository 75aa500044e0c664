// `dtrain bench allreduce|all_gather|reduce_scatter|broadcast|sendrecv [-b MIN] [-e MAX] [-f FACTOR]`: bandwidth
// inside a job, like nccl-tests, through the trainer's Communicator (--backend gloo on CPU, the default; --backend
// shm on CPU among the ranks of one node; --backend hier, shm within nodes and gloo across; --backend auto, the
// trainer's default choice; --backend nccl on GPU, one per rank, buffers in GPU memory). Buffers come
// from the communicator (--buffers communicator, as the trainer's do), are plain host memory (user), or both, one
// table each. Run it as the job's command, e.g.
// `dtrain run -n 4 --nodes 2 -- dtrain bench allreduce -b 1M -e 256M`; every rank takes part, rank 0 prints
// size, count, time, algbw, busbw and #wrong. Exit 1 when any element came back wrong or a collective failed.
// --busy-ms MS computes for a random 0..MS ms before each run (trainer/comm/bench.h, busy_ms), so that a small
// collective's time is the latency a training step's collectives see on CPUs that its ranks keep busy.

#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "cli/commands.h"
#include "trainer/comm/bench.h"

namespace dtrain::cli {
namespace {

// "64", "512K", "1M", "2G" (binary multiples) -> bytes.
std::size_t parse_size(const std::string& text) {
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  double scale = 1;
  const std::string unit = end;
  if (unit == "K" || unit == "k") scale = 1024.0;
  else if (unit == "M" || unit == "m") scale = 1024.0 * 1024;
  else if (unit == "G" || unit == "g") scale = 1024.0 * 1024 * 1024;
  else if (!unit.empty() && unit != "B" && unit != "b") throw CLI::ValidationError("size", "'" + text + "' is not a size like 64K, 1M or 2G");
  if (end == text.c_str() || !(value > 0)) throw CLI::ValidationError("size", "'" + text + "' is not a positive size");
  return static_cast<std::size_t>(value * scale);
}

// The header's note of --busy-ms.
std::string busy_note(double busy_ms) {
  if (busy_ms <= 0) return "";
  char note[96];
  std::snprintf(note, sizeof(note), ", each after 0-%g ms of compute (left out of the time)", busy_ms);
  return note;
}

// One table: the bench on `comm` with user or communicator buffers; rank 0 prints it. Returns the wrong elements.
std::size_t run_table(trainer::Communicator& comm, trainer::CollectiveBenchOptions options, bool user_buffers) {
  options.user_buffers = user_buffers;
  const auto rows = trainer::run_collective_bench(comm, options);
  std::size_t wrong = 0;
  for (const auto& row : rows) wrong += row.wrong;
  if (comm.rank() == 0) {
    std::printf("# dtrain bench %s: %d ranks, backend %s, %s buffers, %d timed runs per size (%d warm-up)%s\n",
                options.collective.c_str(), comm.size(), comm.backend().c_str(),
                user_buffers ? "user (host memory)" : "communicator-allocated", options.iterations,
                options.warmup_iterations, busy_note(options.busy_ms).c_str());
    const std::string table = trainer::format_collective_bench(options.collective, comm.size(), rows);
    std::fwrite(table.data(), 1, table.size(), stdout);
    std::fflush(stdout);
  }
  return wrong;
}

}  // namespace

Action add_bench_command(CLI::App& app) {
  struct Args {
    std::string collective;
    std::string min_size = "1M", max_size = "64M";
    double factor = 2;
    int iterations = 10, warmup = 2;
    double busy_ms = 0;
    double timeout_s = 300;
    std::string backend = "gloo";
    std::string buffers = "communicator";
  };
  auto args = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("bench", "Collective bandwidth inside a job (run on every rank), like nccl-tests");
  cmd->add_option("collective", args->collective,
                  "allreduce, all_gather, reduce_scatter, broadcast, or sendrecv (each rank sends to the next and "
                  "receives from the one before, a pipeline's exchange; gloo, shm)")
      ->required()
      ->check(CLI::IsMember({"allreduce", "all_gather", "reduce_scatter", "broadcast", "sendrecv"}));
  cmd->add_option("-b,--minbytes", args->min_size, "smallest size (64K, 1M, ...)")->capture_default_str();
  cmd->add_option("-e,--maxbytes", args->max_size, "largest size")->capture_default_str();
  cmd->add_option("-f,--stepfactor", args->factor, "multiply the size by this between rows")
      ->capture_default_str()
      ->check(CLI::Range(1.01, 1024.0));
  cmd->add_option("-n,--iters", args->iterations, "timed runs per size")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("-w,--warmup_iters", args->warmup, "untimed runs per size")->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_option("--busy-ms", args->busy_ms,
                  "before each run compute for a random 0..MS ms, the same on every rank, left out of the time: the "
                  "latency of collectives issued between computations, as a training step's are (on CPUs that the "
                  "ranks keep busy, back-to-back runs wait a whole scheduler tick each)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 10000.0));
  cmd->add_option("--backend", args->backend,
                  "gloo (CPU, TCP), shm (CPU, the ranks of one node, shared memory), hier (shm within nodes, gloo "
                  "across), auto (dtrain-trainer's choice: shm, hier or gloo by where the ranks run) or nccl (GPU "
                  "LOCAL_RANK, device buffers)")
      ->capture_default_str()
      ->check(CLI::IsMember({"gloo", "shm", "hier", "auto", "nccl"}));
  cmd->add_option("--buffers", args->buffers,
                  "communicator (Communicator::allocate, as the trainer's), user (plain host memory) or both")
      ->capture_default_str()
      ->check(CLI::IsMember({"communicator", "user", "both"}));
  cmd->add_option("--timeout-s", args->timeout_s, "deadline of rendezvous and of each collective")->capture_default_str();
  return [args]() {
    trainer::CollectiveBenchOptions options;
    options.collective = args->collective;
    options.iterations = args->iterations;
    options.warmup_iterations = args->warmup;
    options.busy_ms = args->busy_ms;
    options.sizes_bytes.clear();
    try {
      const std::size_t lo = parse_size(args->min_size), hi = parse_size(args->max_size);
      if (lo > hi) throw CLI::ValidationError("size", "-b " + args->min_size + " is larger than -e " + args->max_size);
      for (double size = static_cast<double>(lo); size <= static_cast<double>(hi) * 1.0000001; size *= args->factor) {
        options.sizes_bytes.push_back(static_cast<std::size_t>(size));
      }
    } catch (const CLI::ValidationError& e) {
      std::fprintf(stderr, "dtrain bench: %s\n", e.what());
      return 2;
    }
    try {
      trainer::CommOptions comm_options;
      comm_options.backend = args->backend;
      comm_options.timeout = std::chrono::milliseconds(static_cast<long long>(args->timeout_s * 1000));
      auto comm = trainer::make_communicator_from_env(comm_options);
      std::size_t wrong = 0;
      if (args->buffers != "user") wrong += run_table(*comm, options, false);
      if (args->buffers != "communicator") wrong += run_table(*comm, options, true);
      if (wrong > 0) {
        std::fprintf(stderr, "dtrain bench: rank %d: %zu elements came back wrong\n", comm->rank(), wrong);
        return 1;
      }
      return 0;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "dtrain bench: %s\n", e.what());
      return 1;
    }
  };
}

}  // namespace dtrain::cli
