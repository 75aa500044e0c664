#pragma once

// provider join: the launcher listens on nodes.rendezvous and agents started with `dtrain agent --join HOST:PORT`
// dial in (LauncherService.Join). Each accepted stream becomes a JoinedSession; at its hello the JoinDoor admits it
// (the next node id; the controller hears of it through an Event::Kind::joined and then of its messages like any
// other session's) or refuses it (join_door.h).
//
// The server uses gRPC's callback API: a session holds no thread while it waits (thousands of agents are thousands
// of reactors on gRPC's few threads), and the launcher's writes are queued (session_write_queue.h), so that one
// agent that stops reading never holds up the event loop that serves the others.

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "cli/controller/session/event_queue.h"
#include "cli/controller/session/node_session.h"
#include "cli/controller/transport/join_door.h"
#include "cli/controller/transport/session_write_queue.h"
#include "dtrain/v1/session.grpc.pb.h"

namespace dtrain::controller {

// One joined agent's stream. Threads: send/send_last/finish/cancel come from the controller thread only; the
// On* reactions from gRPC's threads. Finish is called when the controller is done with the session (finish or
// cancel); the context is only cancelled by the controller thread before that, so it is never touched after the
// call is done.
class JoinedSession final : public NodeSession,
                            public grpc::ServerBidiReactor<v1::AgentMessage, v1::LauncherMessage> {
 public:
  // Messages the launcher may have queued for one agent before the session is given up: far above what it sends
  // within the stall timeout (a heartbeat a second, a few commands a round), so only an agent that does not read
  // reaches it.
  static constexpr std::size_t kMaxQueuedMessages = 1024;

  // `door` admits or refuses it at its hello, and counts it until it is over.
  JoinedSession(grpc::CallbackServerContext* context, EventQueue& events, std::shared_ptr<JoinDoor> door);

  // Starts reading; the session keeps itself alive (`self`) until gRPC is done with the call.
  void start(std::shared_ptr<JoinedSession> self);

  // Queues the message and returns: false when the session is over, or when the agent has not read for
  // AgentConnection::kStallTimeout or has kMaxQueuedMessages waiting (the session is then cancelled, and its
  // session_closed follows; finish() says why).
  bool send(const Command& command) override;
  bool send_last(const Command& command) override;
  Status finish() override;
  void cancel() override;
  std::string address() const override { return peer_; }
  bool open() const override;

  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnDone() override;

 private:
  // The controller is done with the session: Finish, cancelling first when asked to or when a write is in flight.
  void end(bool cancel);
  // Before its hello was admitted (the controller does not know it): end the call with `status`.
  void refuse(grpc::Status status);
  // The first message: admit the agent (its hello) or refuse it. False when refused.
  bool admit();

  grpc::CallbackServerContext* context_;
  EventQueue& events_;
  int node_ = -1;                // set by the first read, before the controller hears of the session
  const std::string peer_;
  std::shared_ptr<JoinDoor> door_;
  v1::AgentMessage incoming_;   // only the reading reactions touch it, one at a time
  mutable std::mutex mutex_;
  SessionWriteQueue<v1::LauncherMessage> writes_;
  bool finished_ = false;       // the controller is done with the session (finish or cancel)
  bool broken_ = false;         // a write failed: the stream is gone
  std::optional<std::string> why_cancelled_;   // set when this side gave the session up for not reading
  std::shared_ptr<JoinedSession> self_;
};

class JoinServer final : public v1::LauncherService::CallbackService {
 public:
  // Listens on `listen` ("host:port") with `credentials` (TLS + token, or insecure on loopback / --insecure).
  // `note` says on the launcher's console which agents were refused and why (JoinDoor::Note).
  // Throws std::runtime_error naming the address when it cannot listen.
  JoinServer(EventQueue& events, const std::string& listen, std::shared_ptr<grpc::ServerCredentials> credentials,
             int max_nodes, JoinDoor::Note note = nullptr);
  ~JoinServer() override;

  // The session of node `id` (ids are given in the order of admitted hellos, from 0), or nullptr.
  std::shared_ptr<JoinedSession> session(int id);
  // Refuse every later join (the job is over).
  void close();
  // The port it listens on (the one picked when nodes.rendezvous asked for port 0).
  int port() const { return port_; }

  grpc::ServerBidiReactor<v1::AgentMessage, v1::LauncherMessage>* Join(grpc::CallbackServerContext* context) override;

 private:
  EventQueue& events_;
  std::shared_ptr<JoinDoor> door_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

}  // namespace dtrain::controller
