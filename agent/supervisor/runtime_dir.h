#pragma once
// The agent's private directory for files it hands its workers (their TLS certificate and key), and the sweep of
// what killed agents left behind.
//
//   <base>/agent-<pid>-XXXXXX     0700, one per running agent, flock()ed by it for its whole life
//   <base> = $XDG_RUNTIME_DIR/dtrain  when XDG_RUNTIME_DIR names a directory of ours (a per-user tmpfs, emptied at
//                                     logout: nothing survives a reboot either)
//          = ${TMPDIR:-/tmp}/dtrain-<uid>  otherwise
//
// A SIGKILLed agent cannot remove its directory, so every agent, as it starts, removes the agent-* directories that
// no process holds locked: their agents are gone. The lock, not the pid in the name, decides (pids are reused, and
// agents in other pid namespaces share /tmp). The lock dies with the last descriptor of the agent's open file; its
// workers never have it (close-on-exec) and its keepers drop it as soon as they start.
// <base> is created 0700 and refused unless it is a real directory (not a symlink) that this user owns and nobody
// else can enter: /tmp/dtrain-<uid> is a name another local user could create first.

#include <chrono>
#include <string>
#include <utility>
#include <vector>

namespace dtrain::supervisor {

class RuntimeDir {
 public:
  // How long create() waits for another agent that is sweeping or creating its directory at the same time.
  static constexpr std::chrono::seconds kLockTimeout{5};

  // Sweeps the directories of dead agents under `base` and creates this agent's. Throws std::runtime_error that
  // says which path is wrong and how to fix it.
  static RuntimeDir create(const std::string& base = default_base());
  // $XDG_RUNTIME_DIR/dtrain or ${TMPDIR:-/tmp}/dtrain-<uid> (see above).
  static std::string default_base();

  RuntimeDir(RuntimeDir&& other) noexcept;
  RuntimeDir& operator=(RuntimeDir&& other) noexcept;
  RuntimeDir(const RuntimeDir&) = delete;
  RuntimeDir& operator=(const RuntimeDir&) = delete;
  // Removes the directory with everything in it, then drops the lock.
  ~RuntimeDir();

  const std::string& path() const { return path_; }
  // Creates path()/name (0700) and returns its path. Throws std::runtime_error.
  std::string make_subdir(const std::string& name) const;
  // Paths of the dead agents' directories this create() removed (for the agent's log).
  const std::vector<std::string>& swept() const { return swept_; }

 private:
  RuntimeDir(std::string path, int lock_fd, std::vector<std::string> swept)
      : path_(std::move(path)), lock_fd_(lock_fd), swept_(std::move(swept)) {}
  void release();

  std::string path_;
  int lock_fd_ = -1;  // the directory, opened and flock()ed
  std::vector<std::string> swept_;
};

}  // namespace dtrain::supervisor
