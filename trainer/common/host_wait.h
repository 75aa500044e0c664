#pragma once

// Where the host waits for a device inside a training step. A step on a GPU queues its work and goes on while the
// device runs behind; a host wait inside it (a value copied back, a collective waited for, a stream synchronised)
// drains that queue and leaves the GPU idle while the host queues the next work. This is
// torch.cuda.set_sync_debug_mode's idea, for dtrain-trainer:
//
//   DTRAIN_SYNC_DEBUG=off (the default)   nothing is checked
//   DTRAIN_SYNC_DEBUG=warn                every host wait inside a step is counted, and each kind is logged once
//   DTRAIN_SYNC_DEBUG=error               a host wait inside a step throws std::runtime_error naming it
//
// Device backends (kernels/cuda/, the stand-in) and device communicators (comm/nccl/, comm/standin/) call
// note_host_wait() wherever they block the host on the device. The training loop marks the inside of each step
// (HostWaitCheck) and the waits it means (AllowedHostWait: the read of a window's losses, fp16's overflow flag).
// Host backends never call it: on a CPU nothing runs behind the host. Everything here is per thread.

#include <cstdint>
#include <string>

namespace dtrain::trainer {

enum class SyncDebug { off, warn, error };

// DTRAIN_SYNC_DEBUG's value (unset: off); anything but off, warn or error is std::invalid_argument naming it.
SyncDebug sync_debug_from_env();

// While one lives on this thread, host waits are checked in `mode`.
class HostWaitCheck {
 public:
  explicit HostWaitCheck(SyncDebug mode);
  ~HostWaitCheck();
  HostWaitCheck(const HostWaitCheck&) = delete;
  HostWaitCheck& operator=(const HostWaitCheck&) = delete;

 private:
  SyncDebug previous_;
};

// While one lives on this thread, host waits are meant (`why` says for what) and not checked.
class AllowedHostWait {
 public:
  explicit AllowedHostWait(const char* why);
  ~AllowedHostWait();
  AllowedHostWait(const AllowedHostWait&) = delete;
  AllowedHostWait& operator=(const AllowedHostWait&) = delete;
};

// Called where the host blocks on the device; `what` names the wait ("copy to the host", "nccl allreduce").
// Inside a HostWaitCheck and outside any AllowedHostWait: counted, then logged once per `what` (warn) or thrown
// as std::runtime_error (error).
void note_host_wait(const char* what);

// Host waits noted inside checks on this thread so far (tests take differences).
std::uint64_t host_waits_noted();

}  // namespace dtrain::trainer
