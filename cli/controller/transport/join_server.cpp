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

JoinedSession::JoinedSession(grpc::CallbackServerContext* context, EventQueue& events, std::shared_ptr<JoinDoor> door)
    : context_(context),
      events_(events),
      peer_(context->peer()),
      door_(std::move(door)),
      writes_(kMaxQueuedMessages, AgentConnection::kStallTimeout) {}

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
    writes_.drop_waiting();
  }
  door_->left(node_);
  Finish(cancel ? grpc::Status::CANCELLED : grpc::Status::OK);
}

void JoinedSession::refuse(grpc::Status status) {
  {
    std::lock_guard lock(mutex_);
    if (finished_) return;
    finished_ = true;
  }
  door_->left(-1);
  Finish(std::move(status));
}

bool JoinedSession::admit() {
  std::shared_ptr<JoinedSession> self;
  {
    std::lock_guard lock(mutex_);
    self = self_;
  }
  // Agents say hello first, alone or as the first message of a batch; anything else asks for no node rank.
  const v1::AgentMessage& first = incoming_.has_batch() && incoming_.batch().messages_size() > 0
                                      ? incoming_.batch().messages(0)
                                      : incoming_;
  const JoinDoor::Admission admission =
      door_->admit(self, first.has_hello() ? first.hello() : v1::Hello::default_instance(), peer_);
  if (admission.node < 0) {
    refuse(admission.refusal);
    return false;
  }
  node_ = admission.node;
  return true;
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
  if (node_ < 0) {
    // Not admitted yet: the controller does not know this session, so it ends here.
    if (!ok) {
      refuse(grpc::Status::CANCELLED);
      return;
    }
    if (!admit()) return;
  }
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
                       std::shared_ptr<grpc::ServerCredentials> credentials, int max_nodes, JoinDoor::Note note)
    : events_(events), door_(std::make_shared<JoinDoor>(events, max_nodes, std::move(note))) {
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
  for (auto& s : door_->sessions()) s->cancel();
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(200));
}

std::shared_ptr<JoinedSession> JoinServer::session(int id) { return door_->session(id); }

void JoinServer::close() { door_->close(); }

grpc::ServerBidiReactor<v1::AgentMessage, v1::LauncherMessage>* JoinServer::Join(
    grpc::CallbackServerContext* context) {
  if (auto refusal = door_->knock()) return new Refusal(std::move(*refusal));
  auto session = std::make_shared<JoinedSession>(context, events_, door_);
  session->start(session);
  return session.get();
}

}  // namespace dtrain::controller
