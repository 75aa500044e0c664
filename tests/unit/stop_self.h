#pragma once
// Test support: stops this whole process (every thread) with a real SIGSTOP for `duration`; a child process sends
// the SIGCONT. Returns once the process runs again.

#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <chrono>

inline void stop_self_for(std::chrono::milliseconds duration) {
  const pid_t parent = ::getpid();
  const pid_t child = ::fork();
  if (child == 0) {
    // Only async-signal-safe calls in the child of a threaded process.
    timespec wait{static_cast<time_t>(duration.count() / 1000), static_cast<long>(duration.count() % 1000) * 1000000};
    while (::nanosleep(&wait, &wait) != 0) {
    }
    ::kill(parent, SIGCONT);
    ::_exit(0);
  }
  ::raise(SIGSTOP);
  int status = 0;
  ::waitpid(child, &status, 0);
}
