#pragma once

// gRPC face of the job's key-value store (proto/dtrain/v1/store.proto): each handler reads the round's token from
// the `dtrain-token` metadata entry, makes one call into store::Store and converts its status. Get and Wait
// return at once and finish when the store completes their waiter, so a blocked call holds no thread; a call the
// client cancels (or whose deadline passes) cancels its waiter.
//
// The server must accept messages of a 64 MiB value plus framing: set
// ServerBuilder::SetMaxReceiveMessageSize(store::kMaxMessageBytes) (worker/store/limits.h, the clients' limit too) or more. Before Server::Shutdown, call
// Store::shutdown() (or give Shutdown a deadline) so blocked calls end instead of holding the shutdown.

#include <grpcpp/grpcpp.h>

#include "agent/store/store.h"
#include "dtrain/v1/store.grpc.pb.h"

namespace dtrain::agent {

class StoreService final : public v1::Store::CallbackService {
 public:
  // The store must outlive the server this service is registered on.
  explicit StoreService(store::Store& store) : store_(store) {}

  grpc::ServerUnaryReactor* Set(grpc::CallbackServerContext* context, const v1::SetRequest* request,
                                v1::SetResponse* response) override;
  grpc::ServerUnaryReactor* Get(grpc::CallbackServerContext* context, const v1::GetRequest* request,
                                v1::GetResponse* response) override;
  grpc::ServerUnaryReactor* Add(grpc::CallbackServerContext* context, const v1::AddRequest* request,
                                v1::AddResponse* response) override;
  grpc::ServerUnaryReactor* CompareSet(grpc::CallbackServerContext* context, const v1::CompareSetRequest* request,
                                       v1::CompareSetResponse* response) override;
  grpc::ServerUnaryReactor* Check(grpc::CallbackServerContext* context, const v1::CheckRequest* request,
                                  v1::CheckResponse* response) override;
  grpc::ServerUnaryReactor* Delete(grpc::CallbackServerContext* context, const v1::DeleteRequest* request,
                                   v1::DeleteResponse* response) override;
  grpc::ServerUnaryReactor* NumKeys(grpc::CallbackServerContext* context, const v1::NumKeysRequest* request,
                                    v1::NumKeysResponse* response) override;
  grpc::ServerUnaryReactor* Wait(grpc::CallbackServerContext* context, const v1::WaitRequest* request,
                                 v1::WaitResponse* response) override;

 private:
  store::Store& store_;
};

}  // namespace dtrain::agent
