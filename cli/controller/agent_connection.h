#pragma once

// The launcher's end of one agent session when the launcher dials (provider local and static). A reader thread
// turns every AgentMessage into an Event; the controller thread is the only writer.

#include <chrono>
#include <memory>
#include <string>
#include <atomic>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "cli/controller/event_queue.h"
#include "cli/controller/launcher_credentials.h"
#include "cli/controller/node_session.h"
#include "common/transport.h"
#include "dtrain/v1/session.grpc.pb.h"

namespace dtrain::controller {

class AgentConnection final : public NodeSession {
 public:
  // How long finish() waits for the agent to complete the call before cancelling it.
  static constexpr std::chrono::milliseconds kFinishTimeout{2000};
  // How long one send may block on an agent that does not read before the session is cancelled.
  static constexpr std::chrono::milliseconds kStallTimeout{10000};
  // While dialing, how often open() looks at why the channel is not connected yet.
  static constexpr std::chrono::milliseconds kConnectPoll{250};

  // `credentials`: TLS + token for a remote agent, or insecure ones on loopback / with --insecure.
  AgentConnection(int node, std::string address, EventQueue& events,
                  std::shared_ptr<grpc::ChannelCredentials> credentials, grpc::ChannelArguments arguments,
                  Transport transport);
  // The same, with the launcher's credentials for `transport`: how providers local and static reach their agents.
  static std::shared_ptr<AgentConnection> make(int node, std::string address, EventQueue& events,
                                               LauncherCredentials& credentials, Transport transport);
  ~AgentConnection() override;   // cancels the stream and joins the reader
  AgentConnection(const AgentConnection&) = delete;
  AgentConnection& operator=(const AgentConnection&) = delete;

  // Dials and opens the session: unavailable when the agent cannot be reached before `timeout`, unauthenticated
  // when it refuses this launcher (another cluster's CA, a wrong token).
  Status open(std::chrono::milliseconds timeout);
  // False when the stream is broken.
  bool send(const Command& command) override;
  // Sends `message` as the last one of the session and half-closes: the agent's server can complete the call as
  // soon as it has answered, instead of waiting for the launcher to hang up.
  bool send_last(const Command& command) override;
  // After a session_closed event (or to end the session): half-closes, waits for the reader, returns how the
  // session ended. Bounded: after kFinishTimeout the call is cancelled. Safe to call more than once.
  Status finish() override;
  // Ends the session from this side at once (a stuck agent); finish() then returns promptly.
  void cancel() override { context_.TryCancel(); }

  std::string address() const override { return address_; }
  bool open() const override { return stream_ != nullptr && !finished_; }

 private:
  int node_;
  std::string address_;
  EventQueue& events_;
  std::shared_ptr<grpc::ChannelCredentials> credentials_;
  grpc::ChannelArguments arguments_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::AgentService::Stub> stub_;
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::LauncherMessage, v1::AgentMessage>> stream_;
  std::thread reader_;
  bool finished_ = false;
  bool writes_done_ = false;
  Transport transport_;   // for error explanations: which transport this side used
  std::atomic<bool> received_any_{false};   // the agent sent at least one message
  Status status_;
};

}  // namespace dtrain::controller
