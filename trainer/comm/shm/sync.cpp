#include "trainer/comm/shm/sync.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>

#include "trainer/comm/communicator.h"
#include "trainer/comm/describe.h"

namespace dtrain::trainer {
namespace {

using Clock = std::chrono::steady_clock;

// How long a waiter spins before it sleeps: a peer on another core usually arrives within a few microseconds of a
// chunk's work, and a futex sleep and wake costs tens; beyond this the peer is busy elsewhere or not scheduled, and
// spinning would take the CPU from it.
constexpr auto kSpin = std::chrono::microseconds(50);
// The longest a waiter sleeps before it checks that the ranks it waits for are still alive: the bound on noticing a
// dead peer, well under any sensible collective timeout and rare enough to cost nothing.
constexpr auto kLivenessPoll = std::chrono::milliseconds(50);

long futex(std::atomic<std::uint32_t>& word, int op, std::uint32_t value, const timespec* timeout) {
  // Not FUTEX_PRIVATE_FLAG: the word is shared between processes.
  return ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), op, value, timeout, nullptr, 0);
}

// Sync point numbers wrap around; a word has reached `point` when it is no more than half the range behind.
bool reached(std::uint32_t progress, std::uint32_t point) { return static_cast<std::int32_t>(progress - point) >= 0; }

void relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

}  // namespace

void futex_wake_all(std::atomic<std::uint32_t>& word) { futex(word, FUTEX_WAKE, INT_MAX, nullptr); }

void futex_sleep(std::atomic<std::uint32_t>& word, std::uint32_t seen, Clock::duration limit) {
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(limit).count();
  const timespec timeout{static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
  futex(word, FUTEX_WAIT, seen, &timeout);
}

PeerSync::PeerSync(Segment& segment, int rank, std::chrono::milliseconds timeout)
    : segment_(segment), rank_(rank), timeout_(timeout) {}

void PeerSync::enter() {
  RankSlot& slot = segment_.slot(rank_);
  if (pthread_mutex_lock(&slot.alive) == EOWNERDEAD) pthread_mutex_consistent(&slot.alive);
  slot.pid.store(static_cast<std::int32_t>(::getpid()));
}

void PeerSync::leave() { pthread_mutex_unlock(&segment_.slot(rank_).alive); }

void PeerSync::join(Clock::time_point deadline) {
  std::atomic<std::uint32_t>& joined = segment_.joined();
  const auto ranks = static_cast<std::uint32_t>(segment_.geometry().ranks);
  joined.fetch_add(1);
  futex_wake_all(joined);
  for (std::uint32_t seen = joined.load(); seen < ranks; seen = joined.load()) {
    const auto now = Clock::now();
    if (now >= deadline) {
      std::string missing;
      for (int r = 0; r < segment_.geometry().ranks; ++r) {
        if (segment_.slot(r).pid.load() == 0) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      }
      throw CommError("shm communicator: rank " + std::to_string(rank_) + " waited " + describe_seconds(timeout_) +
                      " for every rank to join " + shm_segment_dir() + "/" + segment_.name() +
                      "; missing: rank(s) " + missing + ". Check their logs, and that every rank of the job runs on "
                      "this node");
    }
    futex_sleep(joined, seen, std::min<Clock::duration>(kLivenessPoll, deadline - now));
  }
}

std::uint32_t PeerSync::arrive() {
  RankSlot& slot = segment_.slot(rank_);
  slot.progress.store(++passed_);
  // Both sides are sequentially consistent: either this load sees a waiter's increment, or that waiter's re-read
  // of the progress word sees the new value before it sleeps.
  if (slot.waiters.load() != 0) futex_wake_all(slot.progress);
  return passed_;
}

void PeerSync::wait_all(std::uint32_t point, Clock::time_point deadline, const std::string& what) {
  for (int peer = 0; peer < segment_.geometry().ranks; ++peer) {
    if (peer != rank_) wait_one(peer, point, deadline, what);
  }
}

void PeerSync::wait_one(int peer, std::uint32_t point, Clock::time_point deadline, const std::string& what) {
  RankSlot& slot = segment_.slot(peer);
  if (reached(slot.progress.load(std::memory_order_acquire), point)) return;
  const auto spin_until = Clock::now() + kSpin;
  for (unsigned i = 1;; ++i) {
    relax();
    if (reached(slot.progress.load(std::memory_order_acquire), point)) return;
    if (i % 64 == 0 && Clock::now() >= spin_until) break;
  }
  for (;;) {
    slot.waiters.fetch_add(1);
    const std::uint32_t seen = slot.progress.load();
    const auto now = Clock::now();
    if (!reached(seen, point) && now < deadline) {
      futex_sleep(slot.progress, seen, std::min<Clock::duration>(kLivenessPoll, deadline - now));
    }
    slot.waiters.fetch_sub(1);
    if (reached(slot.progress.load(std::memory_order_acquire), point)) return;
    const std::string where = "shm " + what + " failed on rank " + std::to_string(rank_) + " of " +
                              std::to_string(segment_.geometry().ranks) + ": rank " + std::to_string(peer);
    if (const std::string why = gone(peer); !why.empty()) {
      throw CommError(where + " " + why + ". Check rank " + std::to_string(peer) + "'s log for why it ended");
    }
    if (Clock::now() >= deadline) {
      throw CommError(where + " (pid " + std::to_string(slot.pid.load()) + ") did not reach sync point " +
                      std::to_string(point) + " within the timeout of " + describe_seconds(timeout_) +
                      " (it is at " + std::to_string(slot.progress.load()) + "). It is alive: stalled, or issuing "
                      "other collectives; check that every rank issues the same collectives in the same order with "
                      "the same sizes");
    }
  }
}

std::string PeerSync::gone(int peer) const {
  RankSlot& slot = segment_.slot(peer);
  const int locked = pthread_mutex_trylock(&slot.alive);
  if (locked == EBUSY) return {};
  if (locked == EOWNERDEAD) pthread_mutex_consistent(&slot.alive);
  if (locked == 0 || locked == EOWNERDEAD) pthread_mutex_unlock(&slot.alive);
  return "(pid " + std::to_string(slot.pid.load()) +
         ") is gone: its process died (killed, or crashed) or closed its communicator in the middle of the collective";
}

void PeerSync::publish(std::uint64_t value) { segment_.slot(rank_).published.store(value); }

std::uint64_t PeerSync::published(int rank) const { return segment_.slot(rank).published.load(); }

}  // namespace dtrain::trainer
