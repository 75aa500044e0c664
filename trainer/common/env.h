#pragma once

// Integers from the environment, read one way everywhere in the trainer: an unset variable means the caller's
// default; a set one must be a whole decimal integer, and anything else is an error that names the variable, its
// value and what it should hold, never a silent fallback to the default.

#include <string>

#include "common/status.h"

namespace dtrain::trainer {

// The integer value of the environment variable `name`, or `fallback` when it is unset. A value that is not a
// whole decimal integer in int's range ("", "two", " 4", "4,2") gives invalid_argument with the message
// "NAME='VALUE' is not an integer; HINT", where `hint` says what the variable should hold or who sets it.
Result<int> env_int(const char* name, int fallback, const std::string& hint);

// A setting of the run from the environment (the launcher's RANK, LOCAL_RANK, WORLD_SIZE, ...): env_int's value, at
// least `least`; anything else is a bad option, std::invalid_argument (exit code 2) naming the variable, its value
// and `hint`, rather than a run under a value nobody chose.
int env_setting(const char* name, int fallback, int least, const std::string& hint);

// OMP_NUM_THREADS as OpenMP itself reads it: a list "N[,M...]" whose first entry is the thread count of the
// outermost level. Unset or empty gives 0 (the caller's "every core"). Like libgomp, which ignores a value it
// cannot parse, a value without a positive first entry gives 0 too, with `warning` set to say so; a launcher's
// environment must not stop a run that OpenMP itself would run.
int openmp_threads(std::string& warning);

}  // namespace dtrain::trainer
