// Fuzz target: the job store's gRPC service as workers reach it. The input is a sequence of requests, each a
// record [kind: 1 byte][length: u16 LE][request message]; kind % 8 picks the method (Set, Get, Add, CompareSet,
// Check, Delete, NumKeys, Wait) and kind / 8 % 3 the dtrain-token metadata (the round's token, another, none).
// Every request goes over real gRPC to the service on a real server on 127.0.0.1 (agent/store/testing), backed by
// a store with small limits so that they are reached; each input starts from a fresh namespace. Get and Wait carry
// a short client deadline, so their waiters are cancelled as often as they complete or time out.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "agent/store/testing/in_process_store.h"
#include "dtrain/v1/store.grpc.pb.h"

namespace {

constexpr char kToken[] = "fuzz-round-token";

struct Fixture {
  dtrain::store::testing::InProcessStore server{kToken, limits()};
  std::unique_ptr<dtrain::v1::Store::Stub> stub =
      dtrain::v1::Store::NewStub(grpc::CreateChannel(server.address, grpc::InsecureChannelCredentials()));

  static dtrain::store::StoreLimits limits() {
    dtrain::store::StoreLimits l;
    l.value_bytes = 1024;
    l.namespace_bytes = 8 * 1024;
    l.namespace_keys = 32;
    return l;
  }
};

Fixture& fixture() {
  static Fixture* f = new Fixture();  // lives until exit: the server's threads outlive every input
  return *f;
}

template <class Request>
bool parse(Request& request, const std::uint8_t* data, std::size_t size) {
  return request.ParseFromArray(data, static_cast<int>(size));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  Fixture& f = fixture();
  f.server.store.drop_namespace(kToken);
  if (!f.server.store.open_namespace(kToken).ok()) __builtin_trap();
  auto& stub = *f.stub;
  while (size >= 3) {
    const std::uint8_t kind = data[0];
    const std::size_t length = std::min<std::size_t>(data[1] | (data[2] << 8), size - 3);
    const std::uint8_t* payload = data + 3;
    data += 3 + length;
    size -= 3 + length;

    grpc::ClientContext context;
    const int token_choice = kind / 8 % 3;
    if (token_choice == 0) context.AddMetadata("dtrain-token", kToken);
    if (token_choice == 1) context.AddMetadata("dtrain-token", "another-round");
    const bool blocking = kind % 8 == 1 || kind % 8 == 7;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(blocking ? 5 : 2000));
    grpc::Status status;
    switch (kind % 8) {
      case 0: {
        dtrain::v1::SetRequest request;
        dtrain::v1::SetResponse response;
        if (parse(request, payload, length)) status = stub.Set(&context, request, &response);
        break;
      }
      case 1: {
        dtrain::v1::GetRequest request;
        dtrain::v1::GetResponse response;
        if (parse(request, payload, length)) status = stub.Get(&context, request, &response);
        break;
      }
      case 2: {
        dtrain::v1::AddRequest request;
        dtrain::v1::AddResponse response;
        if (parse(request, payload, length)) status = stub.Add(&context, request, &response);
        break;
      }
      case 3: {
        dtrain::v1::CompareSetRequest request;
        dtrain::v1::CompareSetResponse response;
        if (parse(request, payload, length)) status = stub.CompareSet(&context, request, &response);
        break;
      }
      case 4: {
        dtrain::v1::CheckRequest request;
        dtrain::v1::CheckResponse response;
        if (parse(request, payload, length)) status = stub.Check(&context, request, &response);
        break;
      }
      case 5: {
        dtrain::v1::DeleteRequest request;
        dtrain::v1::DeleteResponse response;
        if (parse(request, payload, length)) status = stub.Delete(&context, request, &response);
        break;
      }
      case 6: {
        dtrain::v1::NumKeysRequest request;
        dtrain::v1::NumKeysResponse response;
        if (parse(request, payload, length)) status = stub.NumKeys(&context, request, &response);
        if (status.ok() && (response.count() < 0 || response.count() > 32)) __builtin_trap();
        break;
      }
      default: {
        dtrain::v1::WaitRequest request;
        dtrain::v1::WaitResponse response;
        if (parse(request, payload, length)) status = stub.Wait(&context, request, &response);
        break;
      }
    }
    // A store that stopped answering (UNAVAILABLE) or a server that lost the call (UNKNOWN, INTERNAL) is a bug;
    // every other status is one the store gives on purpose.
    if (status.error_code() == grpc::StatusCode::UNAVAILABLE || status.error_code() == grpc::StatusCode::INTERNAL ||
        status.error_code() == grpc::StatusCode::UNKNOWN) {
      __builtin_trap();
    }
  }
  return 0;
}
