#include "trainer/model/layout.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>

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

// How a layer tensor splits over tensor-parallel ranks (layout.h's TensorParallel).
enum class Split { none, rows, columns, qkv_rows };
constexpr Split kLayerSplit[kLayerTensors] = {Split::none, Split::none,    Split::qkv_rows, Split::qkv_rows,
                                              Split::columns, Split::none, Split::none,     Split::none,
                                              Split::rows,    Split::rows, Split::columns,  Split::none};

std::size_t elements(const std::vector<int>& shape) {
  std::size_t count = 1;
  for (int d : shape) count *= static_cast<std::size_t>(d);
  return count;
}

// This rank's slice of a tensor of `full` shape split by `split` over tp.size ranks: its local shape and pieces.
std::vector<SlicePiece> slice_pieces(Split split, const std::vector<int>& full, const TensorParallel& tp,
                                     std::vector<int>& local) {
  const std::size_t T = static_cast<std::size_t>(tp.size), r = static_cast<std::size_t>(tp.rank);
  const std::size_t rows = static_cast<std::size_t>(full[0]);
  const std::size_t cols = full.size() > 1 ? static_cast<std::size_t>(full[1]) : 1;
  local = full;
  std::vector<SlicePiece> pieces;
  switch (split) {
    case Split::none:
      pieces.push_back({0, 0, rows * cols});
      break;
    case Split::rows:
      local[0] = static_cast<int>(rows / T);
      pieces.push_back({0, r * (rows / T) * cols, (rows / T) * cols});
      break;
    case Split::qkv_rows: {  // q, k and v each (C, ...) split by rows: this rank's heads of each
      const std::size_t part = rows / 3, mine = part / T;
      local[0] = static_cast<int>(3 * mine);
      for (std::size_t p = 0; p < 3; ++p) {
        pieces.push_back({p * mine * cols, (p * part + r * mine) * cols, mine * cols});
      }
      break;
    }
    case Split::columns:
      local[1] = static_cast<int>(cols / T);
      for (std::size_t i = 0; i < rows; ++i) pieces.push_back({i * (cols / T), i * cols + r * (cols / T), cols / T});
      break;
  }
  return pieces;
}

void check_tensor_parallel(const GptConfig& c, const TensorParallel& tp) {
  if (tp.size < 1 || tp.rank < 0 || tp.rank >= tp.size)
    throw std::invalid_argument("ParamLayout: tensor-parallel rank " + std::to_string(tp.rank) + " of " +
                                std::to_string(tp.size) + " is not a rank of the group");
  if (c.num_heads % tp.size != 0 || c.padded_vocab_size % tp.size != 0)
    throw std::invalid_argument("ParamLayout: " + std::to_string(c.num_heads) + " heads and the padded vocabulary of " +
                                std::to_string(c.padded_vocab_size) + " must both divide by the tensor-parallel size " +
                                std::to_string(tp.size));
}

void check_pipeline_stage(const GptConfig& c, const PipelineStage& stage) {
  if (stage.size < 1 || stage.rank < 0 || stage.rank >= stage.size)
    throw std::invalid_argument("ParamLayout: pipeline stage " + std::to_string(stage.rank) + " of " +
                                std::to_string(stage.size) + " is not a stage of the pipeline");
  if (stage.virtual_stages < 1)
    throw std::invalid_argument("ParamLayout: " + std::to_string(stage.virtual_stages) +
                                " virtual pipeline stages; at least 1");
  if (c.num_layers % (stage.size * stage.virtual_stages) != 0)
    throw std::invalid_argument("ParamLayout: " + std::to_string(c.num_layers) +
                                " layers must divide by the pipeline-parallel size " + std::to_string(stage.size) +
                                (stage.virtual_stages > 1 ? " x " + std::to_string(stage.virtual_stages) +
                                                                " virtual stages"
                                                          : std::string()));
}

}  // namespace

ParamLayout::ParamLayout(const GptConfig& config, int unit_multiple, TensorParallel tp, PipelineStage stage)
    : config_(config), tp_(tp), stage_(stage) {
  config_.validate();
  if (unit_multiple < 1)
    throw std::invalid_argument("ParamLayout: unit_multiple " + std::to_string(unit_multiple) +
                                " must be at least 1 (the ZeRO world size, or 1 for no padding)");
  multiple_ = unit_multiple;
  check_tensor_parallel(config_, tp_);
  check_pipeline_stage(config_, stage_);
  chunk_layers_ = config_.num_layers / (stage_.size * stage_.virtual_stages);
  const int C = config_.channels;
  const std::vector<int> full_shapes[kLayerTensors] = {{C},        {C}, {3 * C, C}, {3 * C}, {C, C},     {C},
                                                       {C},        {C}, {4 * C, C}, {4 * C}, {C, 4 * C}, {C}};
  std::vector<int> shapes[kLayerTensors];
  std::vector<SlicePiece> pieces[kLayerTensors];
  for (int i = 0; i < kLayerTensors; ++i) {
    pieces[i] = slice_pieces(kLayerSplit[i], full_shapes[i], tp_, shapes[i]);
    layer_offsets_[i] = layer_count_;
    layer_counts_[i] = elements(shapes[i]);
    layer_count_ += layer_counts_[i];
  }
  std::vector<int> wte_shape;
  const std::vector<int> wte_full{config_.padded_vocab_size, C};
  const std::vector<SlicePiece> wte_pieces = slice_pieces(Split::rows, wte_full, tp_, wte_shape);
  const bool has_wte = stage_.first() || stage_.last();
  wte_count_ = has_wte ? elements(wte_shape) : 0;
  wpe_count_ = stage_.first() ? static_cast<std::size_t>(config_.max_seq_len) * static_cast<std::size_t>(C) : 0;
  lnf_count_ = stage_.last() ? channels() : 0;
  const std::size_t L = static_cast<std::size_t>(stage_layers());
  total_ = wte_count_ + wpe_count_ + L * layer_count_ + 2 * lnf_count_;
  emb_slice_ = round_up(wte_count_ + wpe_count_, multiple_);
  layer_slice_ = round_up(layer_count_, multiple_);
  lnf_offset_ = emb_slice_ + L * layer_slice_;
  buffer_ = lnf_offset_ + round_up(2 * lnf_count_, multiple_);
  list_tensors(shapes, pieces, full_shapes, wte_shape, wte_pieces);
}

// checkpoint_tensors(): this stage's tensors in llm.c's order, each placed in the whole model (full_at) too.
void ParamLayout::list_tensors(const std::vector<int>* shapes, const std::vector<SlicePiece>* pieces,
                               const std::vector<int>* full_shapes, const std::vector<int>& wte_shape,
                               const std::vector<SlicePiece>& wte_pieces) {
  const int C = config_.channels;
  std::size_t full_at = 0;
  // One tensor of the checkpoint order: its place here (offset, count, shape: this rank's slice), then the whole;
  // a tensor of another stage only moves full_at on.
  auto add = [&](bool here, const char* name, int layer, ParamRange at, std::vector<int> shape, bool decay,
                 const std::vector<int>& full, std::vector<SlicePiece> slice, bool split) {
    if (here) {
      TensorInfo t;
      t.name = name;
      t.layer = layer;
      t.offset = at.offset;
      t.count = at.count;
      t.shape = std::move(shape);
      t.decay = decay;
      t.full_shape = full;
      t.full_at = full_at;
      t.pieces = std::move(slice);
      t.replicated = !split || tp_.size == 1;
      t.tied_copy = layer < 0 && std::string(name) == "wte" && !stage_.first();
      tensors_.push_back(std::move(t));
    }
    full_at += elements(full);
  };
  const std::vector<int> wte_full{config_.padded_vocab_size, C};
  add(wte_count_ > 0, "wte", -1, wte(), wte_shape, true, wte_full, wte_pieces, true);
  const std::vector<int> wpe_shape{config_.max_seq_len, C};
  add(stage_.first(), "wpe", -1, wpe(), wpe_shape, true, wpe_shape, {{0, 0, wpe_count_}}, false);
  for (int i = 0; i < kLayerTensors; ++i)
    for (int l = 0; l < config_.num_layers; ++l) {
      const bool here = has_layer(l);
      add(here, kLayerNames[i], l, here ? layer_tensor(l, static_cast<LayerTensor>(i)) : ParamRange{}, shapes[i],
          kLayerDecay[i], full_shapes[i], pieces[i], kLayerSplit[i] != Split::none);
    }
  add(stage_.last(), "lnfw", -1, lnfw(), {C}, false, {C}, {{0, 0, channels()}}, false);
  add(stage_.last(), "lnfb", -1, lnfb(), {C}, false, {C}, {{0, 0, channels()}}, false);
}

ParamRange ParamLayout::layer(int l) const {
  if (l < 0 || l >= config_.num_layers)
    throw std::out_of_range("layer " + std::to_string(l) + " out of range [0, " +
                            std::to_string(config_.num_layers) + ")");
  if (!has_layer(l))
    throw std::out_of_range("layer " + std::to_string(l) + " is on another pipeline stage; stage " +
                            std::to_string(stage_.rank) + " holds layers [" + std::to_string(first_layer()) + ", " +
                            std::to_string(first_layer() + chunk_layers_) + ")" +
                            (chunks() > 1 ? " and every " + std::to_string(stage_.size * chunk_layers_) +
                                                "th layer from there in runs of " + std::to_string(chunk_layers_)
                                          : std::string()));
  return {emb_slice_ + static_cast<std::size_t>(stage_index(l)) * layer_slice_, layer_count_};
}

ParamRange ParamLayout::unit_slice(int u) const {
  if (u < 0 || u >= num_units())
    throw std::out_of_range("ZeRO unit " + std::to_string(u) + " out of range [0, " + std::to_string(num_units()) +
                            ")");
  if (u == 0) return {0, emb_slice_};
  if (u == num_units() - 1) return {lnf_offset_, buffer_ - lnf_offset_};
  const int l = u - 1;
  if (!has_layer(l)) {  // another stage's layer: empty, where it would be among this stage's
    std::size_t before = 0;
    for (int v = 0; v < chunks(); ++v)
      before += static_cast<std::size_t>(std::clamp(l - chunk_first_layer(v), 0, chunk_layers_));
    return {emb_slice_ + before * layer_slice_, 0};
  }
  return {layer(l).offset, layer_slice_};
}

std::size_t ParamLayout::unit_params(int u) const {
  if (u == 0) return wte_count_ + wpe_count_;
  if (u == num_units() - 1) return 2 * lnf_count_;
  return has_layer(u - 1) ? layer(u - 1).count : 0;
}

ParamRange ParamLayout::layer_tensor(int l, LayerTensor t) const {
  const int i = static_cast<int>(t);
  return {layer(l).offset + layer_offsets_[i], layer_counts_[i]};
}

std::vector<ParamRange> ParamLayout::decay_ranges() const {
  std::vector<ParamRange> ranges{{0, wte_count_ + wpe_count_}};
  for (int l = 0; l < config_.num_layers; ++l) {
    if (!has_layer(l)) continue;
    for (int i = 0; i < kLayerTensors; ++i)
      if (kLayerDecay[i]) {
        const ParamRange r = layer_tensor(l, static_cast<LayerTensor>(i));
        if (ranges.back().offset + ranges.back().count == r.offset)
          ranges.back().count += r.count;
        else
          ranges.push_back(r);
      }
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

void ParamLayout::take_slices(const float* whole, float* ours) const {
  for (const TensorInfo& t : tensors_)
    for (const SlicePiece& p : t.pieces)
      std::memcpy(ours + t.offset + p.local, whole + t.full_at + p.full, p.count * sizeof(float));
}

void ParamLayout::put_slices(const float* ours, float* whole) const {
  for (const TensorInfo& t : tensors_)
    for (const SlicePiece& p : t.pieces)
      std::memcpy(whole + t.full_at + p.full, ours + t.offset + p.local, p.count * sizeof(float));
}

}  // namespace dtrain::trainer
