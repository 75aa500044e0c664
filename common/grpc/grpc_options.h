#pragma once

// gRPC settings every session end uses, whichever side listens or dials (agent server, launcher join server,
// launcher channel, joining agent channel). Header-only: the targets that include it link gRPC themselves.

#include <malloc.h>

#include <absl/synchronization/mutex.h>
#include <grpcpp/grpcpp.h>

namespace dtrain {

// gRPC keepalive on every session channel. Liveness is decided by the session heartbeats and
// health.node_timeout_s; keepalive only finds dead TCP connections while no message is due, so its timeout is
// generous: a peer starved of CPU (hundreds of agents on a few cores) must not be declared dead by it.
inline constexpr int kKeepaliveTimeMs = 10000;
inline constexpr int kKeepaliveTimeoutMs = 30000;

// Session messages carry log batches of up to 1 MiB and store values of up to 64 MiB.
inline constexpr int kSessionMaxMessageBytes = 80 << 20;
// tune_for_many_sessions(): how much a heap grows at a time, and how much free memory it keeps before trimming.
inline constexpr int kManySessionsHeapStep = 64 << 20;
inline constexpr int kManySessionsTrimThreshold = 256 << 20;

namespace detail {

// What both ends of a session set: `target` is a grpc::ServerBuilder or grpc::ChannelArguments (both have the
// message size setters), `set_int(name, value)` sets one integer channel argument on it.
template <class Target, class SetInt>
void set_session_common(Target& target, SetInt set_int) {
  target.SetMaxReceiveMessageSize(kSessionMaxMessageBytes);
  target.SetMaxSendMessageSize(kSessionMaxMessageBytes);
  // Keepalive pings let a dead peer be noticed even when no message is due.
  set_int(GRPC_ARG_KEEPALIVE_TIME_MS, kKeepaliveTimeMs);
  set_int(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, kKeepaliveTimeoutMs);
  set_int(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
}

}  // namespace detail

// Process settings for one that holds thousands of sessions (the launcher's join server, dtrain-fleet-sim).
// - gRPC's locks are absl::Mutex, and the absl this links is built with lock-order (deadlock) checks on, which keep
//   every lock ever taken in one graph and look it up on each acquisition: at 4,096 agents that was 10% of the
//   launcher's CPU (perf). It diagnoses lock-order bugs in gRPC itself, none of ours.
// - glibc grows each thread arena's heap by the top pad (128 KiB) at a time, an mprotect and page faults each;
//   thousands of sessions' buffers made that and the trimming back 12% of the launcher's CPU. Grow in 64 MiB steps
//   and give memory back only past 256 MiB free.
inline void tune_for_many_sessions() {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  mallopt(M_TOP_PAD, kManySessionsHeapStep);
  mallopt(M_TRIM_THRESHOLD, kManySessionsTrimThreshold);
}

inline void set_session_server_options(grpc::ServerBuilder& builder) {
  detail::set_session_common(builder, [&](const char* name, int value) { builder.AddChannelArgument(name, value); });
  // Peers ping often (the keepalive above): no ping is refused as too frequent, so none is dropped for it.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 1000);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
}

inline grpc::ChannelArguments session_channel_arguments() {
  grpc::ChannelArguments args;
  detail::set_session_common(args, [&](const char* name, int value) { args.SetInt(name, value); });
  // Each session gets its own connection: one agent's traffic never queues behind another's.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return args;
}

}  // namespace dtrain
