#pragma once

// gRPC settings every session end uses, whichever side listens or dials (agent server, launcher join server,
// launcher channel, joining agent channel). Header-only: the targets that include it link gRPC themselves.

#include <grpcpp/grpcpp.h>

#include "common/util.h"

namespace dtrain {

// Session messages carry log batches of up to 1 MiB and store values of up to 64 MiB.
inline constexpr int kSessionMaxMessageBytes = 80 << 20;

inline void set_session_server_options(grpc::ServerBuilder& builder) {
  builder.SetMaxReceiveMessageSize(kSessionMaxMessageBytes);
  builder.SetMaxSendMessageSize(kSessionMaxMessageBytes);
  // Keepalive pings let a dead peer be noticed even when no message is due; peers may ping often.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, kKeepaliveTimeMs);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, kKeepaliveTimeoutMs);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 1000);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
}

inline grpc::ChannelArguments session_channel_arguments() {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kSessionMaxMessageBytes);
  args.SetMaxSendMessageSize(kSessionMaxMessageBytes);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, kKeepaliveTimeMs);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, kKeepaliveTimeoutMs);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  // Each session gets its own connection: one agent's traffic never queues behind another's.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return args;
}

}  // namespace dtrain
