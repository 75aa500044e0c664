// RuntimeDir: a private directory per agent, and the sweep of the ones killed agents left behind.
#include <doctest/doctest.h>

#include <poll.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <stdexcept>
#include <string>

#include "agent/supervisor/runtime_dir.h"
#include "tests/unit/scoped_env.h"
#include "tests/unit/temp_dir.h"

using dtrain::supervisor::RuntimeDir;
namespace fs = std::filesystem;

namespace {

// The message of the std::runtime_error `f` throws ("" if none).
template <typename F>
std::string error_of(F f) {
  try {
    f();
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

unsigned mode_of(const fs::path& path) {
  struct stat st{};
  REQUIRE(lstat(path.c_str(), &st) == 0);
  return st.st_mode & 07777;
}

// An agent in another process: creates its RuntimeDir under `base`, writes a file there, reports the path, and then
// either waits to be killed (holding the directory) or is SIGKILLed at once, as a crashed agent would be.
struct OtherAgent {
  pid_t pid = 0;
  std::string dir;
};
std::optional<OtherAgent> other_agent(const std::string& base, bool die_at_once) {
  int ready[2];
  REQUIRE(pipe(ready) == 0);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    close(ready[0]);
    try {
      RuntimeDir dir = RuntimeDir::create(base);
      std::ofstream(dir.make_subdir("tls") + "/worker.key") << "secret";
      const std::string path = dir.path() + "\n";
      if (write(ready[1], path.data(), path.size()) != static_cast<ssize_t>(path.size())) _exit(1);
      if (die_at_once) raise(SIGKILL);  // no destructor runs
      for (;;) pause();
    } catch (...) {
      _exit(1);
    }
  }
  close(ready[1]);
  char buffer[4096];
  pollfd readable{ready[0], POLLIN, 0};
  const ssize_t n = poll(&readable, 1, 10000) == 1 ? read(ready[0], buffer, sizeof buffer) : -1;
  close(ready[0]);
  if (n <= 1) {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    return std::nullopt;
  }
  if (die_at_once) waitpid(pid, nullptr, 0);
  return OtherAgent{pid, std::string(buffer, static_cast<std::size_t>(n) - 1)};
}

}  // namespace

TEST_CASE("runtime dir: a private directory per agent, removed with everything in it when the agent ends") {
  TempDir temp("runtime-dir");
  const std::string base = temp.file("base");
  std::string path;
  {
    RuntimeDir dir = RuntimeDir::create(base);
    path = dir.path();
    CHECK(fs::path(path).parent_path() == fs::path(base));
    CHECK(fs::path(path).filename().string().rfind("agent-" + std::to_string(getpid()) + "-", 0) == 0);
    CHECK(mode_of(base) == 0700);
    CHECK(mode_of(path) == 0700);
    const std::string tls = dir.make_subdir("tls");
    CHECK(mode_of(tls) == 0700);
    std::ofstream(tls + "/worker.key") << "secret";
    CHECK(error_of([&] { dir.make_subdir("tls"); }) == "cannot create " + tls + ": File exists");
    // A second agent gets a directory of its own next to it and sweeps nothing of a living agent.
    RuntimeDir second = RuntimeDir::create(base);
    CHECK(second.path() != path);
    CHECK(second.swept().empty());
    CHECK(fs::exists(tls + "/worker.key"));
  }
  CHECK_FALSE(fs::exists(path));
  CHECK(fs::is_empty(base));
}

TEST_CASE("runtime dir: the next agent removes what killed agents left, and nothing of living ones") {
  TempDir temp("runtime-sweep");
  const std::string base = temp.file("base");
  // In this order: the living one's start would sweep the dead one's directory.
  const auto living = other_agent(base, false);
  const auto dead = other_agent(base, true);
  REQUIRE(dead);
  REQUIRE(living);
  // What the killed agent left: its directory and the workers' key in it.
  CHECK(fs::exists(dead->dir + "/tls/worker.key"));
  // Not ours: neither swept nor mistaken for an agent's.
  fs::create_directories(base + "/unrelated");

  {
    RuntimeDir dir = RuntimeDir::create(base);
    CHECK(dir.swept() == std::vector<std::string>{dead->dir});
    CHECK_FALSE(fs::exists(dead->dir));
    CHECK(fs::exists(living->dir + "/tls/worker.key"));
    CHECK(fs::exists(base + "/unrelated"));
  }
  kill(living->pid, SIGKILL);
  waitpid(living->pid, nullptr, 0);
  RuntimeDir after = RuntimeDir::create(base);
  CHECK(after.swept() == std::vector<std::string>{living->dir});
  CHECK_FALSE(fs::exists(living->dir));
}

TEST_CASE("runtime dir: a base another user could read, or a symlink, is refused with what to do") {
  TempDir temp("runtime-unsafe");
  const fs::path open_base = fs::path(temp.path) / "open";
  fs::create_directories(open_base);
  fs::permissions(open_base, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                                 fs::perms::others_read | fs::perms::others_exec);
  CHECK(error_of([&] { RuntimeDir::create(open_base.string()); })
            .find("the agent's runtime directory " + open_base.string() + " is not private to this user (owner uid " +
                  std::to_string(geteuid()) + ", mode 0755; expected uid " + std::to_string(geteuid()) +
                  ", mode 0700)") == 0);
  const fs::path link = fs::path(temp.path) / "link";
  const fs::path target = fs::path(temp.path) / "target";
  fs::create_directories(target);
  fs::permissions(target, fs::perms::owner_all);
  fs::create_directory_symlink(target, link);
  CHECK(error_of([&] { RuntimeDir::create(link.string()); }).find("(it must be a directory, not a symlink)") !=
        std::string::npos);
  if (geteuid() == 0) {
    // Created first by someone else (here: owned by nobody).
    const fs::path foreign = fs::path(temp.path) / "foreign";
    fs::create_directories(foreign);
    fs::permissions(foreign, fs::perms::owner_all);
    REQUIRE(chown(foreign.c_str(), 65534, 65534) == 0);
    CHECK(error_of([&] { RuntimeDir::create(foreign.string()); }).find("(owner uid 65534, mode 0700") !=
          std::string::npos);
  }
  CHECK(fs::is_empty(target));
}

TEST_CASE("runtime dir: the base is $XDG_RUNTIME_DIR/dtrain when that is ours, else ${TMPDIR:-/tmp}/dtrain-<uid>") {
  TempDir temp("runtime-base");
  const std::string uid = std::to_string(geteuid());
  {
    ScopedEnv env({{"XDG_RUNTIME_DIR", temp.path.c_str()}});
    CHECK(RuntimeDir::default_base() == temp.path + "/dtrain");
  }
  {
    const std::string missing = temp.file("missing");
    ScopedEnv env({{"XDG_RUNTIME_DIR", missing.c_str()}, {"TMPDIR", temp.path.c_str()}});
    CHECK(RuntimeDir::default_base() == temp.path + "/dtrain-" + uid);
  }
  {
    ScopedEnv env({{"XDG_RUNTIME_DIR", nullptr}, {"TMPDIR", nullptr}});
    CHECK(RuntimeDir::default_base() == "/tmp/dtrain-" + uid);
  }
}
