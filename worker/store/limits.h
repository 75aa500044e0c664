#pragma once

// The limits of one request to the job's key-value store: the store (agent/store/store.h) enforces them, and the
// clients refuse what passes them before sending it. Written once here for both sides; the Python client
// (worker/python/dtrain_store.py: MAX_KEY_BYTES, MAX_VALUE_BYTES, ...) spells the same numbers.

#include <chrono>
#include <cstddef>

namespace dtrain::store {

inline constexpr std::size_t kMaxKeyBytes = 4 * 1024;
// The largest value any store accepts, whatever its StoreLimits: what fits in one gRPC message with its key
// (kMaxMessageBytes). Clients refuse larger values before sending them.
inline constexpr std::size_t kMaxValueBytes = 64 * 1024 * 1024;
inline constexpr std::size_t kMaxKeysPerCall = 64;
// The timeout of a get or wait that passes none (0): c10d's default store timeout.
inline constexpr std::chrono::milliseconds kDefaultTimeout{300'000};
// The longest timeout a get or wait may ask for.
inline constexpr std::chrono::milliseconds kMaxTimeout{3'600'000};
// The largest message on a store channel: a kMaxValueBytes value plus its key and framing.
inline constexpr int kMaxMessageBytes = 65 << 20;

}  // namespace dtrain::store
