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

}  // namespace dtrain::trainer
