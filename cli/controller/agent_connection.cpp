#include "cli/controller/agent_connection.h"

namespace dtrain::controller {

grpc::ChannelArguments session_channel_arguments() {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(80 << 20);
  args.SetMaxSendMessageSize(80 << 20);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 5000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  // Each session gets its own connection: one agent's traffic never queues behind another's.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return args;
}

AgentConnection::AgentConnection(int node, std::string address, EventQueue& events)
    : node_(node), address_(std::move(address)), events_(events) {}

AgentConnection::~AgentConnection() {
  if (stream_ && !finished_) context_.TryCancel();
  if (reader_.joinable()) reader_.join();
}

bool AgentConnection::open(std::chrono::milliseconds timeout, std::string& error) {
  channel_ = grpc::CreateCustomChannel(address_, grpc::InsecureChannelCredentials(), session_channel_arguments());
  if (!channel_->WaitForConnected(std::chrono::system_clock::now() + timeout)) {
    error = "cannot connect to the agent at " + address_ + " within " + std::to_string(timeout.count()) +
            " ms; is `dtrain agent` running there and is the port reachable?";
    return false;
  }
  stub_ = v1::AgentService::NewStub(channel_);
  stream_ = stub_->Session(&context_);
  if (!stream_) {
    error = "cannot open a session with the agent at " + address_;
    return false;
  }
  reader_ = std::thread([this] {
    v1::AgentMessage message;
    while (stream_->Read(&message)) {
      Event event;
      event.kind = Event::Kind::message;
      event.node = node_;
      event.message = std::move(message);
      events_.push(std::move(event));
      message = v1::AgentMessage();
    }
    Event closed;
    closed.kind = Event::Kind::session_closed;
    closed.node = node_;
    events_.push(std::move(closed));
  });
  return true;
}

bool AgentConnection::send(const v1::LauncherMessage& message) {
  if (!stream_ || finished_ || writes_done_) return false;
  return stream_->Write(message);
}

bool AgentConnection::send_last(const v1::LauncherMessage& message) {
  if (!stream_ || finished_ || writes_done_) return false;
  writes_done_ = true;
  return stream_->Write(message, grpc::WriteOptions().set_last_message());
}

std::string AgentConnection::finish() {
  if (!stream_ || finished_) return status_;
  if (!writes_done_) stream_->WritesDone();
  writes_done_ = true;
  if (reader_.joinable()) reader_.join();
  grpc::Status status = stream_->Finish();
  finished_ = true;
  if (!status.ok()) status_ = status.error_message().empty() ? "stream failed" : status.error_message();
  return status_;
}

}  // namespace dtrain::controller
