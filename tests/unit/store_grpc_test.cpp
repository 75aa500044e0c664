// The store over real gRPC: StoreService on 127.0.0.1:0 in this process, reached with StoreClient and raw stubs.
#include <doctest/doctest.h>
#include <grpcpp/grpcpp.h>
#include <stdlib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <fstream>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "worker/store/client.h"
#include "agent/store/store.h"
#include "agent/store/testing/in_process_store.h"
#include "dtrain/v1/store.grpc.pb.h"
#include "tests/unit/eventually.h"
#include "tests/unit/contains.h"

using namespace std::chrono_literals;
using dtrain::store::StoreClient;
using dtrain::store::StoreClientOptions;
using dtrain::store::StoreError;
using Clock = std::chrono::steady_clock;

namespace {

constexpr char kGrpcToken[] = "0123456789abcdef-round-0";

int process_threads() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("Threads:", 0) == 0) return std::stoi(line.substr(8));
  }
  return -1;
}

struct Server : dtrain::store::testing::InProcessStore {
  explicit Server(dtrain::store::StoreLimits limits = {}) : InProcessStore(kGrpcToken, limits) {}

  StoreClient client(std::string token = kGrpcToken) {
    return StoreClient(address, std::move(token), {2000ms, 10000ms});
  }

  std::unique_ptr<dtrain::v1::Store::Stub> stub() {
    return dtrain::v1::Store::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  }
};

template <class Body>
StoreError store_error(Body body) {
  try {
    body();
  } catch (const StoreError& error) {
    return error;
  }
  FAIL("expected a StoreError");
  return StoreError(StoreError::Kind::other, "");
}

}  // namespace

TEST_CASE("every operation works through the client") {
  Server server;
  StoreClient client = server.client();
  CHECK(client.address() == server.address);

  client.set("k", std::string("a\0b", 3));
  CHECK(client.get("k") == std::string("a\0b", 3));
  CHECK(client.add("n", 2) == 2);
  CHECK(client.add("n", 40) == 42);
  CHECK(client.get("n") == "42");

  CHECK(client.compare_set("cas", "", "first") == "first");
  CHECK(client.compare_set("missing", "expected", "x") == "expected");
  CHECK(client.compare_set("cas", "first", "second") == "second");
  CHECK(client.compare_set("cas", "wrong", "third") == "second");

  CHECK(client.check({"k", "n", "cas"}));
  CHECK_FALSE(client.check({"k", "missing"}));
  CHECK(client.num_keys() == 3);
  CHECK(client.delete_key("k"));
  CHECK_FALSE(client.delete_key("k"));
  CHECK(client.num_keys() == 2);
  client.wait({"n", "cas"}, 1000ms);

  std::string big(8 << 20, 'x');
  big[12345] = 'y';
  client.set("big", big);
  CHECK(client.get("big") == big);

  StoreError not_integer = store_error([&] { client.add("cas", 1); });
  CHECK(not_integer.kind() == StoreError::Kind::not_an_integer);
  CHECK(contains(not_integer.what(), "store add 'cas' failed at " + server.address));
}

TEST_CASE("a wrong or missing token is refused without revealing the right one") {
  Server server;
  StoreClient wrong = server.client("not-the-token");
  StoreError error = store_error([&] { wrong.set("k", "v"); });
  CHECK(error.kind() == StoreError::Kind::unauthenticated);
  CHECK(contains(error.what(), "store set 'k' was refused by the store at " + server.address));
  CHECK(contains(error.what(), "matches no open round"));
  CHECK(contains(error.what(), "DTRAIN_JOB_TOKEN"));
  CHECK_FALSE(contains(error.what(), kGrpcToken));
  CHECK(server.client().num_keys() == 0);

  auto stub = server.stub();
  grpc::ClientContext context;
  dtrain::v1::NumKeysResponse response;
  grpc::Status status = stub->NumKeys(&context, {}, &response);
  CHECK(status.error_code() == grpc::StatusCode::UNAUTHENTICATED);
  CHECK(contains(status.error_message(), "'dtrain-token' metadata"));
}

TEST_CASE("a token too long for gRPC metadata is refused before any call, naming its variable, size and limit") {
  Server server;
  // At the limit the token still reaches the store, which refuses it as any wrong token.
  StoreClient longest = server.client(std::string(dtrain::store::kMaxTokenBytes, 'a'));
  StoreError wrong = store_error([&] { longest.set("k", "v"); });
  CHECK(wrong.kind() == StoreError::Kind::unauthenticated);
  CHECK(contains(wrong.what(), "matches no open round"));

  // 100 KB: gRPC itself would refuse the call as RESOURCE_EXHAUSTED ("metadata size exceeds limit"), read as a full
  // store.
  StoreError error = store_error([&] { server.client(std::string(100 * 1024, 'a')); });
  CHECK(error.kind() == StoreError::Kind::unauthenticated);
  CHECK(contains(error.what(), "the token is 102400 bytes, more than the 4096 a token may have"));
  CHECK(contains(error.what(), "DTRAIN_JOB_TOKEN"));
  CHECK(server.client().num_keys() == 0);
}

TEST_CASE("a blocked get completes when a second client sets the key") {
  Server server;
  StoreClient reader = server.client();
  StoreClient writer = server.client();
  auto value = std::async(std::launch::async, [&] { return reader.get("nccl/default", 20000ms); });
  REQUIRE(eventually([&] { return server.store.pending_waiters() == 1; }));
  CHECK(value.wait_for(50ms) == std::future_status::timeout);
  writer.set("nccl/default", "unique-id");
  REQUIRE(value.wait_for(10s) == std::future_status::ready);
  CHECK(value.get() == "unique-id");
}

TEST_CASE("200 blocked gets are served without a thread each") {
  Server server;
  constexpr int kCalls = 200;
  auto stub = server.stub();
  struct Pending {
    grpc::ClientContext context;
    dtrain::v1::GetRequest request;
    dtrain::v1::GetResponse response;
    grpc::Status status;
  };
  std::vector<std::unique_ptr<Pending>> calls;
  std::mutex mutex;
  std::condition_variable finished;
  int done = 0;
  int threads_before = process_threads();
  for (int i = 0; i < kCalls; ++i) {
    auto call = std::make_unique<Pending>();
    call->context.AddMetadata("dtrain-token", kGrpcToken);
    call->context.set_deadline(std::chrono::system_clock::now() + 60s);
    call->request.set_key("go");
    call->request.set_timeout_ms(30000);
    Pending* raw = call.get();
    stub->async()->Get(&raw->context, &raw->request, &raw->response, [&, raw](grpc::Status status) {
      std::lock_guard lock(mutex);
      raw->status = std::move(status);
      ++done;
      finished.notify_all();
    });
    calls.push_back(std::move(call));
  }
  REQUIRE(eventually([&] { return server.store.pending_waiters() == kCalls; }, 20000ms));
  int threads = process_threads();
  MESSAGE("threads before: " << threads_before << ", with " << kCalls << " blocked gets: " << threads);
  CHECK(threads < 64);

  server.client().set("go", "now");
  std::unique_lock lock(mutex);
  REQUIRE(finished.wait_for(lock, 20s, [&] { return done == kCalls; }));
  for (const auto& call : calls) {
    CHECK(call->status.ok());
    CHECK(call->response.value() == "now");
  }
}

TEST_CASE("a timed-out get says what, where and what to check") {
  Server server;
  StoreClient client = server.client();
  Clock::time_point start = Clock::now();
  StoreError error = store_error([&] { client.get("nccl/default", 300ms); });
  auto elapsed = Clock::now() - start;
  CHECK(error.kind() == StoreError::Kind::timeout);
  CHECK(std::string(error.what()) == "store get 'nccl/default' timed out after 300 ms at " + server.address +
                                         ": no process set it; check that the rank that sets it (often rank 0) is "
                                         "running and uses the same key");
  CHECK(elapsed >= 300ms);
  CHECK(elapsed < 1800ms);

  client.set("present", "1");
  StoreError wait = store_error([&] { client.wait({"present", "absent"}, 100ms); });
  CHECK(wait.kind() == StoreError::Kind::timeout);
  CHECK(contains(wait.what(), "store wait for 2 keys timed out after 100 ms at " + server.address +
                                  ": still missing 'absent' (1 of 2 keys)"));
  CHECK(server.store.pending_waiters() == 0);
}

TEST_CASE("a client that gives up cancels its waiter on the server") {
  Server server;
  auto stub = server.stub();
  grpc::ClientContext context;
  context.AddMetadata("dtrain-token", kGrpcToken);
  context.set_deadline(std::chrono::system_clock::now() + 300ms);
  dtrain::v1::GetRequest request;
  request.set_key("never");
  request.set_timeout_ms(60000);
  dtrain::v1::GetResponse response;
  grpc::Status status = stub->Get(&context, request, &response);
  CHECK(status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED);
  CHECK(eventually([&] { return server.store.pending_waiters() == 0; }));
}

TEST_CASE("ending the round fails a blocked get with a clear error") {
  Server server;
  StoreClient client = server.client();
  auto blocked = std::async(std::launch::async, [&] { return store_error([&] { client.get("k", 20000ms); }); });
  REQUIRE(eventually([&] { return server.store.pending_waiters() == 1; }));
  server.store.drop_namespace(kGrpcToken);
  REQUIRE(blocked.wait_for(10s) == std::future_status::ready);
  StoreError error = blocked.get();
  CHECK(error.kind() == StoreError::Kind::closed);
  CHECK(contains(error.what(), "namespace closed (the round ended)"));

  StoreError late = store_error([&] { client.num_keys(); });
  CHECK(late.kind() == StoreError::Kind::unauthenticated);
  CHECK(contains(late.what(), "round that has ended"));
}

TEST_CASE("limits are enforced and named") {
  Server server;
  StoreClient client = server.client();
  StoreError key = store_error([&] { client.set(std::string(5000, 'k'), "v"); });
  CHECK(key.kind() == StoreError::Kind::invalid_argument);
  CHECK(contains(key.what(), "the limit is 4096 bytes (4 KiB)"));

  StoreError value = store_error([&] { client.set("k", std::string(dtrain::store::kMaxValueBytes + 1, 'v')); });
  CHECK(value.kind() == StoreError::Kind::invalid_argument);
  CHECK(contains(value.what(), "64 MiB"));

  std::vector<std::string> keys(65, "k");
  StoreError many = store_error([&] { client.check(keys); });
  CHECK(many.kind() == StoreError::Kind::invalid_argument);
  CHECK(contains(many.what(), "65 keys in one call; the limit is 64"));

  StoreError timeout = store_error([&] { client.get("k", 2h); });
  CHECK(timeout.kind() == StoreError::Kind::invalid_argument);
  CHECK(contains(timeout.what(), "1 hour"));

  auto stub = server.stub();
  grpc::ClientContext context;
  context.AddMetadata("dtrain-token", kGrpcToken);
  dtrain::v1::WaitRequest request;
  request.add_keys("k");
  request.set_timeout_ms(3'600'001);
  dtrain::v1::WaitResponse response;
  grpc::Status status = stub->Wait(&context, request, &response);
  CHECK(status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK(contains(status.error_message(), "(1 hour)"));
}

TEST_CASE("an unreachable store and a missing environment are reported with the fix") {
  Server server;  // holds a port; the client dials a closed one
  Clock::time_point start = Clock::now();
  StoreError unreachable = store_error([] { StoreClient("127.0.0.1:1", kGrpcToken, {300ms, 1000ms}); });
  CHECK(unreachable.kind() == StoreError::Kind::unreachable);
  CHECK(contains(unreachable.what(), "cannot reach the store at 127.0.0.1:1 within 300 ms"));
  CHECK(contains(unreachable.what(), "DTRAIN_STORE_ADDR"));
  CHECK(Clock::now() - start < 5s);

  ::unsetenv("DTRAIN_STORE_ADDR");
  ::setenv("DTRAIN_JOB_TOKEN", kGrpcToken, 1);
  StoreError missing = store_error([] { StoreClient::from_env(); });
  CHECK(contains(missing.what(), "DTRAIN_STORE_ADDR is not set"));

  ::setenv("DTRAIN_STORE_ADDR", server.address.c_str(), 1);
  StoreClient client = StoreClient::from_env({2000ms, 2000ms});
  client.set("from-env", "1");
  CHECK(server.store.num_keys(kGrpcToken).value == 1);
  ::unsetenv("DTRAIN_STORE_ADDR");
  ::unsetenv("DTRAIN_JOB_TOKEN");
}

TEST_CASE("a blocked get fails cleanly when the store shuts down") {
  auto server = std::make_unique<Server>();
  StoreClient client = server->client();
  auto blocked = std::async(std::launch::async, [&] { return store_error([&] { client.get("k", 20000ms); }); });
  REQUIRE(eventually([&] { return server->store.pending_waiters() == 1; }));
  server.reset();
  REQUIRE(blocked.wait_for(10s) == std::future_status::ready);
  StoreError error = blocked.get();
  CHECK(contains(error.what(), "store get 'k'"));
  CHECK(contains(error.what(), "shutting down"));
}

TEST_CASE("a full store refuses with RESOURCE_EXHAUSTED, naming the limit and what it holds") {
  dtrain::store::StoreLimits limits;
  limits.namespace_bytes = 1 << 20;
  limits.namespace_keys = 100;
  Server server(limits);
  StoreClient client = server.client();
  client.set("a", std::string(600'000, 'x'));
  StoreError bytes = store_error([&] { client.set("b", std::string(600'000, 'x')); });
  CHECK(bytes.kind() == StoreError::Kind::full);
  CHECK(contains(bytes.what(), "store set 'b' was refused by the store at " + server.address));
  CHECK(contains(bytes.what(), "over its limit of 1048576 bytes (1 MiB)"));
  CHECK(contains(bytes.what(), "it holds 1 keys with 600001 bytes"));

  for (int i = 0; i < 99; ++i) client.add("c" + std::to_string(i), 1);
  StoreError keys = store_error([&] { client.add("one-more", 1); });
  CHECK(keys.kind() == StoreError::Kind::full);
  CHECK(contains(keys.what(), "at its limit of 100 keys"));
  StoreError swap = store_error([&] { client.compare_set("one-more", "", "v"); });
  CHECK(swap.kind() == StoreError::Kind::full);

  // The wire status itself, as any other client (the Python one, a raw stub) sees it.
  auto stub = server.stub();
  grpc::ClientContext context;
  context.AddMetadata("dtrain-token", kGrpcToken);
  dtrain::v1::SetRequest request;
  request.set_key("one-more");
  request.set_value("v");
  dtrain::v1::SetResponse response;
  grpc::Status status = stub->Set(&context, request, &response);
  CHECK(status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
  CHECK(contains(status.error_message(), "100 keys"));

  // Deleting a key makes room for one more.
  CHECK(client.delete_key("c0"));
  client.set("one-more", "v");
  CHECK(client.num_keys() == 100);
}

TEST_CASE("a value over the store's value limit is refused by the server with the limit") {
  Server server;
  StoreClient client = server.client();
  StoreError value = store_error([&] { client.set("k", std::string((16 << 20) + 1, 'v')); });
  CHECK(value.kind() == StoreError::Kind::invalid_argument);
  CHECK(contains(value.what(), "the limit is 16777216 bytes (16 MiB)"));
}
