#pragma once

// Where dtrain-trainer computes (--device) and the communicator that goes with it.
//   cpu   the CPU backend (OpenBLAS + OpenMP) and a host communicator (DTRAIN_COMM_BACKEND, else auto: shm, gloo or
//         hier by where the ranks run).
//   cuda  the CUDA backend on GPU LOCAL_RANK (a LOCAL_RANK without its own GPU is refused, exit 2: NCCL refuses two
//         ranks on one GPU, "Duplicate GPU detected"), with the NCCL communicator: the
//         parameters, gradients, AdamW's state and the activations are device memory, and every collective waits on
//         the device for the compute stream's work issued before it (Communicator::order_after). DTRAIN_COMM_BACKEND
//         may be unset, auto or nccl; a host backend is refused (exit 2), since it cannot read device memory.
//         Without CUDA in the build, or without a visible GPU, exit 2 with the reason.
//   auto  cuda when this build has CUDA and a GPU is visible, else cpu (said once, on rank 0).
// DTRAIN_DEVICE_STANDIN=1 (tests of the plumbing on machines without a GPU): `cuda` computes on the host stand-in
// for a device (trainer/kernels/standin/backend.h: host memory that only the backend's ops and copies may touch)
// and wraps the host communicator so that it takes only such buffers. The numbers are the CPU backend's.

#include <memory>
#include <string>

#include "trainer/comm/communicator.h"
#include "trainer/kernels/backend.h"

namespace dtrain::trainer {

struct ComputeDevice {
  kernels::Backend* backend = nullptr;
  bool cuda = false;     // computes on a GPU, or on the stand-in for one
  bool standin = false;  // DTRAIN_DEVICE_STANDIN
  int gpu = -1;          // the GPU's index among the visible ones (cuda only)
  // "cpu", "cuda:0", "cuda-standin".
  std::string name() const;
};

// --device's value -> the device; std::invalid_argument (exit 2) with the reason when cuda cannot be used.
ComputeDevice choose_device(const std::string& device);

// The communicator for `device` (see the top of this file), ordered after its compute stream.
std::unique_ptr<Communicator> device_communicator(const ComputeDevice& device);

}  // namespace dtrain::trainer
