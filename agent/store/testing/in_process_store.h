#pragma once
// Test support: the job store served over real gRPC on 127.0.0.1 (a free port) with one namespace open, as node 0's
// agent serves it, for tests of store clients and of what rendezvous through the store (Gloo, NCCL ids).

#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>

#include <grpcpp/grpcpp.h>

#include "agent/service/store_service.h"
#include "agent/store/store.h"

namespace dtrain::store::testing {

struct InProcessStore {
  Store store;
  agent::StoreService service{store};
  std::unique_ptr<grpc::Server> server;
  std::string address;  // 127.0.0.1:PORT
  std::string token;    // the open namespace's token

  explicit InProcessStore(std::string namespace_token, StoreLimits limits = {})
      : store(limits), token(std::move(namespace_token)) {
    if (!store.open_namespace(token).ok()) throw std::runtime_error("cannot open the store namespace " + token);
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&service);
    builder.SetMaxReceiveMessageSize(store::kMaxMessageBytes);
    server = builder.BuildAndStart();
    if (!server || port == 0) throw std::runtime_error("cannot serve the store on 127.0.0.1");
    address = "127.0.0.1:" + std::to_string(port);
  }
  ~InProcessStore() {
    store.shutdown();
    server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  }
  InProcessStore(const InProcessStore&) = delete;
  InProcessStore& operator=(const InProcessStore&) = delete;
};

}  // namespace dtrain::store::testing
