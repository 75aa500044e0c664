#pragma once

// What this worker is doing now, for its health reports: the training thread names each phase as it enters it
// ("data", "forward", "backward", "reduce", "optimizer", "checkpoint"), and the reporter's thread reads the name on
// every report and heartbeat, so a rank that hangs shows where (its last phase reaches the launcher's failure
// summary). Setting a phase is one atomic store of a pointer: cheap enough for every micro-step.

namespace dtrain::trainer {

// `name` must outlive the process (a string literal): only the pointer is kept.
void set_phase(const char* name);
// The last name set; "starting" before any.
const char* current_phase();

}  // namespace dtrain::trainer
