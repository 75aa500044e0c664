#pragma once

// How DDP cuts the flat gradient buffer into buckets, written once for dtrain-trainer's DdpReducer (reducer.h) and
// for `dtrain plan` (cli/plan/costs/formulas.h), which models the last bucket as exposed communication.
//
// Buckets are contiguous slices taken from the end of the buffer, as PyTorch DDP takes them (Li et al.,
// arXiv:2006.15704, Sec. 3.2.3): the first holds the last kFirstBucketBytes, the next ones bucket_bytes each, down to
// offset 0. Backward finishes the gradients from the end of the buffer towards its start, so a bucket's allreduce
// starts as soon as backward has passed the bucket's start and runs while backward goes on. The last bucket, at
// offset 0, holds the token embedding (wte), whose gradient backward finishes last (the tied output head adds to it
// first, the embedding backward last): its allreduce cannot start before backward has ended, so it is exposed however
// well the others overlap.
//
// THE DEFAULT RULE (no --ddp-bucket-mb): bucket_bytes = min(25 MiB, max(1 MiB, gradient bytes / 8)).
//   - gradient bytes / 8: the last bucket then carries at most an eighth of the bytes, so at least about 7/8 of the
//     communication can run behind backward. A fixed 25 MiB (PyTorch's bucket_cap_mb) puts all of a small model's
//     gradient after the first MiB into that last bucket: the bench model's 13 MB became 1 MiB + 11.6 MiB, and only
//     26-54% of its communication was hidden (BENCHMARKS.md, "trainer vs PyTorch").
//   - at least 1 MiB: below that an allreduce costs mostly its fixed latency (a ring's 2(W-1) steps, a queue hop per
//     collective), and more buckets add calls without shrinking the exposed part much.
//   - at most 25 MiB: models with more than 200 MiB of gradients keep PyTorch's buckets; there the last 25 MiB is
//     already under 1/8 of the whole.
// --ddp-bucket-mb sets bucket_bytes explicitly instead. The first bucket stays 1 MiB either way (PyTorch's too), so
// that communication starts early in backward.

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace dtrain::trainer {

inline constexpr std::uint64_t kFirstBucketBytes = std::uint64_t{1} << 20;  // PyTorch DDP's first bucket: 1 MiB
inline constexpr std::uint64_t kMinBucketBytes = std::uint64_t{1} << 20;    // the rule's floor
inline constexpr std::uint64_t kMaxBucketBytes = std::uint64_t{25} << 20;   // PyTorch's bucket_cap_mb: the ceiling
inline constexpr std::uint64_t kBucketsPerGradient = 8;                     // the rule's divisor (top of this file)

// The default size of the buckets after the first for a gradient buffer of grad_bytes (the rule above).
std::uint64_t default_bucket_bytes(std::uint64_t grad_bytes);

// The buckets of a buffer of `count` floats as (offset, count) in floats, in the order they are reduced (the first
// at the end of the buffer); bucket sizes are rounded down to whole floats. Throws std::invalid_argument when a size
// holds no float.
std::vector<std::pair<std::size_t, std::size_t>> cut_buckets(std::size_t count, std::uint64_t first_bucket_bytes,
                                                             std::uint64_t bucket_bytes);

// The bytes of the last bucket (the one at offset 0) of a buffer of grad_bytes: all of it when it fits the first
// bucket; the same cut as cut_buckets, in bytes (dtrain plan's models are sized in bytes, not floats).
double last_bucket_bytes(double grad_bytes, double bucket_bytes);

}  // namespace dtrain::trainer
