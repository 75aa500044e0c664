#include "trainer/comm/shm/pipeline.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "trainer/comm/shm/sum.h"

namespace dtrain::trainer {
namespace {

using Clock = std::chrono::steady_clock;

// What a rank publishes when its data is staged rather than in place in its arena.
constexpr std::uint64_t kStaged = UINT64_MAX;
// Slices start on cache-line boundaries, so two ranks never write the same line.
constexpr std::size_t kLineBytes = 64;
// allreduce sums its slice and writes it to the other ranks in blocks of this size: each block's sum is still in L1
// while it is copied out.
constexpr std::size_t kBlockBytes = std::size_t{16} << 10;

std::size_t ceil_div(std::size_t a, std::size_t b) { return (a + b - 1) / b; }
std::size_t round_up(std::size_t n, std::size_t to) { return ceil_div(n, to) * to; }

class Run {
 public:
  Run(Segment& segment, PeerSync& sync, int rank, const ShmCollective& c, Clock::time_point deadline)
      : seg_(segment), sync_(sync), rank_(rank), ranks_(segment.geometry().ranks), c_(c), deadline_(deadline),
        e_(c.element_bytes), align_(kLineBytes / c.element_bytes) {
    row_ = c.shape == ShmShape::reduce_scatter ? c.count * static_cast<std::size_t>(ranks_) : c.count;
  }

  void operator()() {
    const std::size_t offset = seg_.arena_offset_of(rank_, c_.in, row_ * e_);
    const bool in_place = offset != SIZE_MAX;
    sync_.publish(in_place ? offset : kStaged);
    // A staged rank knows the chunking already: with its own data staged, not every rank is in place.
    if (!in_place) plan(false);
    if (!in_place && read_by_peers(rank_)) stage_in(0);
    sync_.wait_all(sync_.arrive(), deadline_, c_.what);
    plan(every_reader_in_place());
    for (std::size_t k = 0; k < chunks_; ++k) {
      if (k + 1 < chunks_) {
        if (!in_place && read_by_peers(rank_)) stage_in(k + 1);
        posted_next_ = sync_.arrive();
      }
      if (k > 0) sync_.wait_all(posted_, deadline_, c_.what);
      posted_ = posted_next_;
      work(k);
      sync_.wait_all(sync_.arrive(), deadline_, c_.what);
      if (!in_place && c_.shape == ShmShape::allreduce) stage_out(k);
    }
  }

 private:
  bool read_by_peers(int rank) const { return c_.shape != ShmShape::broadcast || rank == c_.root; }

  bool every_reader_in_place() const {
    for (int p = 0; p < ranks_; ++p) {
      if (read_by_peers(p) && sync_.published(p) == kStaged) return false;
    }
    return true;
  }

  // Chunk sizes in elements: a staging slot's worth, or the whole buffer when nothing is staged.
  void plan(bool whole) {
    const std::size_t slot = seg_.geometry().chunk_bytes / e_;
    if (c_.shape == ShmShape::reduce_scatter) {
      chunk_ = whole ? c_.count : std::max(align_, slot / static_cast<std::size_t>(ranks_) / align_ * align_);
    } else {
      chunk_ = whole ? c_.count : slot;
    }
    chunks_ = ceil_div(c_.count, chunk_);
  }

  std::size_t pieces() const {
    return c_.shape == ShmShape::allreduce || c_.shape == ShmShape::reduce_scatter ? static_cast<std::size_t>(ranks_)
                                                                                    : 1;
  }
  // allreduce: the elements of chunk k and the length of each rank's slice of it.
  std::size_t chunk_length(std::size_t k) const { return std::min(chunk_, c_.count - k * chunk_); }
  std::size_t slice(std::size_t k) const {
    return round_up(ceil_div(chunk_length(k), static_cast<std::size_t>(ranks_)), align_);
  }
  // Where piece q of chunk k starts in a staging slot, and how many elements it has.
  std::size_t slot_offset(std::size_t k, std::size_t q) const {
    if (c_.shape == ShmShape::allreduce) return std::min(q * slice(k), chunk_length(k));
    return q * chunk_;
  }
  std::size_t length(std::size_t k, std::size_t q) const {
    if (c_.shape == ShmShape::allreduce) return std::min(slice(k), chunk_length(k) - slot_offset(k, q));
    return std::min(chunk_, c_.count - k * chunk_);
  }
  // Where piece q of chunk k starts in a rank's input.
  std::size_t input_offset(std::size_t k, std::size_t q) const {
    if (c_.shape == ShmShape::allreduce) return k * chunk_ + slot_offset(k, q);
    if (c_.shape == ShmShape::reduce_scatter) return q * c_.count + k * chunk_;
    return k * chunk_;
  }
  // Rank p's piece q of chunk k, in its arena or in its staging slot.
  std::byte* piece(int p, std::size_t k, std::size_t q) const {
    const std::uint64_t published = sync_.published(p);
    if (published == kStaged) return seg_.staging(p, static_cast<int>(k % 2)) + slot_offset(k, q) * e_;
    return seg_.base() + published + input_offset(k, q) * e_;
  }
  const std::byte* input(std::size_t k, std::size_t q) const {
    return static_cast<const std::byte*>(c_.in) + input_offset(k, q) * e_;
  }
  std::byte* output() const { return static_cast<std::byte*>(c_.out); }

  void stage_in(std::size_t k) {
    std::byte* slot = seg_.staging(rank_, static_cast<int>(k % 2));
    for (std::size_t q = 0; q < pieces(); ++q) {
      std::memcpy(slot + slot_offset(k, q) * e_, input(k, q), length(k, q) * e_);
    }
  }

  void stage_out(std::size_t k) {
    std::memcpy(output() + k * chunk_ * e_, seg_.staging(rank_, static_cast<int>(k % 2)), chunk_length(k) * e_);
  }

  void sum(std::byte* dst, std::size_t at, std::size_t n, std::vector<const std::byte*>& sources) {
    std::vector<const void*> shifted(sources.size());
    for (std::size_t p = 0; p < sources.size(); ++p) shifted[p] = sources[p] + at * e_;
    if (c_.type == kernels::Dtype::fp32) {
      sum_floats(reinterpret_cast<float*>(dst + at * e_), reinterpret_cast<const float* const*>(shifted.data()),
                 ranks_, n);
    } else {
      sum_halves(reinterpret_cast<std::uint16_t*>(dst + at * e_),
                 reinterpret_cast<const std::uint16_t* const*>(shifted.data()), ranks_, n, c_.type);
    }
  }

  void work(std::size_t k) {
    const auto me = static_cast<std::size_t>(rank_);
    std::vector<const std::byte*> sources(static_cast<std::size_t>(ranks_));
    switch (c_.shape) {
      case ShmShape::allreduce: {
        const std::size_t n = length(k, me);
        for (int p = 0; p < ranks_; ++p) sources[p] = piece(p, k, me);
        std::byte* mine = piece(rank_, k, me);
        const std::size_t block = kBlockBytes / e_;
        for (std::size_t at = 0; at < n; at += block) {
          const std::size_t m = std::min(block, n - at);
          sum(mine, at, m, sources);
          for (int p = 0; p < ranks_; ++p) {
            if (p != rank_) std::memcpy(piece(p, k, me) + at * e_, mine + at * e_, m * e_);
          }
        }
        return;
      }
      case ShmShape::reduce_scatter:
        for (int p = 0; p < ranks_; ++p) sources[p] = piece(p, k, me);
        sum(output() + k * chunk_ * e_, 0, length(k, me), sources);
        return;
      case ShmShape::all_gather:
        for (int q = 0; q < ranks_; ++q) {
          std::byte* to = output() + (static_cast<std::size_t>(q) * c_.count + k * chunk_) * e_;
          const std::byte* from = piece(q, k, 0);
          if (from != to) std::memcpy(to, from, length(k, 0) * e_);
        }
        return;
      case ShmShape::broadcast:
        if (rank_ != c_.root) std::memcpy(output() + k * chunk_ * e_, piece(c_.root, k, 0), length(k, 0) * e_);
        return;
    }
  }

  Segment& seg_;
  PeerSync& sync_;
  const int rank_;
  const int ranks_;
  const ShmCollective& c_;
  const Clock::time_point deadline_;
  const std::size_t e_;      // bytes per element
  const std::size_t align_;  // elements per cache line
  std::size_t row_ = 0;      // elements of each rank's input
  std::size_t chunk_ = 1;    // elements per chunk (reduce_scatter: per piece of a chunk)
  std::size_t chunks_ = 0;
  std::uint32_t posted_ = 0;       // sync point after which every rank's chunk k is staged
  std::uint32_t posted_next_ = 0;  // the same for chunk k + 1
};

}  // namespace

void run_shm_collective(Segment& segment, PeerSync& sync, int rank, const ShmCollective& c,
                        Clock::time_point deadline) {
  if (c.count == 0) return;
  Run(segment, sync, rank, c, deadline)();
}

}  // namespace dtrain::trainer
