#include "trainer/comm/bench.h"

#include <chrono>
#include <cstdio>
#include <functional>
#include <stdexcept>
#include <vector>

namespace dtrain::trainer {
namespace {

using Clock = std::chrono::steady_clock;

// Rank r's element i in the checked run: an integer small enough that sums over any number of ranks stay exact.
float element(int rank, std::size_t i) { return static_cast<float>((rank + 1) * 100 + static_cast<int>(i % 89)); }

// One collective as the driver sees it: buffers for `count`, how to run it once, and how to count wrong elements.
struct Case {
  double bus_factor;
  std::size_t chunks;  // how many `count` chunks the size covers
  std::function<void(std::size_t count)> prepare;  // allocates and fills with the known data
  std::function<void(std::size_t count)> run;      // one collective, waited for
  std::function<std::size_t(std::size_t count)> wrong;
};

// The buffers a case's functions share; they outlive the case.
struct Buffers {
  std::vector<float> in;
  std::vector<float> out;
};

Case make_case(Communicator& communicator, const std::string& collective, Buffers& buffers) {
  Communicator* comm_ptr = &communicator;
  Buffers* b = &buffers;
  const int n = communicator.size();
  const int me = communicator.rank();
  const auto sum = [n](std::size_t i) {
    float total = 0;
    for (int r = 0; r < n; ++r) total += element(r, i);
    return total;
  };
  if (collective == "allreduce") {
    return {2.0 * (n - 1) / n, 1,
            [=](std::size_t count) {
              b->out.resize(count);
              for (std::size_t i = 0; i < count; ++i) b->out[i] = element(me, i);
            },
            [=](std::size_t count) { comm_ptr->allreduce(b->out.data(), count)->wait(); },
            [=](std::size_t count) {
              std::size_t wrong = 0;
              for (std::size_t i = 0; i < count; ++i) wrong += b->out[i] != sum(i);
              return wrong;
            }};
  }
  if (collective == "reduce_scatter") {
    return {static_cast<double>(n - 1) / n, static_cast<std::size_t>(n),
            [=](std::size_t count) {
              b->in.resize(count * n);
              b->out.assign(count, 0.0f);
              for (std::size_t i = 0; i < b->in.size(); ++i) b->in[i] = element(me, i);
            },
            [=](std::size_t count) { comm_ptr->reduce_scatter(b->in.data(), b->out.data(), count)->wait(); },
            [=](std::size_t count) {
              std::size_t wrong = 0;
              for (std::size_t i = 0; i < count; ++i) wrong += b->out[i] != sum(me * count + i);
              return wrong;
            }};
  }
  if (collective == "all_gather") {
    return {static_cast<double>(n - 1) / n, static_cast<std::size_t>(n),
            [=](std::size_t count) {
              b->in.resize(count);
              b->out.assign(count * n, 0.0f);
              for (std::size_t i = 0; i < count; ++i) b->in[i] = element(me, i);
            },
            [=](std::size_t count) { comm_ptr->all_gather(b->in.data(), b->out.data(), count)->wait(); },
            [=](std::size_t count) {
              std::size_t wrong = 0;
              for (int r = 0; r < n; ++r) {
                for (std::size_t i = 0; i < count; ++i) wrong += b->out[r * count + i] != element(r, i);
              }
              return wrong;
            }};
  }
  if (collective == "broadcast") {
    return {1.0, 1,
            [=](std::size_t count) {
              b->out.resize(count);
              for (std::size_t i = 0; i < count; ++i) b->out[i] = element(me, i);
            },
            [=](std::size_t count) { comm_ptr->broadcast(b->out.data(), count, 0)->wait(); },
            [=](std::size_t count) {
              std::size_t wrong = 0;
              for (std::size_t i = 0; i < count; ++i) wrong += b->out[i] != element(0, i);
              return wrong;
            }};
  }
  throw std::invalid_argument("unknown collective '" + collective +
                              "'; use allreduce, all_gather, reduce_scatter or broadcast");
}

}  // namespace

std::vector<CollectiveBenchRow> run_collective_bench(Communicator& comm, const CollectiveBenchOptions& options) {
  if (options.iterations < 1 || options.warmup_iterations < 0) {
    throw std::invalid_argument("collective bench: iterations must be at least 1 and warm-up at least 0");
  }
  Buffers buffers;
  Case c = make_case(comm, options.collective, buffers);
  std::vector<CollectiveBenchRow> rows;
  for (std::size_t bytes : options.sizes_bytes) {
    CollectiveBenchRow row;
    row.count = bytes / sizeof(float) / c.chunks;
    row.bytes = row.count * c.chunks * sizeof(float);
    c.prepare(row.count);
    for (int i = 0; i < options.warmup_iterations; ++i) c.run(row.count);
    const auto start = Clock::now();
    for (int i = 0; i < options.iterations; ++i) c.run(row.count);
    const double total_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    row.time_ms = total_ms / options.iterations;
    row.algbw_gbps = row.time_ms > 0 ? static_cast<double>(row.bytes) / (row.time_ms * 1e6) : 0;
    row.busbw_gbps = row.algbw_gbps * c.bus_factor;
    c.prepare(row.count);
    c.run(row.count);
    row.wrong = c.wrong(row.count);
    rows.push_back(row);
  }
  return rows;
}

std::string format_collective_bench(const std::string& collective, int ranks,
                                    const std::vector<CollectiveBenchRow>& rows) {
  std::string table = "# " + collective + " over " + std::to_string(ranks) + " ranks\n";
  char line[160];
  std::snprintf(line, sizeof(line), "%14s %12s %10s %10s %10s %8s\n", "size(B)", "count", "time(ms)", "algbw(GB/s)",
                "busbw(GB/s)", "#wrong");
  table += line;
  for (const auto& row : rows) {
    std::snprintf(line, sizeof(line), "%14zu %12zu %10.3f %10.3f %10.3f %8zu\n", row.bytes, row.count, row.time_ms,
                  row.algbw_gbps, row.busbw_gbps, row.wrong);
    table += line;
  }
  return table;
}

}  // namespace dtrain::trainer
