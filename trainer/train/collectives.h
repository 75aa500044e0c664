#pragma once

// The few scalar collectives the training loop needs besides DDP's gradient buckets: rank 0's decisions reach every
// rank by broadcast, and the step's loss and the checkpoint barrier are one-float allreduces. With one rank they
// return the value unchanged and send nothing. Their waits count as communication (metrics/comm_time.h) in the
// caller's phase. On a communicator with device buffers the floats travel through a buffer of its own
// (on_host_floats, trainer/comm/communicator.h).

#include <cstddef>
#include <cstdint>

#include "trainer/comm/communicator.h"
#include "trainer/metrics/comm_time.h"

namespace dtrain::trainer {

// Every rank gets rank 0's value. A uint64 travels as four 16-bit pieces, each exact in a float.
inline std::uint64_t broadcast_u64(Communicator& comm, std::uint64_t value) {
  if (comm.size() == 1) return value;
  float pieces[4];
  for (int i = 0; i < 4; ++i) pieces[i] = static_cast<float>((value >> (16 * i)) & 0xffff);
  on_host_floats(comm, pieces, 4, [&](float* p) { wait_collective(*comm.broadcast(p, 4, 0)); });
  std::uint64_t out = 0;
  for (int i = 0; i < 4; ++i) out |= static_cast<std::uint64_t>(pieces[i]) << (16 * i);
  return out;
}

inline float broadcast_float(Communicator& comm, float value) {
  if (comm.size() > 1) on_host_floats(comm, &value, 1, [&](float* p) { wait_collective(*comm.broadcast(p, 1, 0)); });
  return value;
}

inline float allreduce_sum(Communicator& comm, float value) {
  if (comm.size() > 1) on_host_floats(comm, &value, 1, [&](float* p) { wait_collective(*comm.allreduce(p, 1)); });
  return value;
}

}  // namespace dtrain::trainer
