#include "trainer/comm/bench.h"

#include <chrono>
#include <cstdio>
#include <functional>
#include <random>
#include <stdexcept>
#include <vector>

namespace dtrain::trainer {
namespace {

using Clock = std::chrono::steady_clock;

// Rank r's element i in the checked run: an integer small enough that sums over any number of ranks stay exact.
float element(int rank, std::size_t i) { return static_cast<float>((rank + 1) * 100 + static_cast<int>(i % 89)); }

// One buffer of the collective: `host` holds the known data and, after download(), the result. Placed buffers come
// from the communicator (Communicator::allocate) and are kept in step with `host` by upload() and download(),
// outside the timed runs; user buffers are `host` itself.
class BenchBuffer {
 public:
  BenchBuffer(Communicator& comm, bool placed) : comm_(comm), placed_(placed) {}
  ~BenchBuffer() { comm_.release(buffer_); }
  BenchBuffer(const BenchBuffer&) = delete;
  BenchBuffer& operator=(const BenchBuffer&) = delete;

  std::vector<float> host;

  // Sizes the buffer to host.size() floats and copies host into it.
  void upload() {
    if (!placed_) return;
    if (host.size() != buffer_count_) {
      comm_.release(buffer_);
      buffer_ = nullptr;
      buffer_count_ = 0;
      buffer_ = comm_.allocate(host.size());
      buffer_count_ = host.size();
    }
    comm_.copy_in(buffer_, host.data(), host.size());
  }
  // Copies the buffer back into host.
  void download() {
    if (placed_) comm_.copy_out(host.data(), buffer_, host.size());
  }
  float* data() { return placed_ ? buffer_ : host.data(); }

 private:
  Communicator& comm_;
  bool placed_;
  float* buffer_ = nullptr;
  std::size_t buffer_count_ = 0;
};

// The buffers a case's functions share; they outlive the case.
struct Buffers {
  Buffers(Communicator& comm, bool placed) : in(comm, placed), out(comm, placed) {}
  BenchBuffer in;
  BenchBuffer out;
};

// One collective as the driver sees it. The known data (element(rank, i)) starts in `in`, or in `out` for a collective
// that works in place; after one run, out[i] must be expected(i, count).
struct Case {
  double bus_factor;      // busbw / algbw (see bench.h)
  std::size_t chunks;     // how many `count` chunks the size covers
  std::size_t in_chunks;  // chunks of known data in `in`; 0: in place, the known data starts in `out`
  std::size_t out_chunks;
  std::function<void(Buffers& buffers, std::size_t count)> run;  // one collective, waited for
  std::function<float(std::size_t i, std::size_t count)> expected;
};

Case make_case(Communicator& communicator, const std::string& collective) {
  Communicator* comm = &communicator;
  const int n = communicator.size();
  const int me = communicator.rank();
  const auto n_chunks = static_cast<std::size_t>(n);
  const auto sum = [n](std::size_t i) {
    float total = 0;
    for (int r = 0; r < n; ++r) total += element(r, i);
    return total;
  };
  if (collective == "allreduce") {
    return {2.0 * (n - 1) / n, 1, 0, 1,
            [=](Buffers& b, std::size_t count) { comm->allreduce(b.out.data(), count)->wait(); },
            [=](std::size_t i, std::size_t) { return sum(i); }};
  }
  if (collective == "reduce_scatter") {
    return {static_cast<double>(n - 1) / n, n_chunks, n_chunks, 1,
            [=](Buffers& b, std::size_t count) { comm->reduce_scatter(b.in.data(), b.out.data(), count)->wait(); },
            [=](std::size_t i, std::size_t count) { return sum(me * count + i); }};
  }
  if (collective == "all_gather") {
    return {static_cast<double>(n - 1) / n, n_chunks, 1, n_chunks,
            [=](Buffers& b, std::size_t count) { comm->all_gather(b.in.data(), b.out.data(), count)->wait(); },
            [](std::size_t i, std::size_t count) { return element(static_cast<int>(i / count), i % count); }};
  }
  if (collective == "broadcast") {
    return {1.0, 1, 0, 1, [=](Buffers& b, std::size_t count) { comm->broadcast(b.out.data(), count, 0)->wait(); },
            [](std::size_t i, std::size_t) { return element(0, i); }};
  }
  if (collective == "sendrecv") {  // a pipeline's exchange: send to the next rank, receive from the one before
    const int next = (me + 1) % n, before = (me + n - 1) % n;
    return {1.0, 1, 1, 1,
            [=](Buffers& b, std::size_t count) {
              auto sent = comm->send(b.in.data(), count, next);
              comm->recv(b.out.data(), count, before)->wait();
              sent->wait();
            },
            [=](std::size_t i, std::size_t) { return element(before, i); }};
  }
  throw std::invalid_argument("unknown collective '" + collective +
                              "'; use allreduce, all_gather, reduce_scatter, broadcast or sendrecv");
}

// Fills the buffers of `c` for `count` with this rank's known data (and zeros in `out` when it is not the input)
// and puts them where the backend wants them.
void prepare(const Case& c, Buffers& b, int rank, std::size_t count) {
  BenchBuffer& known = c.in_chunks > 0 ? b.in : b.out;
  known.host.resize(count * (c.in_chunks > 0 ? c.in_chunks : c.out_chunks));
  for (std::size_t i = 0; i < known.host.size(); ++i) known.host[i] = element(rank, i);
  if (c.in_chunks > 0) {
    b.out.host.assign(count * c.out_chunks, 0.0f);
    b.in.upload();
  }
  b.out.upload();
}

// Keeps this thread computing for `ms` milliseconds (CollectiveBenchOptions::busy_ms).
void compute_for(double ms) {
  const auto until = Clock::now() + std::chrono::duration<double, std::milli>(ms);
  volatile double sum = 0;
  while (Clock::now() < until) {
    for (int i = 0; i < 1000; ++i) sum = sum + i * 1e-9;
  }
}

// Elements of `out` that differ from the expected result of one run.
std::size_t count_wrong(const Case& c, Buffers& b, std::size_t count) {
  b.out.download();
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < count * c.out_chunks; ++i) wrong += b.out.host[i] != c.expected(i, count);
  return wrong;
}

}  // namespace

std::vector<CollectiveBenchRow> run_collective_bench(Communicator& comm, const CollectiveBenchOptions& options) {
  if (options.iterations < 1 || options.warmup_iterations < 0 || !(options.busy_ms >= 0)) {
    throw std::invalid_argument("collective bench: iterations must be at least 1, warm-up and busy time at least 0");
  }
  if (options.user_buffers && comm.device_buffers()) {
    throw std::invalid_argument("collective bench: the " + comm.backend() + " backend works on device memory, so it "
                                "cannot use user (host) buffers; leave them to the communicator");
  }
  const Case c = make_case(comm, options.collective);
  Buffers buffers(comm, !options.user_buffers);
  std::mt19937 draws(20240520);  // the same gaps on every rank
  std::uniform_real_distribution<double> gap(0.0, options.busy_ms);
  // One run after its gap of compute; its own time.
  auto timed_run = [&](std::size_t count) {
    if (options.busy_ms > 0) compute_for(gap(draws));
    const auto start = Clock::now();
    c.run(buffers, count);
    return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  };
  std::vector<CollectiveBenchRow> rows;
  for (std::size_t bytes : options.sizes_bytes) {
    CollectiveBenchRow row;
    row.count = bytes / sizeof(float) / c.chunks;
    row.bytes = row.count * c.chunks * sizeof(float);
    prepare(c, buffers, comm.rank(), row.count);
    for (int i = 0; i < options.warmup_iterations; ++i) timed_run(row.count);
    double total_ms = 0;
    for (int i = 0; i < options.iterations; ++i) total_ms += timed_run(row.count);
    row.time_ms = total_ms / options.iterations;
    row.algbw_gbps = row.time_ms > 0 ? static_cast<double>(row.bytes) / (row.time_ms * 1e6) : 0;
    row.busbw_gbps = row.algbw_gbps * c.bus_factor;
    prepare(c, buffers, comm.rank(), row.count);
    c.run(buffers, row.count);
    row.wrong = count_wrong(c, buffers, row.count);
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
