#pragma once

// A text the launcher's loop makes only when a reader waits for it: the control socket's status snapshot
// (control_socket.h) and the /metrics text (metrics_server.h). A reader that arrives asks (ask(), and wanted() turns
// true); the launcher's loop sees wanted() on its next turn (at least once a second) and publishes; the publish
// makes wake_fd() readable, so the serving thread answers every reader that asked before it at once, and a reader
// whose wait runs out gets the last text instead (the loop is busy, or the launcher is ending). Made every second
// whether or not anybody asked, these texts were the launcher's largest cost at 4,096 agents (BENCHMARKS.md, "Health
// from 32,768 ranks"): a status snapshot of 32,768 ranks is megabytes of JSON, their metrics 23 MB.
//
// Threads: publish() and wanted() from the launcher's loop; everything else from the one serving thread. A text is
// shared, never copied: readers hold a pointer to the one they were given.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "common/status.h"

namespace dtrain::controller {

class OnDemandText {
 public:
  using Clock = std::chrono::steady_clock;
  using Text = std::shared_ptr<const std::string>;

  // `initial` is what a reader gets before the first publish. Fails (internal) when no eventfd can be made.
  static Result<std::unique_ptr<OnDemandText>> create(std::string initial);
  ~OnDemandText();
  OnDemandText(const OnDemandText&) = delete;
  OnDemandText& operator=(const OnDemandText&) = delete;

  // The launcher's loop.
  bool wanted() const { return wanted_.load(std::memory_order_relaxed); }
  void publish(std::string text);

  // The serving thread. Readable after a publish; poll it, then clear_wake().
  int wake_fd() const { return wake_fd_; }
  void clear_wake();
  // A reader arrived: asks the loop for a text and returns what the reader must see passed (give it to for_reader).
  std::uint64_t ask();
  // Readers still wait after a publish answered earlier ones (and cleared the wish): ask again.
  void ask_again();
  // What a reader that asked (ask() returned `asked`) gets now: a text published since, else the last one once it has
  // waited long enough (`waited`), else nullptr (it waits on).
  Text for_reader(std::uint64_t asked, bool waited) const;
  // The last text published (or the initial one).
  Text latest() const;
  // Whether the last publish is younger than `age`.
  bool younger_than(Clock::duration age) const;

 private:
  OnDemandText(int wake_fd, std::string initial);

  const int wake_fd_;   // an eventfd that publish() writes
  mutable std::mutex mutex_;
  Text text_;
  std::uint64_t generation_ = 0;        // publishes so far
  Clock::time_point published_at_{};    // of the last one
  std::atomic<bool> wanted_{false};
};

}  // namespace dtrain::controller
