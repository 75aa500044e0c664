#include "agent/session/join_client.h"

#include <algorithm>
#include <thread>

#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include "agent/security/credentials.h"
#include "common/deadline_guard.h"
#include "common/grpc/grpc_options.h"
#include "dtrain/v1/session.grpc.pb.h"

namespace dtrain::agent {
namespace {

// Agents usually start before their launcher listens: retry quickly instead of gRPC's default 1 s..120 s backoff.
constexpr int kReconnectBackoffMs = 100;
constexpr int kMaxReconnectBackoffMs = 1000;
// gRPC takes its "minimum reconnect backoff" as the least time one connection attempt (TCP connect and TLS
// handshake) is given before it is abandoned and redone. A launcher that thousands of agents dial at once has its
// handshakes queued for seconds: at 100 ms every agent gave up and redialed over and over, and 1,024 agents took
// 64 s to say hello (BENCHMARKS.md). A refused connection (no launcher yet) still fails at once and is retried
// after kReconnectBackoffMs.
constexpr int kConnectAttemptMs = 20000;
// One connection attempt's wait; between attempts stop() is noticed, so this bounds how late.
constexpr std::chrono::seconds kConnectAttempt{1};
// How often a wait between dials looks at stop().
constexpr std::chrono::milliseconds kStopPoll{50};
// The session already failed: a launcher that does not complete the call must not hold this agent longer.
constexpr std::chrono::seconds kFinishTimeout{2};

// The agent's end of a session it dialed itself.
class ClientSessionStream final : public SessionStream {
 public:
  ClientSessionStream(grpc::ClientContext& context,
                      grpc::ClientReaderWriter<v1::AgentMessage, v1::LauncherMessage>& stream, std::string peer)
      : context_(context), stream_(stream), peer_(std::move(peer)) {}
  bool read(v1::LauncherMessage& message) override { return stream_.Read(&message); }
  bool write(const v1::AgentMessage& message) override { return stream_.Write(message); }
  void cancel() override { context_.TryCancel(); }
  std::string peer() const override { return peer_; }

 private:
  grpc::ClientContext& context_;
  grpc::ClientReaderWriter<v1::AgentMessage, v1::LauncherMessage>& stream_;
  std::string peer_;
};

// Why the channel cannot connect, when the launcher answers but refuses this agent (another cluster's CA, a wrong
// token, plaintext against TLS): "" while waiting is right (nothing listens yet, or the launcher is busy).
// WaitForConnected gives no reason; one call on a channel in TRANSIENT_FAILURE fails at once with it. The call is a
// Join that says nothing: should the channel connect meanwhile, the launcher ends it unseen (no hello, no node).
std::string refusal(grpc::Channel& channel, v1::LauncherService::Stub& stub, const std::string& launcher,
                    Transport transport) {
  if (channel.GetState(false) != GRPC_CHANNEL_TRANSIENT_FAILURE) return "";
  grpc::ClientContext probe;
  probe.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  auto stream = stub.Join(&probe);
  probe.TryCancel();
  const grpc::Status status = stream->Finish();
  const std::string& text = status.error_message();
  // A TLS launcher closes a plaintext agent's connection at its first bytes, which are no TLS handshake.
  const bool launcher_wants_tls = transport == Transport::plaintext && text.find("Socket closed") != std::string::npos;
  if (status.error_code() == grpc::StatusCode::UNAUTHENTICATED ||
      status.error_code() == grpc::StatusCode::PERMISSION_DENIED || launcher_wants_tls ||
      text.find("andshake") != std::string::npos || text.find("SSL") != std::string::npos) {
    return "the launcher at " + launcher + " refused this agent: " +
           security::explain_connect_failure(launcher, status, transport);
  }
  return "";
}

}  // namespace

JoinClient::JoinClient(JoinTarget target, Serve serve) : target_(std::move(target)), serve_(std::move(serve)) {}

Status JoinClient::run() {
  auto deadline = std::chrono::steady_clock::now() + target_.timeout;
  grpc::ChannelArguments args = session_channel_arguments();
  if (target_.transport == Transport::tls) security::set_tls_target(args);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, kReconnectBackoffMs);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, kConnectAttemptMs);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, kMaxReconnectBackoffMs);
  auto channel = grpc::CreateCustomChannel(target_.launcher, target_.credentials, args);
  auto stub = v1::LauncherService::NewStub(channel);
  std::string last_error = "no answer";
  while (std::chrono::steady_clock::now() < deadline) {
    if (stopped_) return {};
    if (!channel->WaitForConnected(std::chrono::system_clock::now() + kConnectAttempt)) {
      // Refused by the launcher it reached: it will refuse again, so say which check failed now, not at the timeout.
      if (auto why = refusal(*channel, *stub, target_.launcher, target_.transport); !why.empty()) {
        return {StatusCode::unauthenticated, why};
      }
      last_error = "cannot connect";
      continue;
    }
    grpc::ClientContext context;
    auto stream = stub->Join(&context);
    ClientSessionStream session(context, *stream, target_.launcher);
    const Served served = serve_(session);
    if (served.answered) joined_ = true;
    if (served.status.ok()) {
      // Clean goodbye: nothing more to hear from the launcher, which may already be gone; do not wait for its
      // final status.
      context.TryCancel();
      stream->Finish();
      return {};
    }
    grpc::Status status;
    {
      DeadlineGuard guard(kFinishTimeout, [&context] { context.TryCancel(); });
      status = stream->Finish();
    }
    if (status.error_code() == grpc::StatusCode::FAILED_PRECONDITION) {
      // The launcher's door turned this agent away (its node rank is taken, or out of range): final.
      return {StatusCode::failed_precondition, "the launcher at " + target_.launcher + " refused this agent: " +
                                                   status.error_message()};
    }
    if (!status.ok() && status.error_code() != grpc::StatusCode::CANCELLED) {
      return {StatusCode::unavailable,
              "the launcher at " + target_.launcher + " ended the session: " +
                  security::explain_connect_failure(target_.launcher, status, target_.transport)};
    }
    if (served.answered || stopped_) return served.status;
    last_error = "it ended the session before answering this agent's hello";
    spdlog::warn("the launcher at {} ended the session before answering this agent's hello; dialing again in {} ms",
                 target_.launcher, kRedialWait.count());
    const auto until = std::min(deadline, std::chrono::steady_clock::now() + kRedialWait);
    while (!stopped_ && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(kStopPoll);
  }
  return {StatusCode::deadline_exceeded,
          "could not join the launcher at " + target_.launcher + " within " +
              std::to_string(target_.timeout.count()) + " ms (" + last_error +
              "); is `dtrain launch` running with nodes.rendezvous " + target_.launcher + "?"};
}

}  // namespace dtrain::agent
