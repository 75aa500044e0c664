#pragma once

// How the ranks of a shm communicator wait for each other: every rank counts the sync points it has passed in its
// progress word (RankSlot::progress); all ranks pass the same sequence of sync points (the same collectives in the
// same order), so "every rank has passed point v" is "every progress word is at least v". A rank arrives by
// incrementing its own word and waking the peers that sleep on it; it waits by spinning briefly (a peer on another
// core is usually microseconds away) and then sleeping in FUTEX_WAIT with a timeout. Between sleeps it checks that
// the ranks it waits for are still there: a rank holds its slot's robust mutex while it is in the communicator, and
// the kernel hands that mutex on with EOWNERDEAD the moment the holder dies (SIGKILL included), so a dead peer is
// seen within kLivenessPoll, and a stalled one at the deadline: a CommError either way, never a hang.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

#include "trainer/comm/shm/segment.h"

namespace dtrain::trainer {

// The futex calls the waits are made of, on words shared between processes (shm/p2p.h uses them too): wakes every
// sleeper on `word`; sleeps while `word` holds `seen`, at most `limit`.
void futex_wake_all(std::atomic<std::uint32_t>& word);
void futex_sleep(std::atomic<std::uint32_t>& word, std::uint32_t seen, std::chrono::steady_clock::duration limit);

class PeerSync {
 public:
  // `timeout`: the communicator's deadline, named in messages.
  PeerSync(Segment& segment, int rank, std::chrono::milliseconds timeout);

  // Takes this rank's liveness mutex and publishes its pid. Call on the thread that runs the collectives: the
  // mutex stays held until leave() on that thread, or until the thread or process ends.
  void enter();
  void leave();

  // Counts this rank as joined and waits until all have, or throws CommError at `deadline` naming who is missing.
  void join(std::chrono::steady_clock::time_point deadline);

  // Passes the next sync point; returns its number.
  std::uint32_t arrive();
  // Waits until every rank has passed sync point `point`; throws CommError naming `what` (the collective), the
  // ranks that are behind and why (dead, left, or still behind at `deadline`).
  void wait_all(std::uint32_t point, std::chrono::steady_clock::time_point deadline, const std::string& what);

  // The offset (or marker) this rank publishes for the collective it is in; read by peers after a sync point.
  void publish(std::uint64_t value);
  std::uint64_t published(int rank) const;

  // "" while `peer` is in the communicator; else what happened to it ("(pid 123) is gone: ...").
  std::string gone(int peer) const;

 private:
  // Waits on one rank's progress word until it reaches `point`; throws as wait_all.
  void wait_one(int peer, std::uint32_t point, std::chrono::steady_clock::time_point deadline,
                const std::string& what);

  Segment& segment_;
  int rank_;
  std::chrono::milliseconds timeout_;
  std::uint32_t passed_ = 0;  // this rank's progress, kept locally too (only this rank writes its word)
};

}  // namespace dtrain::trainer
