#include "cli/controller/join_server.h"

#include <stdexcept>

#include "cli/controller/agent_connection.h"
#include "cli/controller/session_reader.h"
#include "common/deadline_guard.h"
#include "common/grpc_options.h"

namespace dtrain::controller {

bool JoinedSession::send(const Command& command) {
  std::lock_guard lock(mutex_);
  if (finished_) return false;
  // A Write blocks while the agent does not read (HTTP/2 flow control): cancel a session stalled that long.
  DeadlineGuard guard(AgentConnection::kStallTimeout, [this] { context_->TryCancel(); });
  return stream_->Write(wire::to_wire(command));
}

bool JoinedSession::send_last(const Command& command) {
  // A server stream cannot half-close; the message is simply the last one this side writes.
  return send(command);
}

Status JoinedSession::finish() {
  std::lock_guard lock(mutex_);
  finished_ = true;
  cv_.notify_all();
  return {};
}

void JoinedSession::cancel() {
  std::lock_guard lock(mutex_);
  if (!finished_) context_->TryCancel();
  finished_ = true;
  cv_.notify_all();
}

bool JoinedSession::open() const {
  std::lock_guard lock(mutex_);
  return !finished_;
}

void JoinedSession::wait_until_finished() {
  std::unique_lock lock(mutex_);
  cv_.wait(lock, [this] { return finished_; });
}

JoinServer::JoinServer(EventQueue& events, const std::string& listen,
                       std::shared_ptr<grpc::ServerCredentials> credentials, int max_nodes)
    : events_(events), max_nodes_(max_nodes) {
  grpc::ServerBuilder builder;
  builder.AddListeningPort(listen, std::move(credentials), &port_);
  builder.RegisterService(this);
  set_session_server_options(builder);
  server_ = builder.BuildAndStart();
  if (!server_ || port_ == 0) {
    throw std::runtime_error("cannot listen for joining agents on " + listen +
                             " (nodes.rendezvous): is the address on this host and the port free?");
  }
}

JoinServer::~JoinServer() {
  close();
  std::vector<std::shared_ptr<JoinedSession>> sessions;
  {
    std::lock_guard lock(mutex_);
    sessions = sessions_;
  }
  for (auto& s : sessions) s->cancel();
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(200));
}

std::shared_ptr<JoinedSession> JoinServer::session(int id) {
  std::lock_guard lock(mutex_);
  if (id < 0 || static_cast<std::size_t>(id) >= sessions_.size()) return nullptr;
  return sessions_[static_cast<std::size_t>(id)];
}

void JoinServer::close() {
  std::lock_guard lock(mutex_);
  closed_ = true;
}

grpc::Status JoinServer::Join(grpc::ServerContext* context,
                              grpc::ServerReaderWriter<v1::LauncherMessage, v1::AgentMessage>* stream) {
  auto session = std::make_shared<JoinedSession>(context, stream);
  int id;
  {
    std::lock_guard lock(mutex_);
    if (closed_) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the job is over; this launcher takes no agents");
    int alive = 0;
    for (const auto& s : sessions_) alive += s->open() ? 1 : 0;
    if (alive >= max_nodes_) {
      return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                          "the job already has its " + std::to_string(max_nodes_) + " nodes (nodes.count)");
    }
    id = static_cast<int>(sessions_.size());
    sessions_.push_back(session);
  }
  Event joined;
  joined.kind = Event::Kind::joined;
  joined.node = id;
  joined.text = context->peer();
  events_.push(std::move(joined));

  pump_session(*stream, id, events_, [] {});
  session->wait_until_finished();
  return grpc::Status::OK;
}

}  // namespace dtrain::controller
