#include "cli/controller/transport/agent_connection.h"

#include "agent/security/credentials.h"
#include "cli/controller/transport/session_reader.h"
#include "common/deadline_guard.h"

namespace dtrain::controller {

AgentConnection::AgentConnection(int node, std::string address, EventQueue& events,
                                 std::shared_ptr<grpc::ChannelCredentials> credentials,
                                 grpc::ChannelArguments arguments, Transport transport)
    : node_(node),
      address_(std::move(address)),
      events_(events),
      credentials_(std::move(credentials)),
      arguments_(std::move(arguments)),
      // Here, not in open(): the process's first channel starts gRPC (its threads, tens of ms on a loaded host),
      // which the launcher overlaps with the start of its local agents. A channel does not dial before open().
      channel_(grpc::CreateCustomChannel(address_, credentials_, arguments_)),
      transport_(transport) {}

std::shared_ptr<AgentConnection> AgentConnection::make(int node, std::string address, EventQueue& events,
                                                       LauncherCredentials& credentials, Transport transport) {
  return std::make_shared<AgentConnection>(node, std::move(address), events, credentials.channel(transport),
                                           credentials.channel_arguments(transport), transport);
}

AgentConnection::~AgentConnection() {
  if (stream_ && !finished_) context_.TryCancel();
  stop_writer(std::chrono::steady_clock::now());
  if (reader_.joinable()) reader_.join();
}

Status AgentConnection::open(std::chrono::milliseconds timeout) {
  // WaitForConnected gives no reason; one call on the channel fails at once with it (TLS, refused, ...).
  const auto why_not = [this] {
    grpc::ClientContext probe;
    probe.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
    auto stub = v1::AgentService::NewStub(channel_);
    auto stream = stub->Session(&probe);
    v1::AgentMessage ignored;
    while (stream->Read(&ignored)) {
    }
    return stream->Finish();
  };
  const auto explain = [this](const grpc::Status& status) {
    return security::explain_connect_failure(address_, status, transport_);
  };
  const auto deadline = std::chrono::system_clock::now() + timeout;
  while (!channel_->WaitForConnected(std::min(deadline, std::chrono::system_clock::now() + kConnectPoll))) {
    if (std::chrono::system_clock::now() >= deadline) {
      return {StatusCode::unavailable,
              "cannot connect to the agent within " + std::to_string(timeout.count()) + " ms: " + explain(why_not())};
    }
    // An agent that is still starting refuses the connection, and waiting is right; an agent that answers but
    // refuses us (another cluster's CA, a wrong token) will refuse again: say so now, not after the timeout.
    if (channel_->GetState(false) != GRPC_CHANNEL_TRANSIENT_FAILURE) continue;
    const grpc::Status status = why_not();
    const std::string& text = status.error_message();
    // A TLS agent closes a plaintext launcher's connection at its first bytes, which are no TLS handshake: every
    // time, as fast as a refused certificate.
    const bool agent_wants_tls = transport_ == Transport::plaintext && text.find("Socket closed") != std::string::npos;
    if (status.error_code() == grpc::StatusCode::UNAUTHENTICATED ||
        status.error_code() == grpc::StatusCode::PERMISSION_DENIED || agent_wants_tls ||
        text.find("andshake") != std::string::npos || text.find("SSL") != std::string::npos) {
      return {StatusCode::unauthenticated, "the agent refused this launcher: " + explain(status)};
    }
  }
  stub_ = v1::AgentService::NewStub(channel_);
  stream_ = stub_->Session(&context_);
  if (!stream_) {
    return {StatusCode::unavailable, "cannot open a session with the agent at " + address_};
  }
  reader_ = std::thread([this] { pump_session(*stream_, node_, events_, [this] { received_any_ = true; }); });
  writer_ = std::thread([this] { write_loop(); });
  return {};
}

bool AgentConnection::queue(v1::LauncherMessage message, bool last) {
  {
    std::lock_guard lock(mutex_);
    if (!stream_ || finished_ || writes_done_ || broken_ || why_cancelled_) return false;
    writes_done_ = last;
    const auto push = writes_.push({std::move(message), last}, std::chrono::steady_clock::now());
    switch (push) {
      case SessionWriteQueue<Outgoing>::Push::start_write: wake_.notify_one(); return true;
      case SessionWriteQueue<Outgoing>::Push::queued: return true;
      case SessionWriteQueue<Outgoing>::Push::full:
      case SessionWriteQueue<Outgoing>::Push::stalled: why_cancelled_ = writes_.refusal(push); break;
    }
  }
  context_.TryCancel();
  return false;
}

bool AgentConnection::send(const Command& command) { return queue(wire::to_wire(command), false); }

bool AgentConnection::send_last(const Command& command) { return queue(wire::to_wire(command), true); }

void AgentConnection::write_loop() {
  std::unique_lock lock(mutex_);
  while (true) {
    wake_.wait(lock, [this] { return closing_ || writes_.writing(); });
    if (!writes_.writing()) return;
    Outgoing& next = writes_.front();
    lock.unlock();
    bool ok;
    {
      // A Write blocks while the agent does not read (HTTP/2 flow control); an agent that stalls that long is lost.
      DeadlineGuard guard(kStallTimeout, [this] { context_.TryCancel(); });
      ok = next.last ? stream_->Write(next.message, grpc::WriteOptions().set_last_message())
                     : stream_->Write(next.message);
    }
    lock.lock();
    if (!ok) {
      broken_ = true;
      writes_.drop_waiting();
    }
    writes_.written();
    drained_.notify_all();
  }
}

void AgentConnection::stop_writer(std::chrono::steady_clock::time_point deadline) {
  if (!writer_.joinable()) return;
  bool drained;
  {
    std::unique_lock lock(mutex_);
    closing_ = true;
    wake_.notify_one();
    drained = drained_.wait_until(lock, deadline, [this] { return !writes_.writing(); });
  }
  // The write in flight is to an agent that does not read: cancelling ends it.
  if (!drained) context_.TryCancel();
  writer_.join();
}

Status AgentConnection::finish() {
  if (!stream_ || finished_) return status_;
  grpc::Status status;
  {
    // The agent may never complete the call (it stopped, or the network to it went silent): cancel instead of
    // waiting, so that a broken session can never keep the launcher from exiting.
    DeadlineGuard guard(kFinishTimeout, [this] { context_.TryCancel(); });
    stop_writer(std::chrono::steady_clock::now() + kFinishTimeout);
    bool half_close;
    {
      std::lock_guard lock(mutex_);
      half_close = !writes_done_;
      writes_done_ = true;
    }
    if (half_close) stream_->WritesDone();
    if (reader_.joinable()) reader_.join();
    status = stream_->Finish();
  }
  finished_ = true;
  if (why_cancelled_) {
    status_ = Status(StatusCode::unavailable, *why_cancelled_);
    return status_;
  }
  if (!status.ok()) {
    // Before the first message a failure is about reaching the agent (TLS, token); after it, the connection broke.
    bool connecting = !received_any_ || status.error_code() == grpc::StatusCode::UNAUTHENTICATED;
    const std::string why = status.error_message().empty() ? std::string("stream failed") : status.error_message();
    status_ = connecting ? Status(StatusCode::unavailable, security::explain_connect_failure(address_, status, transport_))
                         : Status(StatusCode::unavailable, "connection lost (" + why + "): the agent process died, or "
                                                           "the network between here and there failed");
  }
  return status_;
}

}  // namespace dtrain::controller
