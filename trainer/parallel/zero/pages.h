#pragma once

// Freeing part of a buffer without reallocating it (ZeRO-2 gradients, ZeRO-3 parameters). On host memory the
// whole pages of the range are returned to the kernel with madvise(MADV_DONTNEED): they stop counting in the
// resident set and read as zeros when touched again (private anonymous memory); the partial pages at either end
// are zeroed with memset. So after release_range the range reads as zeros either way, which is what ZeRO-2 needs of
// a gradient that later micro-steps accumulate into.

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
