#pragma once

// A host-memory STAND-IN for a device backend, for tests of the device/host plumbing on machines without a GPU. It
// checks plumbing, not kernels: every op is the CPU backend's (so the numbers are bit for bit the CPU's), but on
// memory the host cannot touch. Buffers are cut from one arena reserved PROT_NONE, opened (read/write) only while
// one of the backend's ops or copies runs, or a collective of the stand-in communicator
// (trainer/comm/standin/communicator.h) -- so host code that reads or writes "device" memory directly, as it must
// never do with a GPU's, dies with SIGSEGV where it does it. host_accessible() is false; compute_stream() is a token
// that is not null (nothing is queued: every op has finished when it returns). The calls that make a GPU's host wait
// for the device (the copies, synchronize(), the ops that return a value) note it as a host wait
// (trainer/common/host_wait.h), so DTRAIN_SYNC_DEBUG finds them here as it would on a GPU.
//
// dtrain-trainer computes on it with --device cuda and DTRAIN_DEVICE_STANDIN=1 (trainer/train/device.h).

#include <cstddef>
#include <cstdint>
#include <string>

#include "trainer/kernels/backend.h"

namespace dtrain::trainer::kernels {

// The process's stand-in (one arena per process).
Backend& standin_backend();

// Opens the stand-in's memory for as long as it lives (nestable, any thread): what its ops and the stand-in
// communicator's collectives do around their work.
class StandinOpen {
 public:
  StandinOpen();
  ~StandinOpen();
  StandinOpen(const StandinOpen&) = delete;
  StandinOpen& operator=(const StandinOpen&) = delete;
};

// Tests of code that must not wait for a device that is behind (the loader's token pool): while held, the fences
// the stand-in records are not passed (fence_done answers false) until the hold is released.
void standin_hold_fences(bool hold);

// Whether [data, data + bytes) lies in the stand-in's arena.
bool standin_owns(const void* data, std::size_t bytes);

}  // namespace dtrain::trainer::kernels
