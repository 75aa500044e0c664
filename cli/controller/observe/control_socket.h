#pragma once

// The running launcher's control socket, <run dir>/control.sock: `dtrain status` connects, the launcher writes its
// status snapshot (job_status.h's JSON) and closes. Nothing is read from a client, so no request can be malformed,
// large or slow. One thread serves every client at once without blocking on any of them (non-blocking accept and
// writes under one poll): a client that stops reading is cut off kClientBudget after it last read, up to
// kMaxClients are served together and more wait in the listen queue (kBacklog), and a client of another user is
// closed at once. Thirty clients that connect and never read delay nobody.
//
// Snapshots are made on demand (on_demand.h): a connection asks, the launcher's loop publishes on its next turn, and
// the client gets that snapshot, or the last one after kFreshWait. Made every second whether or not anybody asked,
// the snapshot of 32,768 ranks was 12% of the launcher's CPU at 4,096 agents.
//
// Security: the socket file is mode 0600 (bound under a temporary name, chmod'ed, then renamed into place) and
// every connection's peer credentials (SO_PEERCRED) must show the launcher's own uid: a snapshot names hosts, pids
// and the job's progress, which other users of a shared login node have no business reading.
//
// Paths go through /proc/self/fd/<dir fd>/control.sock, so a run directory deeper than sun_path's 108 bytes works.

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cli/controller/observe/on_demand.h"
#include "common/status.h"

namespace dtrain::controller {

inline constexpr const char* kControlSocketName = "control.sock";

class ControlSocket {
 public:
  // What one client may take of the serving thread: a snapshot of a few MB goes through a Unix socket in
  // milliseconds; a client that stops reading is cut off after this, and the next one is served.
  static constexpr std::chrono::milliseconds kClientBudget{1000};
  // How long a client waits for a snapshot made after it connected: the launcher's loop turns at least once a
  // second (Fleet::kTickInterval), with room for a turn that is busy.
  static constexpr std::chrono::milliseconds kFreshWait{1500};
  // Clients served at once: each holds a descriptor and a share of the one snapshot, never a copy.
  static constexpr std::size_t kMaxClients = 64;
  // Connections the kernel queues beyond them (capped by net.core.somaxconn); a client past both gets EAGAIN.
  static constexpr int kBacklog = 1024;

  // Listens in `dir` and starts the serving thread.
  static Result<std::unique_ptr<ControlSocket>> listen(const std::string& dir);
  // Stops the thread and removes the socket file.
  ~ControlSocket();
  ControlSocket(const ControlSocket&) = delete;
  ControlSocket& operator=(const ControlSocket&) = delete;

  // Whether a client waits for a snapshot newer than the last publish.
  bool wanted() const { return snapshot_->wanted(); }
  // What the waiting client, and the next ones, get.
  void publish(std::string snapshot) { snapshot_->publish(std::move(snapshot)); }

 private:
  struct Client;
  ControlSocket(int dir_fd, int listen_fd, int stop_read, int stop_write, std::unique_ptr<OnDemandText> snapshot);
  void serve();
  // Accepts what waits in the queue while there is room; clients of another user are closed at once.
  void accept_clients(std::vector<Client>& clients);
  // Gives each waiting client the snapshot once a fresh one is published or its kFreshWait ran out.
  void hand_out_snapshots(std::vector<Client>& clients);

  int dir_fd_, listen_fd_, stop_read_, stop_write_;
  std::unique_ptr<OnDemandText> snapshot_;
  std::thread thread_;
};

// The snapshot from the launcher serving `dir`, within `timeout`. Each failure says what it means for the launcher:
//   not_found          no socket there: the launcher ended (or never started)
//   unavailable        nobody listens (ECONNREFUSED): the launcher that made the socket is gone
//   permission_denied  the socket is another user's (EACCES), or the launcher closed without an answer because
//                      this client is not its user: the message names the owner and how to ask as them
//   deadline_exceeded  the launcher is there but busy: its queue stayed full (EAGAIN) or it did not answer in time
Result<std::string> read_control_socket(const std::string& dir, std::chrono::milliseconds timeout);

}  // namespace dtrain::controller
