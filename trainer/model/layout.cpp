#include "trainer/model/layout.h"

#include <cstring>
#include <stdexcept>

namespace dtrain::trainer {

namespace {

constexpr const char* kLayerNames[kLayerTensors] = {"ln1w", "ln1b",     "qkvw", "qkvb", "attprojw", "attprojb",
                                                     "ln2w", "ln2b",     "fcw",  "fcb",  "fcprojw",  "fcprojb"};
constexpr bool kLayerDecay[kLayerTensors] = {false, false, true,  false, true, false,
                                             false, false, true,  false, true, false};

std::size_t round_up(std::size_t count, int multiple) {
  const std::size_t m = static_cast<std::size_t>(multiple);
  return (count + m - 1) / m * m;
}

}  // namespace

ParamLayout::ParamLayout(const GptConfig& config, int unit_multiple) : config_(config), multiple_(unit_multiple) {
  config_.validate();
  if (unit_multiple < 1)
    throw std::invalid_argument("ParamLayout: unit_multiple " + std::to_string(unit_multiple) +
                                " must be at least 1 (the ZeRO world size, or 1 for no padding)");
  const std::size_t C = config_.channels;
  wte_count_ = static_cast<std::size_t>(config_.padded_vocab_size) * C;
  wpe_count_ = static_cast<std::size_t>(config_.max_seq_len) * C;
  const std::vector<int> shapes[kLayerTensors] = {
      {int(C)},         {int(C)}, {int(3 * C), int(C)}, {int(3 * C)}, {int(C), int(C)},     {int(C)},
      {int(C)},         {int(C)}, {int(4 * C), int(C)}, {int(4 * C)}, {int(C), int(4 * C)}, {int(C)}};
  for (int i = 0; i < kLayerTensors; ++i) {
    std::size_t count = 1;
    for (int d : shapes[i]) count *= static_cast<std::size_t>(d);
    layer_offsets_[i] = layer_count_;
    layer_counts_[i] = count;
    layer_count_ += count;
  }
  const std::size_t L = config_.num_layers;
  total_ = wte_count_ + wpe_count_ + L * layer_count_ + 2 * C;
  emb_slice_ = round_up(wte_count_ + wpe_count_, multiple_);
  layer_slice_ = round_up(layer_count_, multiple_);
  lnf_offset_ = emb_slice_ + L * layer_slice_;
  buffer_ = lnf_offset_ + round_up(2 * C, multiple_);

  tensors_.push_back({"wte", -1, 0, wte_count_, {config_.padded_vocab_size, int(C)}, true});
  tensors_.push_back({"wpe", -1, wte_count_, wpe_count_,
                      {config_.max_seq_len, int(C)}, true});
  for (int i = 0; i < kLayerTensors; ++i)
    for (int l = 0; l < config_.num_layers; ++l) {
      const ParamRange r = layer_tensor(l, static_cast<LayerTensor>(i));
      tensors_.push_back({kLayerNames[i], l, r.offset, r.count, shapes[i], kLayerDecay[i]});
    }
  tensors_.push_back({"lnfw", -1, lnfw().offset, C, {int(C)}, false});
  tensors_.push_back({"lnfb", -1, lnfb().offset, C, {int(C)}, false});
}

ParamRange ParamLayout::layer(int l) const {
  if (l < 0 || l >= config_.num_layers)
    throw std::out_of_range("layer " + std::to_string(l) + " out of range [0, " +
                            std::to_string(config_.num_layers) + ")");
  return {emb_slice_ + static_cast<std::size_t>(l) * layer_slice_, layer_count_};
}

ParamRange ParamLayout::unit_slice(int u) const {
  if (u < 0 || u >= num_units())
    throw std::out_of_range("ZeRO unit " + std::to_string(u) + " out of range [0, " + std::to_string(num_units()) +
                            ")");
  if (u == 0) return {0, emb_slice_};
  if (u == num_units() - 1) return {lnf_offset_, buffer_ - lnf_offset_};
  return {layer(u - 1).offset, layer_slice_};
}

std::size_t ParamLayout::unit_params(int u) const {
  if (u == 0) return wte_count_ + wpe_count_;
  if (u == num_units() - 1) return 2 * channels();
  return layer(u - 1).count;
}

ParamRange ParamLayout::layer_tensor(int l, LayerTensor t) const {
  const int i = static_cast<int>(t);
  return {layer(l).offset + layer_offsets_[i], layer_counts_[i]};
}

std::vector<ParamRange> ParamLayout::decay_ranges() const {
  std::vector<ParamRange> ranges{{0, wte_count_ + wpe_count_}};
  for (int l = 0; l < config_.num_layers; ++l)
    for (int i = 0; i < kLayerTensors; ++i)
      if (kLayerDecay[i]) {
        const ParamRange r = layer_tensor(l, static_cast<LayerTensor>(i));
        if (ranges.back().offset + ranges.back().count == r.offset)
          ranges.back().count += r.count;
        else
          ranges.push_back(r);
      }
  return ranges;
}

void ParamLayout::to_checkpoint_order(const float* ours, float* checkpoint) const {
  std::size_t at = 0;
  for (const TensorInfo& t : tensors_) {
    std::memcpy(checkpoint + at, ours + t.offset, t.count * sizeof(float));
    at += t.count;
  }
}

void ParamLayout::pack(const float* buffer, float* packed) const {
  std::size_t at = 0;
  for (int u = 0; u < num_units(); ++u) {
    std::memcpy(packed + at, buffer + unit_slice(u).offset, unit_params(u) * sizeof(float));
    at += unit_params(u);
  }
}

void ParamLayout::unpack(const float* packed, float* buffer) const {
  std::memset(buffer, 0, buffer_ * sizeof(float));
  std::size_t at = 0;
  for (int u = 0; u < num_units(); ++u) {
    std::memcpy(buffer + unit_slice(u).offset, packed + at, unit_params(u) * sizeof(float));
    at += unit_params(u);
  }
}

void ParamLayout::from_checkpoint_order(const float* checkpoint, float* ours) const {
  std::size_t at = 0;
  for (const TensorInfo& t : tensors_) {
    std::memcpy(ours + t.offset, checkpoint + at, t.count * sizeof(float));
    at += t.count;
  }
}

}  // namespace dtrain::trainer
