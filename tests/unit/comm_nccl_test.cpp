// The NCCL backend. Everywhere: the unique-id exchange through a real store (StoreService on 127.0.0.1:0, ranks
// as threads), and the errors of the nccl backend's choice. Without a GPU: constructing the communicator fails
// with a CommError that names the missing GPU. With a GPU: world-1 collectives on device buffers, checked exactly
// (values are integers held in floats), and the bench driver on device buffers.
#include <doctest/doctest.h>
#include <stdlib.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "tests/unit/scoped_env.h"
#include "trainer/comm/bench.h"
#include "trainer/comm/communicator.h"
#include "trainer/kernels/half.h"

#ifdef DTRAIN_HAVE_NCCL
#include <future>
#include <memory>
#include <thread>

#include "worker/store/client.h"
#include "agent/store/testing/in_process_store.h"
#include "trainer/comm/nccl/communicator.h"
#include "trainer/comm/nccl/runtime.h"
#include "trainer/comm/nccl/start.h"
#endif

using namespace std::chrono_literals;
using dtrain::trainer::CommError;
using dtrain::trainer::CommOptions;
using dtrain::trainer::make_communicator_from_env;

namespace {

// The CommError message `call` throws; fails the test when it throws nothing.
std::string comm_error_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const CommError& error) {
    return error.what();
  }
  FAIL("expected a CommError");
  return "";
}

CommOptions with_backend(const std::string& backend) {
  CommOptions options;
  options.backend = backend;
  options.timeout = 10s;
  return options;
}

}  // namespace

TEST_CASE("nccl backend choice: unknown names are refused, one rank gets the local communicator whatever the CPU backend") {
  ScopedEnv env({{"WORLD_SIZE", nullptr}, {"RANK", nullptr}, {"DTRAIN_COMM_BACKEND", nullptr}});
  const std::string bad = comm_error_of([] { make_communicator_from_env(with_backend("mpi")); });
  CHECK(bad.find("'mpi'") != std::string::npos);
  CHECK(bad.find("gloo") != std::string::npos);
  CHECK(bad.find("nccl") != std::string::npos);
  CHECK(make_communicator_from_env(with_backend("auto"))->backend() == "local");
  CHECK(make_communicator_from_env(with_backend("gloo"))->backend() == "local");
  {
    ScopedEnv typo({{"DTRAIN_COMM_BACKEND", "ncl"}});
    const std::string message = comm_error_of([] { make_communicator_from_env(with_backend("")); });
    CHECK(message.find("DTRAIN_COMM_BACKEND='ncl'") != std::string::npos);
    // "auto" asked for explicitly does not read the variable.
    CHECK(make_communicator_from_env(with_backend("auto"))->backend() == "local");
    // An explicit choice wins over the variable.
    CHECK(make_communicator_from_env(with_backend("gloo"))->backend() == "local");
  }
}

#ifndef DTRAIN_HAVE_NCCL

TEST_CASE("nccl backend in a build without NCCL: a clear error") {
  ScopedEnv env({{"WORLD_SIZE", nullptr}, {"DTRAIN_COMM_BACKEND", nullptr}});
  const std::string message = comm_error_of([] { make_communicator_from_env(with_backend("nccl")); });
  CHECK(message.find("dtrain was built without NCCL") != std::string::npos);
  ScopedEnv chosen({{"DTRAIN_COMM_BACKEND", "nccl"}});
  CHECK(comm_error_of([] { make_communicator_from_env(with_backend("")); }).find("built without NCCL") !=
        std::string::npos);
}

#else  // DTRAIN_HAVE_NCCL

using dtrain::trainer::Communicator;
using dtrain::trainer::cuda_device_count;
using dtrain::trainer::exchange_nccl_unique_id;
using dtrain::trainer::NcclCommOptions;
using dtrain::trainer::NcclCommunicator;

namespace {

constexpr char kNcclToken[] = "comm-nccl-test-token-round-0";

// The job's store served in-process over real gRPC, and clients of it.
struct NcclStoreServer : dtrain::store::testing::InProcessStore {
  NcclStoreServer() : InProcessStore(kNcclToken) {}

  std::unique_ptr<dtrain::store::StoreClient> client(std::chrono::milliseconds timeout = 10s) {
    return std::make_unique<dtrain::store::StoreClient>(address, token,
                                                        dtrain::store::StoreClientOptions{5s, timeout});
  }
};

bool have_gpu() { return cuda_device_count() > 0; }

}  // namespace

TEST_CASE("nccl unique-id exchange through the job's store: rank 0 publishes, every rank gets the same id") {
  NcclStoreServer server;
  constexpr int kRanks = 3;
  std::vector<std::future<std::string>> ranks;
  // The others start waiting before rank 0 publishes.
  for (int rank = kRanks - 1; rank >= 0; --rank) {
    ranks.push_back(std::async(std::launch::async, [&server, rank] {
      if (rank == 0) std::this_thread::sleep_for(200ms);
      auto client = server.client();
      return exchange_nccl_unique_id(client.get(), "nccl/7", rank, kRanks, 10s);
    }));
  }
  std::vector<std::string> ids;
  for (auto& rank : ranks) ids.push_back(rank.get());
  REQUIRE(ids[0].size() == 128);
  CHECK(ids[0] != std::string(128, '\0'));
  for (const auto& id : ids) CHECK(id == ids[0]);
  // The value is hex in the store under the communicator's key.
  auto reader = server.client();
  CHECK(reader->get("nccl/7", 1s).size() == 256);
  // A second communicator's id differs.
  const std::string other = exchange_nccl_unique_id(reader.get(), "nccl/8", 0, 2, 1s);
  CHECK(other != ids[0]);
  // One rank needs no store.
  CHECK(exchange_nccl_unique_id(nullptr, "nccl/9", 0, 1, 1s).size() == 128);
}

TEST_CASE("nccl unique-id exchange: a rank 0 that never publishes, or a foreign value, fails clearly") {
  NcclStoreServer server;
  auto client = server.client(1s);
  const auto started = std::chrono::steady_clock::now();
  const std::string missing =
      comm_error_of([&] { exchange_nccl_unique_id(client.get(), "nccl/0", 1, 2, 500ms); });
  CHECK(std::chrono::steady_clock::now() - started < 5s);
  CHECK(missing.find("rank 1 of 2") != std::string::npos);
  CHECK(missing.find("'nccl/0'") != std::string::npos);
  CHECK(missing.find("rank 0 did not publish") != std::string::npos);

  client->set("nccl/1", "not-an-id");
  const std::string foreign = comm_error_of([&] { exchange_nccl_unique_id(client.get(), "nccl/1", 1, 2, 1s); });
  CHECK(foreign.find("hex-encoded") != std::string::npos);

  CHECK(comm_error_of([] { exchange_nccl_unique_id(nullptr, "nccl/2", 1, 2, 1s); }).find("no store") !=
        std::string::npos);
}

TEST_CASE("nccl communicator without a GPU: a CommError that names the missing GPU") {
  if (have_gpu()) {
    MESSAGE("a GPU is visible: the no-GPU errors are not exercised here");
    return;
  }
  NcclCommOptions options;
  const std::string direct = comm_error_of([&] { NcclCommunicator comm(nullptr, options); });
  CHECK(direct.find("no CUDA GPU") != std::string::npos);
  CHECK(direct.find("rank 0 of 1") != std::string::npos);
  CHECK(direct.find("gloo") != std::string::npos);

  ScopedEnv env({{"WORLD_SIZE", nullptr}, {"RANK", nullptr}, {"LOCAL_RANK", nullptr},
                     {"DTRAIN_COMM_BACKEND", nullptr}});
  const std::string from_env = comm_error_of([] { make_communicator_from_env(with_backend("nccl")); });
  CHECK(from_env.find("no CUDA GPU") != std::string::npos);
  ScopedEnv chosen({{"DTRAIN_COMM_BACKEND", "nccl"}});
  CHECK(comm_error_of([] { make_communicator_from_env(with_backend("")); }).find("no CUDA GPU") !=
        std::string::npos);
}

TEST_CASE("nccl backend from the environment: bad RANK, LOCAL_RANK and a GPU that does not exist") {
  {
    ScopedEnv env({{"WORLD_SIZE", "2"}, {"RANK", nullptr}});
    CHECK(comm_error_of([] { make_communicator_from_env(with_backend("nccl")); }).find("RANK is not set") !=
          std::string::npos);
  }
  {
    ScopedEnv env({{"WORLD_SIZE", "1"}, {"RANK", "0"}, {"LOCAL_RANK", "x"}});
    CHECK(comm_error_of([] { make_communicator_from_env(with_backend("nccl")); }).find("LOCAL_RANK='x'") !=
          std::string::npos);
  }
  if (have_gpu()) {
    ScopedEnv env({{"WORLD_SIZE", "1"}, {"RANK", "0"}, {"LOCAL_RANK", "64"}});
    const std::string message = comm_error_of([] { make_communicator_from_env(with_backend("nccl")); });
    CHECK(message.find("GPU 64 (LOCAL_RANK) does not exist") != std::string::npos);
  }
}

TEST_CASE("nccl start: the missing ranks named, shortened past 16") {
  using dtrain::trainer::missing_ranks_text;
  CHECK(missing_ranks_text({}, 4) == "");
  CHECK(missing_ranks_text({1}, 2) == "rank 1 of 2");
  CHECK(missing_ranks_text({3, 5}, 8) == "ranks 3, 5 of 8");
  std::vector<int> many(20);
  for (int i = 0; i < 20; ++i) many[i] = i + 100;
  CHECK(missing_ranks_text(many, 512) ==
        "ranks 100, 101, 102, 103, 104, 105, 106, 107, 108, 109, 110, 111, 112, 113, 114, 115 and 4 more of 512");
}

TEST_CASE("nccl errors carry NCCL's own text: ncclGetErrorString and ncclGetLastError's detail (no GPU needed)") {
  using dtrain::trainer::nccl_runtime::nccl_text;
  using dtrain::trainer::nccl_runtime::rt;
  std::string why;
  if (dtrain::trainer::nccl_runtime::load(&why) == nullptr) {
    MESSAGE("libcudart or libnccl cannot be loaded here (" << why << "): NCCL's error text is not checked");
    return;
  }
  // A call NCCL refuses without a GPU: it keeps its WARN line as the last error (whatever NCCL_DEBUG says).
  ncclResult_t state = ncclSuccess;
  REQUIRE(rt().ncclCommGetAsyncError(nullptr, &state) == ncclInvalidArgument);
  const std::string text = nccl_text(ncclInvalidArgument);
  CHECK(text.rfind(rt().ncclGetErrorString(ncclInvalidArgument), 0) == 0);
  CHECK(text.find("comm argument is NULL") != std::string::npos);
  MESSAGE(text);
  // Work::wait and enqueue (work.cpp) put this text after the collective and the rank; so for a peer's failure too.
  CHECK(nccl_text(ncclRemoteError).rfind(rt().ncclGetErrorString(ncclRemoteError), 0) == 0);
}

TEST_CASE("nccl start: a rank that never joins is an error naming it within the timeout, not a hang (needs a GPU)") {
  if (!have_gpu()) {
    MESSAGE("no GPU visible: the bounded start is not run here");
    return;
  }
  NcclStoreServer server;
  dtrain::trainer::NcclCommOptions options;
  options.rank = 0;
  options.size = 2;
  options.key = "nccl/lonely";
  options.timeout = 3s;
  const auto started = std::chrono::steady_clock::now();
  std::shared_ptr<dtrain::store::StoreClient> store = server.client();
  const std::string message =
      comm_error_of([&] { dtrain::trainer::NcclCommunicator comm(store, options); });
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  CHECK(message.find("rank 1 of 2 never joined") != std::string::npos);
  CHECK(seconds < 10.0);
  MESSAGE("refused in " << seconds << " s: " << message);
}

TEST_CASE("nccl order_after: a collective reads what the producer stream wrote before it was issued (needs a GPU)") {
  if (!have_gpu()) {
    MESSAGE("no GPU visible: the stream ordering is not run here");
    return;
  }
  using dtrain::trainer::nccl_runtime::rt;
  ScopedEnv env({{"WORLD_SIZE", "1"}, {"RANK", "0"}, {"LOCAL_RANK", "0"}, {"DTRAIN_COMM_BACKEND", nullptr}});
  auto comm = make_communicator_from_env(with_backend("nccl"));
  cudaStream_t producer = nullptr;
  REQUIRE(rt().cudaStreamCreateWithFlags(&producer, cudaStreamNonBlocking) == cudaSuccess);
  comm->order_after(producer);
  // The producer is kept busy (8 copies of 256 MiB) before it writes `in`; a collective not ordered after it would
  // read the zeros `in` held before.
  constexpr std::size_t kBig = std::size_t{64} << 20, kCount = 1024;
  float* big_a = comm->allocate(kBig);
  float* big_b = comm->allocate(kBig);
  float* in = comm->allocate(kCount);
  float* out = comm->allocate(kCount);
  const std::vector<float> zeros(kCount, 0.0f), values(kCount, 7.0f);
  comm->copy_in(in, zeros.data(), kCount);
  comm->copy_in(out, zeros.data(), kCount);
  float* source = comm->allocate(kCount);
  comm->copy_in(source, values.data(), kCount);
  for (int i = 0; i < 8; ++i) {
    REQUIRE(rt().cudaMemcpyAsync(big_b, big_a, kBig * sizeof(float), cudaMemcpyDeviceToDevice, producer) ==
            cudaSuccess);
  }
  // Device to device: the call returns at once (a copy from pageable host memory could wait for the stream).
  REQUIRE(rt().cudaMemcpyAsync(in, source, kCount * sizeof(float), cudaMemcpyDeviceToDevice, producer) ==
          cudaSuccess);
  comm->all_gather(in, out, kCount)->wait();
  std::vector<float> back(kCount, -1.0f);
  comm->copy_out(back.data(), out, kCount);
  CHECK(back == values);
  REQUIRE(rt().cudaStreamSynchronize(producer) == cudaSuccess);
  for (float* p : {big_a, big_b, in, out, source}) comm->release(p);
  rt().cudaStreamDestroy(producer);
}

TEST_CASE("nccl world-1 collectives on device buffers (needs a GPU)") {
  if (!have_gpu()) {
    MESSAGE("no GPU visible: the device collectives are not run here");
    return;
  }
  ScopedEnv env({{"WORLD_SIZE", "1"}, {"RANK", "0"}, {"LOCAL_RANK", "0"}, {"DTRAIN_COMM_BACKEND", nullptr}});
  auto comm = make_communicator_from_env(with_backend("nccl"));
  REQUIRE(comm->backend() == "nccl");
  REQUIRE(comm->device_buffers());
  CHECK(comm->rank() == 0);
  CHECK(comm->size() == 1);

  constexpr std::size_t kCount = (1 << 20) + 3;
  std::vector<float> host(kCount), back(kCount, -1.0f);
  for (std::size_t i = 0; i < kCount; ++i) host[i] = static_cast<float>(static_cast<int>(i % 1000) - 500);
  float* a = comm->allocate(kCount);
  float* b = comm->allocate(kCount);

  SUBCASE("allreduce") {
    comm->copy_in(a, host.data(), kCount);
    auto work = comm->allreduce(a, kCount);
    work->wait();
    CHECK(work->done());
    CHECK(work->elapsed_ms() > 0);
    comm->copy_out(back.data(), a, kCount);
    CHECK(back == host);
  }
  SUBCASE("all_gather, out of place and in place") {
    comm->copy_in(a, host.data(), kCount);
    comm->copy_in(b, std::vector<float>(kCount, 0.0f).data(), kCount);
    comm->all_gather(a, b, kCount)->wait();
    comm->copy_out(back.data(), b, kCount);
    CHECK(back == host);
    comm->all_gather(b, b, kCount)->wait();
    comm->copy_out(back.data(), b, kCount);
    CHECK(back == host);
  }
  SUBCASE("reduce_scatter") {
    comm->copy_in(a, host.data(), kCount);
    comm->copy_in(b, std::vector<float>(kCount, 0.0f).data(), kCount);
    comm->reduce_scatter(a, b, kCount)->wait();
    comm->copy_out(back.data(), b, kCount);
    CHECK(back == host);
  }
  SUBCASE("broadcast; a bad root is refused") {
    comm->copy_in(a, host.data(), kCount);
    comm->broadcast(a, kCount, 0)->wait();
    comm->copy_out(back.data(), a, kCount);
    CHECK(back == host);
    CHECK(comm_error_of([&] { comm->broadcast(a, kCount, 1); }).find("root") != std::string::npos);
  }
  SUBCASE("16-bit allreduce, reduce_scatter (bf16, fp16) and all_gather: the types taken, the values unchanged") {
    // Packed 16-bit values in float-sized device buffers: kCount floats hold 2 * kCount of them. 0x3F80 is bf16 1.0
    // and 0x3C00 fp16 1.0; the pattern varies so that a byte-level mix-up would show.
    std::vector<std::uint16_t> halves(2 * kCount), halves_back(2 * kCount);
    for (std::size_t i = 0; i < halves.size(); ++i) halves[i] = static_cast<std::uint16_t>(0x3C00 + i % 256);
    for (const auto type : {dtrain::trainer::kernels::Dtype::bf16, dtrain::trainer::kernels::Dtype::fp16}) {
      CAPTURE(dtrain::trainer::kernels::dtype_name(type));
      comm->copy_in(a, reinterpret_cast<const float*>(halves.data()), kCount);
      comm->allreduce_half(reinterpret_cast<std::uint16_t*>(a), 2 * kCount, type)->wait();
      comm->copy_out(reinterpret_cast<float*>(halves_back.data()), a, kCount);
      CHECK(halves_back == halves);
    }
    comm->copy_in(a, reinterpret_cast<const float*>(halves.data()), kCount);
    comm->copy_in(b, std::vector<float>(kCount, 0.0f).data(), kCount);
    comm->all_gather_half(reinterpret_cast<const std::uint16_t*>(a), reinterpret_cast<std::uint16_t*>(b), 2 * kCount)
        ->wait();
    comm->copy_out(reinterpret_cast<float*>(halves_back.data()), b, kCount);
    CHECK(halves_back == halves);
    for (const auto type : {dtrain::trainer::kernels::Dtype::bf16, dtrain::trainer::kernels::Dtype::fp16}) {
      CAPTURE(dtrain::trainer::kernels::dtype_name(type));
      comm->copy_in(b, std::vector<float>(kCount, 0.0f).data(), kCount);
      comm->reduce_scatter_half(reinterpret_cast<const std::uint16_t*>(a), reinterpret_cast<std::uint16_t*>(b),
                                2 * kCount, type)
          ->wait();
      comm->copy_out(reinterpret_cast<float*>(halves_back.data()), b, kCount);
      CHECK(halves_back == halves);
    }
    const std::string refused = comm_error_of([&] {
      comm->reduce_scatter_half(reinterpret_cast<const std::uint16_t*>(a), reinterpret_cast<std::uint16_t*>(b),
                                2 * kCount, dtrain::trainer::kernels::Dtype::fp32);
    });
    CHECK(refused.find("use reduce_scatter() for fp32") != std::string::npos);
  }
  SUBCASE("many collectives in flight, waited for in issue order") {
    comm->copy_in(a, host.data(), kCount);
    std::vector<std::shared_ptr<dtrain::trainer::Work>> works;
    for (int i = 0; i < 16; ++i) works.push_back(comm->allreduce(a, kCount));
    for (auto& work : works) work->wait();
    comm->copy_out(back.data(), a, kCount);
    CHECK(back == host);
  }
  SUBCASE("a host pointer is refused with a clear error, and the communicator stays usable") {
    const std::string message = comm_error_of([&] { comm->allreduce(host.data(), kCount); });
    CHECK(message.find("host memory") != std::string::npos);
    CHECK(message.find("allreduce") != std::string::npos);
    comm->copy_in(a, host.data(), kCount);
    comm->allreduce(a, kCount)->wait();
    comm->copy_out(back.data(), a, kCount);
    CHECK(back == host);
  }
  comm->release(a);
  comm->release(b);
}

TEST_CASE("nccl bench driver on device buffers: every collective checks out (needs a GPU)") {
  if (!have_gpu()) {
    MESSAGE("no GPU visible: the device bench is not run here");
    return;
  }
  NcclCommOptions options;
  NcclCommunicator comm(nullptr, options);
  for (const char* collective : {"allreduce", "all_gather", "reduce_scatter", "broadcast"}) {
    CAPTURE(collective);
    dtrain::trainer::CollectiveBenchOptions bench;
    bench.collective = collective;
    bench.sizes_bytes = {std::size_t{1} << 20, 4096, (std::size_t{16} << 20) + 12};
    bench.iterations = 3;
    bench.warmup_iterations = 1;
    const auto rows = dtrain::trainer::run_collective_bench(comm, bench);
    REQUIRE(rows.size() == 3);
    for (const auto& row : rows) {
      CHECK(row.wrong == 0);
      CHECK(row.time_ms > 0);
    }
    CHECK(rows[2].count == ((std::size_t{16} << 20) + 12) / 4);
  }
}

#endif  // DTRAIN_HAVE_NCCL
