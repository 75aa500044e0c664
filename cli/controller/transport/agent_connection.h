#pragma once

// The launcher's end of one agent session when the launcher dials (provider local and static). A reader thread
// turns every AgentMessage into an Event; a writer thread writes what the controller sends, in order, from a
// SessionWriteQueue, so that an agent that stops reading never holds the controller's loop: it is given up once a
// message waited kStallTimeout or kMaxQueuedMessages wait, as a joined agent is (join_server.h).

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "cli/controller/session/event_queue.h"
#include "cli/controller/transport/launcher_credentials.h"
#include "cli/controller/session/node_session.h"
#include "cli/controller/transport/session_write_queue.h"
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
  // Messages that may wait for an agent that does not read (the launcher sends a few per round and heartbeat).
  static constexpr std::size_t kMaxQueuedMessages = 1024;

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
  // Queues `command` and returns at once. False when the stream is broken, or when the agent has not read for
  // kStallTimeout or kMaxQueuedMessages wait (the session is then cancelled and finish() says why).
  bool send(const Command& command) override;
  // Sends `message` as the last one of the session and half-closes: the agent's server can complete the call as
  // soon as it has answered, instead of waiting for the launcher to hang up.
  bool send_last(const Command& command) override;
  // After a session_closed event (or to end the session): lets the writer finish what is queued, half-closes,
  // waits for the reader, returns how the session ended. Bounded: after kFinishTimeout the call is cancelled. Safe
  // to call more than once.
  Status finish() override;
  // Ends the session from this side at once (a stuck agent); finish() then returns promptly.
  void cancel() override { context_.TryCancel(); }

  std::string address() const override { return address_; }
  bool open() const override { return stream_ != nullptr && !finished_; }

 private:
  struct Outgoing {
    v1::LauncherMessage message;
    bool last = false;   // half-close after it (send_last)
  };
  bool queue(v1::LauncherMessage message, bool last);
  void write_loop();
  // Stops the writer once what is queued was written, or at `deadline` (then the call is cancelled).
  void stop_writer(std::chrono::steady_clock::time_point deadline);

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
  std::thread writer_;
  std::mutex mutex_;                    // guards what follows, up to status_
  std::condition_variable wake_;        // the writer: something to write, or stop
  std::condition_variable drained_;     // finish(): the writer has nothing in flight
  SessionWriteQueue<Outgoing> writes_{kMaxQueuedMessages, kStallTimeout};
  bool broken_ = false;                 // a write failed: nothing more can be written
  bool closing_ = false;                // the writer stops once the queue is empty
  std::optional<std::string> why_cancelled_;   // the agent did not read: the session was cancelled for this
  bool finished_ = false;
  bool writes_done_ = false;            // send_last or finish: no more sends
  Transport transport_;   // for error explanations: which transport this side used
  std::atomic<bool> received_any_{false};   // the agent sent at least one message
  Status status_;
};

}  // namespace dtrain::controller
