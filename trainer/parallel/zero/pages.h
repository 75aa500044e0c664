#pragma once

// Freeing part of a buffer without reallocating it (ZeRO-2 gradients, ZeRO-3 parameters). On host memory the
// whole pages of the range are returned to the kernel: they stop counting in the resident set and read as zeros when
// touched again; the partial pages at either end are zeroed with memset. So after release_range the range reads as
// zeros either way, which is what ZeRO-2 needs of a gradient that later micro-steps accumulate into. Private
// anonymous memory (the cpu backend's, HeapBuffers) gives its pages back with madvise(MADV_DONTNEED); a buffer in the
// shm communicator's segment (trainer/parallel/comm_buffers.h) is a shared mapping of a /dev/shm file, where
// MADV_DONTNEED would only drop this process's view and the old values would come back, so there the pages are
// punched out of the file with MADV_REMOVE (which private memory refuses with EINVAL: that is how the two are told
// apart). A page punched out of the segment is taken from /dev/shm again when written, without the reservation the
// arena made when it handed the buffer out: should /dev/shm fill up in between (another job's segments), that write
// is a SIGBUS, as any write to a full tmpfs mapping is.
// Host memory only: device memory (a GPU's, kernels::Backend::host_accessible() false) has no pages to give back,
// and its callers (reducer.h, gatherer.h, engine.h) zero a device range with the backend where it must read as zeros
// and otherwise leave it as it is.

#include <cstddef>
#include <cstdint>

namespace dtrain::trainer {

// data[0, count) = 0, its whole pages returned to the kernel (fp32 or 16-bit elements).
void release_range(float* data, std::size_t count);
void release_range(std::uint16_t* data, std::size_t count);

// Releases base[begin, end) except base[keep_begin, keep_end) (which must lie inside it).
void release_outside(float* base, std::size_t begin, std::size_t end, std::size_t keep_begin, std::size_t keep_end);
void release_outside(std::uint16_t* base, std::size_t begin, std::size_t end, std::size_t keep_begin,
                     std::size_t keep_end);

}  // namespace dtrain::trainer
