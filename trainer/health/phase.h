#pragma once

// What this worker is doing now, for its health reports: the training thread names each phase as it enters it
// ("data", "forward", "backward", "reduce", "optimizer", "checkpoint"), and the reporter's thread reads the name on
// every report and heartbeat, so a rank that hangs shows where (its last phase reaches the launcher's failure
// summary). Setting a phase is one atomic store of a pointer: cheap enough for every micro-step, and the dump
// handler (stack_dump.h) reads it from a signal handler.
// A wait on one collective names it ("allreduce bucket 3", "reduce-scatter unit 5", "all-gather unit 2"), so a rank
// hung in communication says which bucket or unit it waits for. Such names are made once, when the reducer or
// gatherer that waits is built (lasting_phase), never on the training thread's hot path.

#include <string>
#include <vector>

namespace dtrain::trainer {

// `name` must outlive the process (a string literal, or a lasting_phase()): only the pointer is kept.
void set_phase(const char* name);
// The last name set; "starting" before any.
const char* current_phase();

// A copy of `name` that lives as long as the process, usable by set_phase(); equal names give the same pointer, so
// a process makes each name once however many reducers ask for it (a few per bucket and unit in all).
const char* lasting_phase(const std::string& name);
// lasting_phase("<what> 0") .. ("<what> count-1"): the names of the buckets or units of one kind of collective.
std::vector<const char*> numbered_phases(const std::string& what, int count);

// Enters a phase for its lifetime and then goes back to the phase it found (a collective waited for in the middle
// of forward returns to "forward"). Null: the phase stays as it is.
class ScopedPhase {
 public:
  explicit ScopedPhase(const char* name) : previous_(current_phase()) {
    if (name != nullptr) set_phase(name);
  }
  ScopedPhase(const ScopedPhase&) = delete;
  ScopedPhase& operator=(const ScopedPhase&) = delete;
  ~ScopedPhase() { set_phase(previous_); }

 private:
  const char* previous_;
};

}  // namespace dtrain::trainer
