#include "agent/service/store_service.h"

#include <atomic>
#include <chrono>
#include <string>
#include <string_view>
#include <vector>

#include "agent/service/call_metadata.h"
#include "agent/service/grpc_status.h"

namespace dtrain::agent {
namespace {

// The round's token; empty when the call carries none (the store refuses that).
std::string_view token_of(const grpc::CallbackServerContext* context) {
  return call_metadata(*context, kTokenMetadata);
}

grpc::ServerUnaryReactor* finish(grpc::CallbackServerContext* context, const store::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(to_grpc(status));
  return reactor;
}

std::vector<std::string> keys_of(const google::protobuf::RepeatedPtrField<std::string>& keys) {
  return {keys.begin(), keys.end()};
}

// A Get or Wait in flight: finished by the store's callback, which may run on any thread and even before the
// handler returns (gRPC queues a Finish that comes before the reactor is bound). gRPC calls OnCancel only after
// the handler has returned, so the waiter id is known by then.
class PendingCall final : public grpc::ServerUnaryReactor {
 public:
  explicit PendingCall(store::Store& store) : store_(store) {}

  void attach(store::WaiterId id) { waiter_.store(id, std::memory_order_release); }

  void OnCancel() override {
    store::WaiterId id = waiter_.load(std::memory_order_acquire);
    if (id != store::kNoWaiter) store_.cancel(id);
  }
  void OnDone() override { delete this; }

 private:
  store::Store& store_;
  std::atomic<store::WaiterId> waiter_{store::kNoWaiter};
};

}  // namespace

grpc::ServerUnaryReactor* StoreService::Set(grpc::CallbackServerContext* context, const v1::SetRequest* request,
                                            v1::SetResponse*) {
  return finish(context, store_.set(token_of(context), request->key(), request->value()));
}

grpc::ServerUnaryReactor* StoreService::Get(grpc::CallbackServerContext* context, const v1::GetRequest* request,
                                            v1::GetResponse* response) {
  auto* call = new PendingCall(store_);
  call->attach(store_.get(token_of(context), request->key(), std::chrono::milliseconds(request->timeout_ms()),
                          [call, response](store::Result<std::string> result) {
                            if (result.ok()) *response->mutable_value() = std::move(result.value);
                            call->Finish(to_grpc(result.status));
                          }));
  return call;
}

grpc::ServerUnaryReactor* StoreService::Add(grpc::CallbackServerContext* context, const v1::AddRequest* request,
                                            v1::AddResponse* response) {
  store::Result<std::int64_t> result = store_.add(token_of(context), request->key(), request->delta());
  response->set_value(result.value);
  return finish(context, result.status);
}

grpc::ServerUnaryReactor* StoreService::CompareSet(grpc::CallbackServerContext* context,
                                                   const v1::CompareSetRequest* request,
                                                   v1::CompareSetResponse* response) {
  store::Result<std::string> result =
      store_.compare_set(token_of(context), request->key(), request->expected(), request->desired());
  *response->mutable_value() = std::move(result.value);
  return finish(context, result.status);
}

grpc::ServerUnaryReactor* StoreService::Check(grpc::CallbackServerContext* context, const v1::CheckRequest* request,
                                              v1::CheckResponse* response) {
  store::Result<bool> result = store_.check(token_of(context), keys_of(request->keys()));
  response->set_all_present(result.value);
  return finish(context, result.status);
}

grpc::ServerUnaryReactor* StoreService::Delete(grpc::CallbackServerContext* context,
                                               const v1::DeleteRequest* request, v1::DeleteResponse* response) {
  store::Result<bool> result = store_.delete_key(token_of(context), request->key());
  response->set_deleted(result.value);
  return finish(context, result.status);
}

grpc::ServerUnaryReactor* StoreService::NumKeys(grpc::CallbackServerContext* context, const v1::NumKeysRequest*,
                                                v1::NumKeysResponse* response) {
  store::Result<std::int64_t> result = store_.num_keys(token_of(context));
  response->set_count(result.value);
  return finish(context, result.status);
}

grpc::ServerUnaryReactor* StoreService::Wait(grpc::CallbackServerContext* context, const v1::WaitRequest* request,
                                             v1::WaitResponse*) {
  auto* call = new PendingCall(store_);
  call->attach(store_.wait(token_of(context), keys_of(request->keys()),
                           std::chrono::milliseconds(request->timeout_ms()),
                           [call](store::Status status) { call->Finish(to_grpc(status)); }));
  return call;
}

}  // namespace dtrain::agent
