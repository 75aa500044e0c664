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

// One buffer of the collective, where the backend wants it (Communicator::device_buffers): `host` holds the
// known data and, after download(), the result. For a host backend `host` is the buffer itself; for a device
// backend a device copy of `count` floats is kept in step by upload() and download(), outside the timed runs.
class BenchBuffer {
 public:
  explicit BenchBuffer(Communicator& comm) : comm_(comm) {}
  ~BenchBuffer() { comm_.release(device_); }
  BenchBuffer(const BenchBuffer&) = delete;
  BenchBuffer& operator=(const BenchBuffer&) = delete;

  std::vector<float> host;

  // Sizes the buffer to host.size() floats and copies host into it.
  void upload() {
    if (!comm_.device_buffers()) return;
    if (host.size() != device_count_) {
      comm_.release(device_);
      device_ = nullptr;
      device_count_ = 0;
      device_ = comm_.allocate(host.size());
      device_count_ = host.size();
    }
    comm_.copy_in(device_, host.data(), host.size());
  }
  // Copies the buffer back into host.
  void download() {
    if (comm_.device_buffers()) comm_.copy_out(host.data(), device_, host.size());
  }
  float* data() { return comm_.device_buffers() ? device_ : host.data(); }

 private:
  Communicator& comm_;
  float* device_ = nullptr;
  std::size_t device_count_ = 0;
};

// The buffers a case's functions share; they outlive the case.
struct Buffers {
  explicit Buffers(Communicator& comm) : in(comm), out(comm) {}
  BenchBuffer in;
  BenchBuffer out;
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
              b->out.host.resize(count);
              for (std::size_t i = 0; i < count; ++i) b->out.host[i] = element(me, i);
              b->out.upload();
            },
            [=](std::size_t count) { comm_ptr->allreduce(b->out.data(), count)->wait(); },
            [=](std::size_t count) {
              b->out.download();
              std::size_t wrong = 0;
              for (std::size_t i = 0; i < count; ++i) wrong += b->out.host[i] != sum(i);
              return wrong;
            }};
  }
  if (collective == "reduce_scatter") {
    return {static_cast<double>(n - 1) / n, static_cast<std::size_t>(n),
            [=](std::size_t count) {
              b->in.host.resize(count * n);
              b->out.host.assign(count, 0.0f);
              for (std::size_t i = 0; i < b->in.host.size(); ++i) b->in.host[i] = element(me, i);
              b->in.upload();
              b->out.upload();
            },
            [=](std::size_t count) { comm_ptr->reduce_scatter(b->in.data(), b->out.data(), count)->wait(); },
            [=](std::size_t count) {
              b->out.download();
              std::size_t wrong = 0;
              for (std::size_t i = 0; i < count; ++i) wrong += b->out.host[i] != sum(me * count + i);
              return wrong;
            }};
  }
  if (collective == "all_gather") {
    return {static_cast<double>(n - 1) / n, static_cast<std::size_t>(n),
            [=](std::size_t count) {
              b->in.host.resize(count);
              b->out.host.assign(count * n, 0.0f);
              for (std::size_t i = 0; i < count; ++i) b->in.host[i] = element(me, i);
              b->in.upload();
              b->out.upload();
            },
            [=](std::size_t count) { comm_ptr->all_gather(b->in.data(), b->out.data(), count)->wait(); },
            [=](std::size_t count) {
              b->out.download();
              std::size_t wrong = 0;
              for (int r = 0; r < n; ++r) {
                for (std::size_t i = 0; i < count; ++i) wrong += b->out.host[r * count + i] != element(r, i);
              }
              return wrong;
            }};
  }
  if (collective == "broadcast") {
    return {1.0, 1,
            [=](std::size_t count) {
              b->out.host.resize(count);
              for (std::size_t i = 0; i < count; ++i) b->out.host[i] = element(me, i);
              b->out.upload();
            },
            [=](std::size_t count) { comm_ptr->broadcast(b->out.data(), count, 0)->wait(); },
            [=](std::size_t count) {
              b->out.download();
              std::size_t wrong = 0;
              for (std::size_t i = 0; i < count; ++i) wrong += b->out.host[i] != element(0, i);
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
  Buffers buffers(comm);
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
