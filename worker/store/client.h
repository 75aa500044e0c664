#pragma once

// The C++ client of the job's key-value store (c10d Store semantics), as workers use it: the store address and
// token come from DTRAIN_STORE_ADDR and DTRAIN_JOB_TOKEN, which the launcher sets for every worker. Calls are
// synchronous and thread-safe; every call has a deadline. Failures throw StoreError, whose message names the
// operation, the key, the store's address and what to check.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace dtrain::store {

// The longest token (DTRAIN_JOB_TOKEN) a client sends. It travels as gRPC metadata, and gRPC refuses a call whose
// metadata pass 8 KiB by default, with a message about sizes that reads like a full store; the launcher's tokens are
// 64 characters. The Python client (dtrain_store.MAX_TOKEN_BYTES) has the same limit.
inline constexpr std::size_t kMaxTokenBytes = 4 * 1024;

struct StoreClientOptions {
  // How long the constructor waits for the store to accept a connection, and the deadline of a call that does not
  // block (set, add, compare_set, check, delete_key, num_keys), which includes reconnecting if the link dropped.
  std::chrono::milliseconds connect_timeout{30'000};
  // The timeout of get and wait when the call passes none (0); c10d's default store timeout is 300 s.
  // The server caps every timeout at 1 hour.
  std::chrono::milliseconds default_timeout{300'000};
};

class StoreError : public std::runtime_error {
 public:
  enum class Kind {
    timeout,           // a get/wait timed out, or the store did not answer in time
    unauthenticated,   // the token is wrong, its round ended, or it cannot be sent (a character or a size that
                       // gRPC metadata cannot carry: the constructor refuses it before any call)
    invalid_argument,  // a request over a limit (key 4 KiB, value 16 MiB by default, 64 keys, timeout 1 hour)
    full,              // the job's store holds as many bytes or keys as it may (store.h, StoreLimits)
    not_an_integer,    // add on a value that is not an integer (or the sum overflows)
    closed,            // the round ended while the call waited
    unreachable,       // no connection to the store
    other,
  };

  StoreError(Kind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  Kind kind() const { return kind_; }

 private:
  Kind kind_;
};

class StoreClient {
 public:
  // Connects to the store at `address` (host:port); throws StoreError if it cannot within connect_timeout, and
  // (unauthenticated) at once for a token that gRPC metadata cannot carry: a character outside printable ASCII, or
  // more than kMaxTokenBytes.
  // When DTRAIN_TLS_CA is set (a cluster that uses TLS), the connection is mutual TLS with the worker certificate
  // in DTRAIN_TLS_CERT / DTRAIN_TLS_KEY, which the agent issued for this job (no cluster token).
  StoreClient(std::string address, std::string token, StoreClientOptions options = {});
  // Reads DTRAIN_STORE_ADDR and DTRAIN_JOB_TOKEN; throws StoreError naming a missing variable.
  static StoreClient from_env(StoreClientOptions options = {});

  StoreClient(StoreClient&&) noexcept;
  StoreClient& operator=(StoreClient&&) noexcept;
  ~StoreClient();

  void set(std::string_view key, std::string_view value);
  // Blocks until the key exists; timeout 0 means options.default_timeout.
  std::string get(std::string_view key, std::chrono::milliseconds timeout = {});
  // Adds delta to the integer under key (missing counts as 0) and returns the new value.
  std::int64_t add(std::string_view key, std::int64_t delta);
  // c10d compareSet: stores desired if the key holds expected (or is missing and expected is empty); returns the
  // value now stored (desired on success; else the current value, or expected when the key is missing).
  std::string compare_set(std::string_view key, std::string_view expected, std::string_view desired);
  // Whether every key exists now.
  bool check(const std::vector<std::string>& keys);
  // Whether the key existed.
  bool delete_key(std::string_view key);
  std::int64_t num_keys();
  // Blocks until every key exists; timeout 0 means options.default_timeout.
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout = {});

  const std::string& address() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dtrain::store
