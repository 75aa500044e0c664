#pragma once

// The running launcher's control socket, <run dir>/control.sock: `dtrain status` connects, the launcher writes its
// latest status snapshot (job_status.h's JSON) and closes. Nothing is read from a client, so no request can be
// malformed, large or slow; a client that does not read gets at most kClientBudget of the serving thread, and a
// client of another user is closed at once.
//
// Security: the socket file is mode 0600 (bound under a temporary name, chmod'ed, then renamed into place) and
// every connection's peer credentials (SO_PEERCRED) must show the launcher's own uid: a snapshot names hosts, pids
// and the job's progress, which other users of a shared login node have no business reading.
//
// Paths go through /proc/self/fd/<dir fd>/control.sock, so a run directory deeper than sun_path's 108 bytes works.

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "common/status.h"

namespace dtrain::controller {

inline constexpr const char* kControlSocketName = "control.sock";

class ControlSocket {
 public:
  // What one client may take of the serving thread: a snapshot of a few MB goes through a Unix socket in
  // milliseconds; a client that stops reading is cut off after this, and the next one is served.
  static constexpr std::chrono::milliseconds kClientBudget{1000};

  // Listens in `dir` and starts the serving thread.
  static Result<std::unique_ptr<ControlSocket>> listen(const std::string& dir);
  // Stops the thread and removes the socket file.
  ~ControlSocket();
  ControlSocket(const ControlSocket&) = delete;
  ControlSocket& operator=(const ControlSocket&) = delete;

  // What the next client gets.
  void publish(std::string snapshot);

 private:
  ControlSocket(int dir_fd, int listen_fd, int stop_read, int stop_write);
  void serve();
  void answer(int client);

  int dir_fd_, listen_fd_, stop_read_, stop_write_;
  std::mutex mutex_;
  std::shared_ptr<const std::string> snapshot_;
  std::thread thread_;
};

// The snapshot from the launcher serving `dir`, within `timeout`. not_found: no socket there (the job ended or
// never started); unavailable: nobody listens (the launcher died); deadline_exceeded: it did not answer in time.
Result<std::string> read_control_socket(const std::string& dir, std::chrono::milliseconds timeout);

}  // namespace dtrain::controller
