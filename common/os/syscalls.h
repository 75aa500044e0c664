#pragma once

// What system calls leave behind, in words: errno as text or as an exception, descriptors given up, signal names.

#include <initializer_list>
#include <string>

namespace dtrain {

// strerror(errno) as a string: the text of the error the last failed call left.
std::string errno_text();

// Throws std::system_error for errno, with `what` saying which call failed.
[[noreturn]] void throw_errno(const char* what);

// Closes each descriptor that is open (>= 0); errors are ignored (the descriptors are being given up).
void close_fds(std::initializer_list<int> fds);

// "SIGKILL" for 9; nullptr for a signal without a conventional name here.
const char* signal_name(int signal);

}  // namespace dtrain
