#pragma once

// provider join: the launcher listens on nodes.rendezvous and agents started with `dtrain agent --join HOST:PORT`
// dial in (LauncherService.Join). Each accepted stream becomes a JoinedSession with the next node id; the
// controller hears of it through an Event::Kind::joined and then of its messages like any other session's.

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>

#include <grpcpp/grpcpp.h>

#include "cli/controller/event_queue.h"
#include "cli/controller/node_session.h"
#include "dtrain/v1/session.grpc.pb.h"

namespace dtrain::controller {

class JoinedSession final : public NodeSession {
 public:
  JoinedSession(grpc::ServerContext* context, grpc::ServerReaderWriter<v1::LauncherMessage, v1::AgentMessage>* stream)
      : context_(context), stream_(stream), peer_(context->peer()) {}

  bool send(const Command& command) override;
  bool send_last(const Command& command) override;
  Status finish() override;
  void cancel() override;
  std::string address() const override { return peer_; }
  bool open() const override;

  // The service handler: blocks until the controller finished or cancelled the session (the stream must live as
  // long as the controller may write to it; the JoinServer's destructor cancels what is left).
  void wait_until_finished();

 private:
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  grpc::ServerContext* context_;
  grpc::ServerReaderWriter<v1::LauncherMessage, v1::AgentMessage>* stream_;
  std::string peer_;
  bool finished_ = false;
};

class JoinServer final : public v1::LauncherService::Service {
 public:
  // Listens on `listen` ("host:port") with `credentials` (TLS + token, or insecure on loopback / --insecure).
  // Throws std::runtime_error naming the address when it cannot listen.
  JoinServer(EventQueue& events, const std::string& listen, std::shared_ptr<grpc::ServerCredentials> credentials,
             int max_nodes);
  ~JoinServer() override;

  // The session of node `id` (ids are given in join order, from 0), or nullptr.
  std::shared_ptr<JoinedSession> session(int id);
  // Refuse every later join (the job is over).
  void close();
  // The port it listens on (the one picked when nodes.rendezvous asked for port 0).
  int port() const { return port_; }

  grpc::Status Join(grpc::ServerContext* context,
                    grpc::ServerReaderWriter<v1::LauncherMessage, v1::AgentMessage>* stream) override;

 private:
  EventQueue& events_;
  int max_nodes_;
  std::mutex mutex_;
  std::vector<std::shared_ptr<JoinedSession>> sessions_;
  bool closed_ = false;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

}  // namespace dtrain::controller
