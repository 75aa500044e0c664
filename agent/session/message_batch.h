#pragma once

// What an agent sends in one write: the messages waiting at the front of its queue, as one Batch when there are
// several (proto/dtrain/v1/session.proto). Shared by the agent's Outbox and dtrain-fleet-sim, which sends what a
// real agent would.

#include <cstddef>
#include <deque>

#include "dtrain/v1/session.pb.h"

namespace dtrain::agent {

// At most this many messages, and about this many bytes, go in one batch: a batch is one gRPC message, far below
// its 4 MiB limit, and a large one (a worker's evidence, its stderr tail) ends the batch it starts.
inline constexpr std::size_t kMaxBatchMessages = 256;
inline constexpr std::size_t kMaxBatchBytes = 1 << 20;

inline bool batchable(const v1::AgentMessage& m) { return !m.has_log_lines() && !m.has_batch(); }

// Takes the front message of `queue` and, when it is batchable, the batchable ones right behind it, within the
// bounds. One message comes out as itself. `queue` must not be empty.
inline v1::AgentMessage take_batch(std::deque<v1::AgentMessage>& queue) {
  v1::AgentMessage first = std::move(queue.front());
  queue.pop_front();
  if (!batchable(first) || queue.empty() || !batchable(queue.front())) return first;
  v1::AgentMessage out;
  auto& messages = *out.mutable_batch()->mutable_messages();
  std::size_t bytes = first.ByteSizeLong();
  *messages.Add() = std::move(first);
  while (!queue.empty() && batchable(queue.front()) && messages.size() < static_cast<int>(kMaxBatchMessages) &&
         bytes < kMaxBatchBytes) {
    bytes += queue.front().ByteSizeLong();
    *messages.Add() = std::move(queue.front());
    queue.pop_front();
  }
  return out;
}

}  // namespace dtrain::agent
