#pragma once

// Where each parameter tensor lives in the model's one flat fp32 buffer (gradients mirror it element for element).
//
// In-memory order (the layout contract):
//   wte (Vp, C) | wpe (maxT, C) | layer 0 | layer 1 | ... | layer L-1 | lnfw (C) | lnfb (C)
// and inside each layer, contiguous:
//   ln1w (C) ln1b (C) qkvw (3C, C) qkvb (3C) attprojw (C, C) attprojb (C)
//   ln2w (C) ln2b (C) fcw (4C, C) fcb (4C) fcprojw (C, 4C) fcprojb (C)
// Backward finishes gradients from the end of the buffer towards the start (final LayerNorm, layer L-1, ..., layer
// 0, wpe, wte), which is what DDP buckets taken from the end need (trainer/parallel/ddp/reducer.h).
//
// ZeRO units (trainer/parallel/zero/shards.h): the buffer is cut into units, each sharded over the W ranks:
//   unit 0 = wte + wpe, unit 1 + l = layer l (l = 0 .. L-1), unit L + 1 = lnfw + lnfb.
// With unit_multiple W > 1 (--zero 1/2/3 on W ranks) each unit's slice is followed by zero padding up to a multiple
// of W, as PyTorch FSDP pads its flat parameters, so that every unit splits into W equal shards in place:
//   wte | wpe | pad | layer 0 | pad | ... | layer L-1 | pad | lnfw | lnfb | pad        (buffer_size() floats)
// The padding holds zeros in parameters, gradients and optimizer state and never changes (its gradient is 0).
// unit_multiple 1 (the default, and --zero 0) has no padding: buffer_size() == num_params(), the layout above.
//
// llm.c's checkpoint stores the same tensors in another order: each kind stacked over all layers
// (wte, wpe, ln1w[L], ln1b[L], qkvw[L], ...). checkpoint_tensors() lists them in that order with their place in
// our buffer, and to_checkpoint_order()/from_checkpoint_order() convert whole buffers both ways.

#include <array>
#include <cstddef>
#include <string>
#include <vector>

#include "trainer/model/config.h"

namespace dtrain::trainer {

// A contiguous range of the flat buffer.
struct ParamRange {
  std::size_t offset = 0;
  std::size_t count = 0;
};

// The 12 tensors of one transformer block, in their in-memory order.
enum class LayerTensor { ln1w, ln1b, qkvw, qkvb, attprojw, attprojb, ln2w, ln2b, fcw, fcb, fcprojw, fcprojb };
inline constexpr int kLayerTensors = 12;

// A run of a tensor-parallel rank's slice of a tensor: `count` elements at `local` in the slice (row-major, its
// local shape) are those at `full` in the whole tensor (row-major, its full shape).
struct SlicePiece {
  std::size_t local = 0;
  std::size_t full = 0;
  std::size_t count = 0;
};

// One tensor as llm.c's checkpoint lists it.
struct TensorInfo {
  std::string name;         // llm.c's name: "wte", "wpe", "ln1w", ..., "fcprojb", "lnfw", "lnfb"
  int layer = -1;           // block index for per-layer tensors, -1 for wte, wpe, lnfw, lnfb
  std::size_t offset = 0;   // first element in our flat buffer
  std::size_t count = 0;    // elements
  std::vector<int> shape;   // row-major, PyTorch's shape (e.g. qkvw: {3C, C}); a tensor-parallel rank's slice's
  bool decay = false;       // 2-D weight: gets AdamW weight decay (nanoGPT: every parameter with dim >= 2)
  // Tensor parallelism (TensorParallel below): the whole tensor's shape, where it starts in the whole model's
  // checkpoint order, and where this rank's slice sits in it (one piece covering it all when not split).
  std::vector<int> full_shape;
  std::size_t full_at = 0;
  std::vector<SlicePiece> pieces;
  bool replicated = true;   // every rank of the group holds all of it (LayerNorms, wpe, the row-parallel biases)
  // Pipeline parallelism: the last stage's copy of wte for the tied output head (PipelineStage below); the first
  // stage's copy is the one that counts once (checkpoints, the gradient norm).
  bool tied_copy = false;
};

// A rank's place in its tensor-parallel group (trainer/parallel/grid/rank_grid.h): Megatron-LM's split of GPT-2
// over `size` ranks, each holding
//   wte                  rows [rank Vp/T, (rank + 1) Vp/T)        vocabulary-parallel embedding and tied head
//   qkvw, qkvb           the rows of its NH/T heads, of each of q, k and v: (3C/T, C) ordered q | k | v
//   attprojw             columns [rank C/T, (rank + 1) C/T): (C, C/T)          row-parallel
//   fcw, fcb             rows [rank 4C/T, (rank + 1) 4C/T): (4C/T, C)          column-parallel
//   fcprojw              columns [rank 4C/T, (rank + 1) 4C/T): (C, 4C/T)       row-parallel
// and all of wpe, the LayerNorms and the row-parallel layers' biases (attprojb, fcprojb). Heads and Vp must divide
// by size (check_model_split in rank_grid.h says so with the numbers).
// sequence_parallel (Korthikanti et al. 2022): the group also splits the tokens of the residual stream (gpt.h).
struct TensorParallel {
  int size = 1;
  int rank = 0;
  bool sequence_parallel = false;
};

// A rank's stage of a pipeline of `size` stages (trainer/parallel/grid/rank_grid.h), Megatron-LM's split of GPT-2:
// stage `rank` holds layers [rank L/P, (rank + 1) L/P); the first stage also holds the embeddings (wte, wpe), the last
// the final LayerNorm and its own copy of wte for the tied output head (Megatron-LM's "word embeddings" on the last
// stage: the two copies start equal and their gradients are summed after backward, so they stay equal). Layers must
// divide by size (check_model_split in rank_grid.h).
// virtual_stages V > 1 (interleaved 1F1B, Narayanan et al. 2021): the layers are cut into size x V chunks and stage
// `rank` holds chunks rank, rank + size, rank + 2 size, ... (Megatron-LM's model chunks): its chunk v is layers
// [(v size + rank) Lc, +Lc) with Lc = L / (size V), the first chunk of the first stage holds the embeddings and the
// last chunk of the last stage the head. Layers must divide by size x V.
struct PipelineStage {
  int size = 1;
  int rank = 0;
  int virtual_stages = 1;
  bool first() const { return rank == 0; }
  bool last() const { return rank == size - 1; }
};

class ParamLayout {
 public:
  // unit_multiple: every unit's slice is padded to a multiple of it (the ZeRO world size; 1 = no padding). tp: this
  // rank's slices of the split tensors (TensorParallel above); the layout is then of those slices, in the same order.
  // stage: this rank's pipeline stage (PipelineStage above); the layout then holds that stage's tensors only, in the
  // same order, and keeps the whole model's numbering of layers and ZeRO units: a unit of another stage is empty
  // (count 0), and layer(l) of a layer another stage holds throws std::out_of_range.
  explicit ParamLayout(const GptConfig& config, int unit_multiple = 1, TensorParallel tp = {},
                       PipelineStage stage = {});

  const GptConfig& config() const { return config_; }
  // Parameters of the model, without padding (what checkpoints hold).
  std::size_t num_params() const { return total_; }
  // Floats in a flat buffer laid out this way, padding included.
  std::size_t buffer_size() const { return buffer_; }
  int unit_multiple() const { return multiple_; }

  // ZeRO units (top of this file): num_layers + 2 of them, in increasing offset order.
  int num_units() const { return config_.num_layers + 2; }
  // Unit u's slice of the buffer, padding included (count is a multiple of unit_multiple()).
  ParamRange unit_slice(int u) const;
  // How many of unit_slice(u)'s floats are parameters (the rest, at its end, is padding).
  std::size_t unit_params(int u) const;

  ParamRange wte() const { return {0, wte_count_}; }
  ParamRange wpe() const { return {wte_count_, wpe_count_}; }
  ParamRange layer(int l) const;  // the whole block l
  ParamRange layer_tensor(int l, LayerTensor t) const;
  // Of another pipeline stage's tensors (PipelineStage above): wte() and wpe() on the middle stages, wpe() on the last
  // and lnfw(), lnfb() before it are empty ranges.
  ParamRange lnfw() const { return {lnf_offset_, lnf_count_}; }
  ParamRange lnfb() const { return {lnf_offset_ + lnf_count_, lnf_count_}; }

  // Every tensor in llm.c's checkpoint order (16 kinds; per-layer kinds expanded to L entries, layer 0 first); of a
  // pipeline stage, its own tensors only (full_at still places them in the whole model).
  const std::vector<TensorInfo>& checkpoint_tensors() const { return tensors_; }
  // The ranges that get weight decay, in increasing offset order, adjacent ones merged.
  std::vector<ParamRange> decay_ranges() const;

  // Reorders a whole buffer (num_params() floats) between our layout and llm.c's checkpoint order.
  void to_checkpoint_order(const float* ours, float* checkpoint) const;
  void from_checkpoint_order(const float* checkpoint, float* ours) const;
  // Between a buffer of this layout (buffer_size() floats) and the same parameters without padding (num_params()
  // floats, the unpadded layout, as the state file stores AdamW's moments). unpack() zeroes the padding.
  void pack(const float* buffer, float* packed) const;
  void unpack(const float* packed, float* buffer) const;

  const TensorParallel& tensor_parallel() const { return tp_; }
  const PipelineStage& pipeline_stage() const { return stage_; }
  // This stage's layers: stage_layers() of them, in chunks() chunks of chunk_layers() each, chunk v's starting at
  // chunk_first_layer(v) (one chunk without virtual stages: [first_layer(), first_layer() + stage_layers())).
  int first_layer() const { return chunk_first_layer(0); }
  int stage_layers() const { return chunk_layers_ * stage_.virtual_stages; }
  int chunks() const { return stage_.virtual_stages; }
  int chunk_layers() const { return chunk_layers_; }
  int chunk_first_layer(int v) const { return (v * stage_.size + stage_.rank) * chunk_layers_; }
  bool has_layer(int l) const { return l >= 0 && (l / chunk_layers_) % stage_.size == stage_.rank; }
  // Layer l's index among this stage's layers (its place in the buffer): chunk by chunk.
  int stage_index(int l) const { return l / chunk_layers_ / stage_.size * chunk_layers_ + l % chunk_layers_; }
  // Whether the layout holds the whole model (no tensor or pipeline split): its checkpoint order is then the whole
  // model's, and take_slices() / put_slices() copy everything.
  bool whole() const { return tp_.size == 1 && stage_.size == 1; }
  // Between the whole model in llm.c's checkpoint order (ParamLayout(config()).num_params() floats, what checkpoints
  // and --init-from hold) and this rank's slices in our buffer: take_slices() copies them out of it, put_slices()
  // writes them into it (each element of a split tensor from the one rank holding it; a replicated tensor from any;
  // only the tensors of this rank's pipeline stage).
  void take_slices(const float* whole, float* ours) const;
  void put_slices(const float* ours, float* whole) const;

 private:
  std::size_t channels() const { return static_cast<std::size_t>(config_.channels); }
  void list_tensors(const std::vector<int>* shapes, const std::vector<SlicePiece>* pieces,
                    const std::vector<int>* full_shapes, const std::vector<int>& wte_shape,
                    const std::vector<SlicePiece>& wte_pieces);

  GptConfig config_;
  TensorParallel tp_;
  PipelineStage stage_;
  int chunk_layers_ = 0;
  std::size_t wte_count_ = 0;
  std::size_t wpe_count_ = 0;
  std::array<std::size_t, kLayerTensors> layer_offsets_{};  // within a block
  std::array<std::size_t, kLayerTensors> layer_counts_{};
  std::size_t layer_count_ = 0;  // elements per block
  std::size_t total_ = 0;
  int multiple_ = 1;
  std::size_t emb_slice_ = 0;    // wte + wpe + padding
  std::size_t layer_slice_ = 0;  // one block + padding
  std::size_t lnf_offset_ = 0;
  std::size_t lnf_count_ = 0;    // C on the last pipeline stage, else 0
  std::size_t buffer_ = 0;
  std::vector<TensorInfo> tensors_;
};

}  // namespace dtrain::trainer
