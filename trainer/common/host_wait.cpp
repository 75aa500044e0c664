#include "trainer/common/host_wait.h"

#include <cstdio>
#include <cstdlib>
#include <set>
#include <stdexcept>
#include <string>

namespace dtrain::trainer {
namespace {

thread_local SyncDebug checking = SyncDebug::off;
thread_local int allowed = 0;
thread_local std::uint64_t noted = 0;
thread_local std::set<std::string> logged;

}  // namespace

SyncDebug sync_debug_from_env() {
  const char* value = std::getenv("DTRAIN_SYNC_DEBUG");
  if (value == nullptr) return SyncDebug::off;
  const std::string v = value;
  if (v == "off" || v.empty()) return SyncDebug::off;
  if (v == "warn") return SyncDebug::warn;
  if (v == "error") return SyncDebug::error;
  throw std::invalid_argument("DTRAIN_SYNC_DEBUG='" + v +
                              "' is not a setting; it takes off, warn (log each host wait inside a step once) or "
                              "error (fail at the first)");
}

HostWaitCheck::HostWaitCheck(SyncDebug mode) : previous_(checking) { checking = mode; }
HostWaitCheck::~HostWaitCheck() { checking = previous_; }

AllowedHostWait::AllowedHostWait(const char* why) {
  (void)why;
  ++allowed;
}
AllowedHostWait::~AllowedHostWait() { --allowed; }

void note_host_wait(const char* what) {
  if (checking == SyncDebug::off || allowed > 0) return;
  ++noted;
  const std::string message = std::string("the host waited for the device inside a training step (") + what +
                              "): the device idles while the host catches up (DTRAIN_SYNC_DEBUG)";
  if (checking == SyncDebug::error) throw std::runtime_error(message);
  // stderr rather than the trainer's logger: the backends and communicators that call this do not log.
  if (logged.insert(what).second) std::fprintf(stderr, "warning: %s\n", message.c_str());
}

std::uint64_t host_waits_noted() { return noted; }

}  // namespace dtrain::trainer
