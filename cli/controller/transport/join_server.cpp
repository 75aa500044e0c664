#include "cli/controller/transport/join_server.h"

#include <stdexcept>

#include "cli/controller/transport/agent_connection.h"
#include "cli/controller/transport/session_reader.h"
#include "common/grpc/grpc_options.h"

namespace dtrain::controller {

namespace {

// A join the launcher turns away: the call ends with `status` at once.
class Refusal final : public grpc::ServerBidiReactor<v1::AgentMessage, v1::LauncherMessage> {
 public:
  explicit Refusal(grpc::Status status) { Finish(std::move(status)); }
  void OnDone() override { delete this; }
};

}  // namespace

JoinedSession::JoinedSession(grpc::CallbackServerContext* context, EventQueue& events, int node,
                             std::shared_ptr<std::atomic<int>> open_sessions)
    : context_(context),
      events_(events),
      node_(node),
      peer_(context->peer()),
      open_sessions_(std::move(open_sessions)),
      writes_(kMaxQueuedMessages, AgentConnection::kStallTimeout) {
  ++*open_sessions_;
}

void JoinedSession::start(std::shared_ptr<JoinedSession> self) {
  self_ = std::move(self);
  StartRead(&incoming_);
}

bool JoinedSession::send(const Command& command) {
  v1::LauncherMessage message = wire::to_wire(command);
  v1::LauncherMessage* to_write = nullptr;
  {
    std::lock_guard lock(mutex_);
    if (finished_ || broken_ || why_cancelled_) return false;
    const auto push = writes_.push(std::move(message), SessionWriteQueue<v1::LauncherMessage>::Clock::now());
    switch (push) {
      case SessionWriteQueue<v1::LauncherMessage>::Push::start_write: to_write = &writes_.front(); break;
      case SessionWriteQueue<v1::LauncherMessage>::Push::queued: return true;
      case SessionWriteQueue<v1::LauncherMessage>::Push::full:
      case SessionWriteQueue<v1::LauncherMessage>::Push::stalled: why_cancelled_ = writes_.refusal(push); break;
    }
  }
  if (!to_write) {
    // Only this thread ends the session, and it has not: the call is not done, the context is valid.
    context_->TryCancel();
    return false;
  }
  // Outside the lock: gRPC may run OnWriteDone on this thread before StartWrite returns.
  StartWrite(to_write);
  return true;
}

bool JoinedSession::send_last(const Command& command) {
  // A server stream cannot half-close; the message is simply the last one this side writes.
  return send(command);
}

void JoinedSession::end(bool cancel) {
  {
    std::lock_guard lock(mutex_);
    if (finished_) return;
    // A write still in flight now is to an agent that does not read (its stream already ended, or it is being
    // cut off): cancel it rather than wait, or the call would never be done.
    cancel = cancel || writes_.writing();
  }
  // Before finished_ is set: until then no Finish is called, so the call is not done and the context is valid.
  if (cancel) context_->TryCancel();
  {
    std::lock_guard lock(mutex_);
    finished_ = true;
    --*open_sessions_;
    writes_.drop_waiting();
  }
  Finish(cancel ? grpc::Status::CANCELLED : grpc::Status::OK);
}

Status JoinedSession::finish() {
  end(false);
  std::lock_guard lock(mutex_);
  if (why_cancelled_) return Status(StatusCode::unavailable, *why_cancelled_);
  return {};
}

void JoinedSession::cancel() { end(true); }

bool JoinedSession::open() const {
  std::lock_guard lock(mutex_);
  return !finished_;
}

void JoinedSession::OnReadDone(bool ok) {
  if (!ok) {
    push_session_closed(events_, node_);
    return;
  }
  push_report(events_, node_, incoming_);
  incoming_.Clear();
  StartRead(&incoming_);
}

void JoinedSession::OnWriteDone(bool ok) {
  v1::LauncherMessage* to_write = nullptr;
  {
    std::lock_guard lock(mutex_);
    if (!ok) {
      // The stream broke (or was cancelled): nothing queued can be written any more; the read fails next.
      broken_ = true;
      writes_.drop_waiting();
    }
    if (writes_.written()) to_write = &writes_.front();
  }
  if (to_write) StartWrite(to_write);
}

void JoinedSession::OnDone() {
  std::shared_ptr<JoinedSession> last;
  {
    std::lock_guard lock(mutex_);
    last = std::move(self_);
  }
}

JoinServer::JoinServer(EventQueue& events, const std::string& listen,
                       std::shared_ptr<grpc::ServerCredentials> credentials, int max_nodes)
    : events_(events), max_nodes_(max_nodes) {
  tune_for_many_sessions();
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

grpc::ServerBidiReactor<v1::AgentMessage, v1::LauncherMessage>* JoinServer::Join(
    grpc::CallbackServerContext* context) {
  std::shared_ptr<JoinedSession> session;
  int id;
  {
    std::lock_guard lock(mutex_);
    if (closed_) return new Refusal({grpc::StatusCode::UNAVAILABLE, "the job is over; this launcher takes no agents"});
    if (*open_sessions_ >= max_nodes_) {
      return new Refusal({grpc::StatusCode::RESOURCE_EXHAUSTED,
                          "the job already has its " + std::to_string(max_nodes_) + " nodes (nodes.count)"});
    }
    id = static_cast<int>(sessions_.size());
    session = std::make_shared<JoinedSession>(context, events_, id, open_sessions_);
    sessions_.push_back(session);
  }
  Event joined;
  joined.kind = Event::Kind::joined;
  joined.node = id;
  joined.text = session->address();
  events_.push(std::move(joined));
  session->start(session);
  return session.get();
}

}  // namespace dtrain::controller
