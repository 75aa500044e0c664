#pragma once
// DeadlineGuard: puts a bound on a blocking call that takes no deadline of its own.
//
// gRPC's synchronous streams have no per-operation deadline: a Write waits for HTTP/2 flow control as long as the
// peer does not read, WritesDone and Finish wait for a peer that may never answer. The call's context can be
// cancelled from another thread, which makes every blocked operation on it return at once. A DeadlineGuard does
// that: it runs `on_expiry` (e.g. `[&] { context.TryCancel(); }`) on a timer thread if it is still alive at its
// deadline.
//
//   {
//     DeadlineGuard guard(std::chrono::seconds(2), [&] { context.TryCancel(); });
//     status = stream->Finish();              // returns within ~2 s whatever the peer does
//   }
//
// One timer thread serves every guard of the process (thousands of sessions do not cost thousands of threads).

#include <chrono>
#include <cstdint>
#include <functional>

namespace dtrain {

class DeadlineGuard {
 public:
  DeadlineGuard(std::chrono::milliseconds timeout, std::function<void()> on_expiry);
  // Disarms the guard. If on_expiry is running at this moment, waits for it to return, so that whatever it touches
  // may be destroyed right after.
  ~DeadlineGuard();
  DeadlineGuard(const DeadlineGuard&) = delete;
  DeadlineGuard& operator=(const DeadlineGuard&) = delete;

  // True once on_expiry has run (the call was cut short).
  bool expired() const;

 private:
  std::uint64_t id_;
};

}  // namespace dtrain
