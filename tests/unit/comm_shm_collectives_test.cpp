// The shm backend between real processes (fork): every collective against a reference computed here, in the rank
// order the backend states, bit for bit; odd sizes that take many pipelined chunks; 1 to 4 ranks; user buffers,
// buffers in the segment (allocate) and a mix of both; the same bits run after run; the segment's file and arena.
#include <doctest/doctest.h>
#include <sys/stat.h>

#include <algorithm>

#include "tests/unit/comm_shm_ranks.h"
#include "trainer/kernels/half.h"

using namespace shm_test;
using dtrain::trainer::kernels::Dtype;

namespace {

// How a rank holds its buffers: all user memory, all in the segment, or even ranks in the segment and odd ones not.
enum class Placement { user, segment, mixed };

const char* placement_name(Placement p) {
  return p == Placement::user ? "user" : p == Placement::segment ? "segment" : "mixed";
}

// A buffer of n floats placed as `placement` asks for this rank.
class Buffer {
 public:
  Buffer(ShmCommunicator& comm, std::size_t n, Placement placement) : comm_(comm) {
    const bool in_segment = placement == Placement::segment || (placement == Placement::mixed && comm.rank() % 2 == 0);
    if (in_segment) {
      placed_ = comm.allocate(std::max<std::size_t>(n, 1));
      if (!comm.in_segment(placed_, n * sizeof(float))) throw std::runtime_error("allocate() is not in the segment");
    } else {
      user_.resize(std::max<std::size_t>(n, 1));
    }
  }
  ~Buffer() { comm_.release(placed_); }
  float* data() { return placed_ != nullptr ? placed_ : user_.data(); }

 private:
  ShmCommunicator& comm_;
  float* placed_ = nullptr;
  std::vector<float> user_;
};

void check_all_ranks_ok(const RankRun& run) {
  for (std::size_t r = 0; r < run.reports.size(); ++r) {
    CAPTURE(r);
    INFO(run.reports[r].message);
    CHECK(run.reports[r].code == 0);
  }
}

const std::size_t kOddSizes[] = {1, 3, 17, 1000, 4097, 100003};

}  // namespace

TEST_CASE("shm allreduce: the rank-order sum bit for bit, 1 to 4 ranks, odd sizes, user, segment and mixed buffers") {
  for (int world = 1; world <= 4; ++world) {
    CAPTURE(world);
    const RankRun run = run_ranks(world, [world](ShmCommunicator& comm, RankReport&) {
      for (Placement placement : {Placement::user, Placement::segment, Placement::mixed}) {
        for (std::size_t n : kOddSizes) {
          Buffer buffer(comm, n, placement);
          const std::vector<float> mine = data_of(comm.rank(), n);
          std::copy(mine.begin(), mine.end(), buffer.data());
          comm.allreduce(buffer.data(), n)->wait();
          const std::vector<float> want = rank_order_sum(world, n);
          expect_same(buffer.data(), want.data(), n,
                      std::string("allreduce of ") + std::to_string(n) + ", " + placement_name(placement));
        }
      }
    });
    check_all_ranks_ok(run);
  }
}

TEST_CASE("shm reduce_scatter, all_gather and broadcast against references, in and out of place") {
  for (int world = 1; world <= 4; ++world) {
    CAPTURE(world);
    const RankRun run = run_ranks(world, [world](ShmCommunicator& comm, RankReport&) {
      const int me = comm.rank();
      const auto w = static_cast<std::size_t>(world);
      for (Placement placement : {Placement::user, Placement::segment, Placement::mixed}) {
        for (std::size_t m : {std::size_t{1}, std::size_t{5}, std::size_t{1031}}) {
          const std::string how = std::to_string(m) + " per rank, " + placement_name(placement);
          const std::vector<float> want_sum = rank_order_sum(world, w * m);
          Buffer in(comm, w * m, placement), out(comm, m, placement);
          const std::vector<float> mine = data_of(me, w * m);
          std::copy(mine.begin(), mine.end(), in.data());
          comm.reduce_scatter(in.data(), out.data(), m)->wait();
          expect_same(out.data(), want_sum.data() + me * m, m, "reduce_scatter of " + how);
          std::copy(mine.begin(), mine.end(), in.data());
          comm.reduce_scatter(in.data(), in.data() + me * m, m)->wait();
          expect_same(in.data() + me * m, want_sum.data() + me * m, m, "in-place reduce_scatter of " + how);

          std::vector<float> want_gather;
          for (int r = 0; r < world; ++r) {
            const std::vector<float> x = data_of(r, m);
            want_gather.insert(want_gather.end(), x.begin(), x.end());
          }
          Buffer gathered(comm, w * m, placement);
          const std::vector<float> piece = data_of(me, m);
          std::copy(piece.begin(), piece.end(), out.data());
          comm.all_gather(out.data(), gathered.data(), m)->wait();
          expect_same(gathered.data(), want_gather.data(), w * m, "all_gather of " + how);
          std::fill(gathered.data(), gathered.data() + w * m, 0.0f);
          std::copy(piece.begin(), piece.end(), gathered.data() + me * m);
          comm.all_gather(gathered.data() + me * m, gathered.data(), m)->wait();
          expect_same(gathered.data(), want_gather.data(), w * m, "in-place all_gather of " + how);

          const int root = world - 1;
          std::copy(mine.begin(), mine.end(), in.data());
          comm.broadcast(in.data(), w * m, root)->wait();
          const std::vector<float> want_root = data_of(root, w * m);
          expect_same(in.data(), want_root.data(), w * m, "broadcast from the last rank of " + how);
        }
      }
    });
    check_all_ranks_ok(run);
  }
}

namespace {

std::vector<std::uint16_t> halves_of(int rank, std::size_t n, Dtype type) {
  std::vector<std::uint16_t> out(n);
  dtrain::trainer::kernels::to_half(out.data(), data_of(rank, n).data(), n, type);
  return out;
}

// The 16-bit sum the backend states: rank 0's value, then each next rank's added in fp32 and rounded back.
std::vector<std::uint16_t> half_rank_order_sum(int world, std::size_t n, Dtype type) {
  std::vector<std::uint16_t> total = halves_of(0, n, type);
  for (int r = 1; r < world; ++r) {
    const std::vector<std::uint16_t> x = halves_of(r, n, type);
    dtrain::trainer::kernels::add_half(total.data(), total.data(), x.data(), n, type);
  }
  return total;
}

}  // namespace

TEST_CASE("shm 16-bit collectives: rounded after every addition, in rank order") {
  const int world = 3;
  const RankRun run = run_ranks(world, [](ShmCommunicator& comm, RankReport&) {
    const int me = comm.rank();
    for (Dtype type : {Dtype::bf16, Dtype::fp16}) {
      const std::size_t m = 4099;
      const std::string name = dtrain::trainer::kernels::dtype_name(type);
      std::vector<std::uint16_t> data = halves_of(me, world * m, type);
      const std::vector<std::uint16_t> want = half_rank_order_sum(world, world * m, type);
      comm.allreduce_half(data.data(), data.size(), type)->wait();
      expect_same(data.data(), want.data(), data.size(), "allreduce_half " + name);
      data = halves_of(me, world * m, type);
      std::vector<std::uint16_t> out(m);
      comm.reduce_scatter_half(data.data(), out.data(), m, type)->wait();
      expect_same(out.data(), want.data() + me * m, m, "reduce_scatter_half " + name);
      std::vector<std::uint16_t> gathered(world * m);
      comm.all_gather_half(out.data(), gathered.data(), m)->wait();
      expect_same(gathered.data(), want.data(), world * m, "all_gather_half " + name);
    }
    bool refused = false;
    try {
      std::vector<std::uint16_t> x(2);
      comm.reduce_scatter_half(x.data(), x.data(), 1, Dtype::fp32);
    } catch (const CommError&) {
      refused = true;
    }
    if (!refused) throw std::runtime_error("reduce_scatter_half accepted fp32");
  });
  check_all_ranks_ok(run);
}

TEST_CASE("shm allreduce gives the same bits in every run and on every rank") {
  const std::size_t n = 100003;
  const auto one_run = [n] {
    return run_ranks(4, [n](ShmCommunicator& comm, RankReport& report) {
      std::vector<float> data = data_of(comm.rank(), n, 11);
      comm.allreduce(data.data(), n)->wait();
      report.hash = fnv1a(data.data(), n * sizeof(float));
    });
  };
  const RankRun first = one_run();
  const RankRun second = one_run();
  check_all_ranks_ok(first);
  check_all_ranks_ok(second);
  for (int r = 0; r < 4; ++r) {
    CAPTURE(r);
    CHECK(first.reports[r].hash == first.reports[0].hash);
    CHECK(second.reports[r].hash == first.reports[0].hash);
  }
}

TEST_CASE("the segment is created 0600 under /dev/shm and its name is gone once every rank joined") {
  RunOptions options;
  options.before_join = [](int rank) {
    if (rank == 1) std::this_thread::sleep_for(std::chrono::milliseconds(500));
  };
  unsigned mode = 0;
  options.during = [&](std::vector<pid_t>&, RankReport*, const std::string& name) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(400);
    struct stat st {};
    while (mode == 0 && std::chrono::steady_clock::now() < deadline) {
      if (::stat(("/dev/shm/" + name).c_str(), &st) == 0) mode = st.st_mode & 0777;
    }
  };
  const RankRun run = run_ranks(2, [](ShmCommunicator& comm, RankReport&) {
    float x = 1.0f;
    comm.allreduce(&x, 1)->wait();
    if (x != 2.0f) throw std::runtime_error("1 + 1 is not " + std::to_string(x));
  }, options);
  check_all_ranks_ok(run);
  CHECK(mode == 0600);
  struct stat st {};
  CHECK(::stat(("/dev/shm/" + run.name).c_str(), &st) != 0);
}

TEST_CASE("shm allocate: buffers in the arena, reused after release, errors that say what to do") {
  ShmCommOptions options;
  options.name = fresh_name();
  options.geometry.arena_bytes = std::size_t{8} << 20;
  ShmCommunicator comm(options);
  float* a = comm.allocate(1000);
  float* b = comm.allocate(1 << 20);
  CHECK(comm.in_segment(a, 1000 * sizeof(float)));
  CHECK(comm.in_segment(b, (1 << 20) * sizeof(float)));
  std::vector<float> outside(10);
  CHECK_FALSE(comm.in_segment(outside.data(), sizeof(float)));
  CHECK(comm.allocate(0) == nullptr);
  comm.release(a);
  CHECK(comm.allocate(10) == a);  // first fit: the freed block comes back
  CHECK_THROWS_AS(comm.release(outside.data()), std::invalid_argument);
  CHECK_THROWS_WITH_AS(comm.allocate(std::size_t{4} << 20), doctest::Contains("arena of 8 MiB per rank has no room"),
                       CommError);
  comm.release(b);
  float* big = comm.allocate((std::size_t{2} << 20) - 2048);  // all but a's page: fits once b is back
  CHECK(big != nullptr);
  comm.release(big);
}
