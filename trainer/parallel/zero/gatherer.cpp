#include "trainer/parallel/zero/gatherer.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

#include "trainer/health/phase.h"
#include "trainer/metrics/comm_time.h"
#include "trainer/parallel/zero/pages.h"

namespace dtrain::trainer {

// How many units besides unit 0 may be gathered (or in flight) at once: the one computing and the next.
constexpr int kMaxGatheredUnits = 2;

ParamGatherer::ParamGatherer(Communicator& comm, const ZeroShards& shards, HalfParams half, kernels::Backend* device)
    : ParamGatherer(comm, shards, nullptr, {}, device) {
  if (half.half == nullptr || half.wide == nullptr || half.type == kernels::Dtype::fp32 ||
      half.widen.size() != static_cast<std::size_t>(shards.num_units()))
    throw std::invalid_argument("ParamGatherer: 16-bit parameters need the working copy, the fp32 buffer to widen "
                                "into, a 16-bit type and one list of ranges per unit (" +
                                std::to_string(shards.num_units()) + ")");
  half_ = std::move(half);
}

ParamGatherer::ParamGatherer(Communicator& comm, const ZeroShards& shards, float* params, RoundedCopy rounded,
                             kernels::Backend* device)
    : comm_(comm),
      shards_(shards),
      params_(params),
      rounded_(rounded),
      device_(device),
      phases_(numbered_phases("all-gather unit", shards.num_units())) {
  const int last = shards.num_units() - 1;
  for (int u = 0; u <= last; ++u) order_.push_back(u);
  for (int u = last; u >= 1; --u) order_.push_back(u);
  cursor_ = order_.size() - 1;
  // The model starts with its whole buffer filled (initialised or broadcast): release_all() makes it sharded.
  state_.assign(static_cast<std::size_t>(shards.num_units()), State::gathered);
  work_.resize(state_.size());
}

ParamGatherer::~ParamGatherer() {
  for (auto& work : work_) {
    try {
      if (work) work->wait();
    } catch (const std::exception&) {
      // The failure was (or will be) reported by gather(); the buffer just must not be written after this.
    }
  }
}

void ParamGatherer::issue(int unit) {
  state_[unit] = State::gathering;
  if (shards_.world() == 1) return;
  const ShardSpan& own = shards_.owned(unit);
  const std::size_t at = shards_.slice(unit).offset;
  if (half_.half != nullptr) {
    work_[unit] = comm_.all_gather_half(half_.half + own.offset, half_.half + at, own.count);
    bytes_sent_ += ring_bytes_sent(shards_.slice(unit).count, shards_.world(), sizeof(std::uint16_t));
  } else {
    work_[unit] = comm_.all_gather(params_ + own.offset, params_ + at, own.count);
    bytes_sent_ += ring_bytes_sent(shards_.slice(unit).count, shards_.world());
  }
}

void ParamGatherer::widen(int unit) {
  for (const ParamRange& r : half_.widen[unit]) {
    kernels::from_half_on(device_, half_.wide + r.offset, half_.half + r.offset, r.count, half_.type);
  }
}

void ParamGatherer::wait(int unit) {
  if (state_[unit] != State::gathering) return;
  if (work_[unit]) {
    std::shared_ptr<Work> work = std::move(work_[unit]);
    wait_collective(work, phases_[unit]);
  }
  if (half_.half != nullptr) widen(unit);
  if (rounded_.half != nullptr) {
    const ParamRange slice = shards_.slice(unit);
    kernels::to_half_on(device_, rounded_.half + slice.offset, params_ + slice.offset, slice.count, rounded_.type);
  }
  state_[unit] = State::gathered;
}

void ParamGatherer::free(int unit) {
  wait(unit);
  // Device memory: nothing to give back (top of gatherer.h).
  if (device_ == nullptr) release_pages(unit);
  state_[unit] = State::released;
}

void ParamGatherer::release_pages(int unit) {
  const ParamRange slice = shards_.slice(unit);
  const ShardSpan& own = shards_.owned(unit);
  if (half_.half != nullptr) {
    release_outside(half_.half, slice.offset, slice.offset + slice.count, own.offset, own.offset + own.count);
    for (const ParamRange& r : half_.widen[unit]) release_range(half_.wide + r.offset, r.count);
  } else {
    release_outside(params_, slice.offset, slice.offset + slice.count, own.offset, own.offset + own.count);
    if (rounded_.half != nullptr) release_range(rounded_.half + slice.offset, slice.count);
  }
}

int ParamGatherer::alive_besides_root() const {
  return static_cast<int>(std::count_if(state_.begin() + 1, state_.end(),
                                        [](State s) { return s != State::released; }));
}

std::uint64_t ParamGatherer::alive_bytes() const {
  std::uint64_t bytes = 0;
  for (int u = 0; u < shards_.num_units(); ++u) {
    if (state_[u] == State::released) continue;
    if (half_.half == nullptr) {
      bytes += shards_.slice(u).count * (sizeof(float) + (rounded_.half != nullptr ? sizeof(std::uint16_t) : 0));
      continue;
    }
    bytes += shards_.slice(u).count * sizeof(std::uint16_t);
    for (const ParamRange& r : half_.widen[u]) bytes += r.count * sizeof(float);
  }
  return bytes;
}

void ParamGatherer::gather(int unit) {
  std::size_t at = (cursor_ + 1) % order_.size();
  if (order_[at] != unit && unit == 0) at = 0;
  if (order_[at] != unit)
    throw std::logic_error("ParamGatherer::gather(" + std::to_string(unit) + "): expected unit " +
                           std::to_string(order_[at]) + " next; the model must gather units in the order of "
                           "trainer/parallel/zero/gatherer.h");
  cursor_ = at;
  if (state_[unit] == State::released) issue(unit);
  wait(unit);
  if (at + 1 < order_.size()) {
    const int next = order_[at + 1];
    if (state_[next] == State::released && alive_besides_root() < kMaxGatheredUnits) issue(next);
  }
  peak_bytes_ = std::max(peak_bytes_, alive_bytes());
}

void ParamGatherer::release(int unit) {
  if (cursor_ + 1 < order_.size() && order_[cursor_ + 1] == unit) return;
  free(unit);
}

void ParamGatherer::gather_all() {
  for (int u = 0; u < shards_.num_units(); ++u)
    if (state_[u] == State::released) issue(u);
  for (int u = 0; u < shards_.num_units(); ++u) wait(u);
}

void ParamGatherer::release_all() {
  for (int u = 0; u < shards_.num_units(); ++u) free(u);
  cursor_ = order_.size() - 1;
}

}  // namespace dtrain::trainer
