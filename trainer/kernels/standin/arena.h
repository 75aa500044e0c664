#pragma once

// The stand-in's allocator (arena.cpp): zero-filled, page-rounded buffers of its arena; release() aborts on a
// pointer it did not hand out.

#include <cstddef>

namespace dtrain::trainer::kernels {

void* standin_allocate(std::size_t bytes);
void standin_release(void* data);

}  // namespace dtrain::trainer::kernels
