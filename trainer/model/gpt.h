#pragma once

// GPT-2 (llm.c / nanoGPT): token + position embedding, L pre-LayerNorm blocks (causal self-attention, GELU-tanh
// MLP), final LayerNorm, output head tied to wte. Parameters and gradients are one flat buffer each, laid out as
// trainer/model/layout.h describes; activations are sized for the largest B*T seen and grown on demand (none
// before the first forward()). Not thread-safe: one model per thread.
//
// One training micro-step:
//   float loss = model.forward(inputs, targets, B, T);     // mean cross-entropy over B*T
//   model.backward(1.0f / K, [&](size_t offset, size_t count) { ddp.grads_ready(offset, count); });
// backward() adds d(loss_scale * loss)/dparams to the gradient buffer (call zero_grad() once per optimizer step),
// so K micro-steps with loss_scale 1/K give the gradient of the mean loss over the K micro-batches.
//
// Mixed precision (precision bf16 or fp16): params() stays the fp32 master copy that the optimizer updates, and the
// model keeps a 16-bit working copy of it, rounded to nearest even by refresh_working_params() (call it whenever
// params() changed: after loading or initialising them and after every optimizer step). Every matrix product (the
// four linear layers of each block and the output head) takes 16-bit inputs, the working weights and 16-bit
// activations, and accumulates in fp32; embeddings, LayerNorm, attention's softmax, GELU, the residual adds and the
// loss run in fp32 on fp32 parameters, as CUDA autocast runs them. Backward rounds each product's incoming gradient
// to 16 bits and accumulates parameter gradients in fp32. activations.h says which activations are kept in 16 bits.
//
// Tensor parallelism (Shoeybi et al. 2019): built with TensorParallel{T, rank} and given its group's communicator
// (set_tensor_parallel_group), the model holds this rank's slices (layout.h) and computes its share of each block:
// q, k, v and the first MLP projection column-parallel (NH/T heads, 4C/T hidden units), the attention output and the
// second MLP projection row-parallel (their outputs allreduced over the group, the bias added by TP rank 0 alone),
// the embedding and the tied output head vocabulary-parallel (vocab_parallel.h: no rank holds a full row of logits).
// Backward allreduces the input gradient of each column-parallel product and of the head. With sequence_parallel
// (TensorParallel, layout.h) the residual stream is split over the group by tokens instead (gpt_sequence.cpp). The
// replicated tensors
// (wpe, the LayerNorms, the row-parallel biases) get the same gradient on every rank of the group, computed from the
// same values, so they stay equal without a collective. Host backends only (the vocabulary-parallel ops read host
// memory); logits() is then this rank's Vp/T columns.
//
// Pipeline parallelism (Huang et al. 2019; Narayanan et al. 2021): built with PipelineStage{P, stage}, the model holds
// that stage's layers (layout.h) and runs only them. A stage after the first takes its input from stage_input()
// (the previous stage's output, received there before forward_batch()); a stage before the last leaves its output in
// stage_output() and, before backward(), takes d output in stage_output_grad(); after backward() a stage after the
// first has d input in stage_input_grad(). Only the last stage computes the loss; forward_batch() writes 0 to *loss
// elsewhere. Several micro-batches in flight (the pipeline's schedule) each keep their own activations:
// set_activation_sets(n) keeps n sets and use_activation_set(i, chunk) picks the one that the next forward_batch(),
// the stage buffers and backward() use. With virtual stages (layout.h; interleaved 1F1B) the stage holds several model
// chunks and each set runs one of them: "the first stage" above is then the first stage's first chunk, "the last" the
// last stage's last, and a backward() hands over only its chunk's gradients (the first chunk's from 0, the last's to
// the buffer's end). The tied wte's two copies (first and last stage) each get their own stage's gradient: the caller
// sums them (layout.h).

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "trainer/kernels/backend.h"
#include "trainer/model/buffers.h"
#include "trainer/model/config.h"
#include "trainer/model/layout.h"

namespace dtrain::trainer {

class Communicator;
struct MatmulInput;
struct VocabSlice;

class Gpt {
 public:
  // Called by backward() for each range of the gradient buffer as soon as it is final for this pass: in
  // decreasing offset order, together covering [0, buffer_size()) exactly once (wte, which also gets the output
  // head's gradient, comes last); with virtual stages, the current chunk's part of it (top of this file).
  using GradsReady = std::function<void(std::size_t offset, std::size_t count)>;

  // ZeRO-3 (trainer/parallel/zero/gatherer.h): called around the use of a unit's parameters (ParamLayout's units),
  // so that they can be all-gathered just before and freed just after. Per forward(): gather(0) first (the
  // embeddings, which the tied output head also reads, stay gathered until the end of backward), then for each
  // layer and the final LayerNorm gather(u) before and release(u) after; per backward(): gather(u) / release(u)
  // around lnf and each layer in reverse, and release(0) after the embedding backward.
  struct UnitHooks {
    std::function<void(int unit)> gather;
    std::function<void(int unit)> release;
  };

  // Validates config (throws std::invalid_argument). Parameters and gradients start at zero: call
  // init_weights() or fill params() from a checkpoint. unit_multiple pads each ZeRO unit (layout.h). precision:
  // fp32, or bf16 / fp16 for mixed precision (top of this file). buffers: where the buffers that collectives read and
  // write live (params(), grads(), working_params(); buffers.h), memory `backend` computes on; null: the backend's
  // own. It must outlive the model.
  // tp: this rank's place in its tensor-parallel group (top of this file); a group of more than one rank needs a
  // backend with host-accessible memory (std::invalid_argument otherwise) and set_tensor_parallel_group() before the
  // first forward().
  // stage: this rank's pipeline stage (top of this file).
  explicit Gpt(const GptConfig& config, kernels::Backend& backend, int unit_multiple = 1,
               kernels::Dtype precision = kernels::Dtype::fp32, BufferSource* buffers = nullptr,
               TensorParallel tp = {}, PipelineStage stage = {});
  explicit Gpt(const GptConfig& config);  // the CPU backend
  Gpt(const Gpt&) = delete;
  Gpt& operator=(const Gpt&) = delete;
  ~Gpt();

  const GptConfig& config() const { return layout_.config(); }
  const ParamLayout& layout() const { return layout_; }
  kernels::Backend& backend() const { return backend_; }
  // Where params(), grads() and working_params() came from; the reducers take their 16-bit copies from it too.
  BufferSource& buffers() { return buffers_; }
  kernels::Dtype precision() const { return precision_; }

  float* params() { return params_; }
  const float* params() const { return params_; }
  float* grads() { return grads_; }
  const float* grads() const { return grads_; }
  std::size_t num_params() const { return layout_.num_params(); }
  // Floats in params() and grads(): num_params() plus ZeRO padding (layout.h).
  std::size_t buffer_size() const { return layout_.buffer_size(); }
  // Bytes of activations (and backward's scratch) held now: sized by the largest B*T seen so far.
  std::size_t activation_bytes() const;
  // What backward recomputes (Recompute above; none by default). Activations are sized anew at the next forward.
  void set_recompute(Recompute recompute);
  Recompute recompute() const { return recompute_; }
  // Mixed precision: the 16-bit working copy = params() rounded to nearest even; nothing with fp32 precision.
  void refresh_working_params();
  // The same for params()[range] only (ZeRO-3: a rank holds only its shards of the master).
  void refresh_working_params(ParamRange range);
  // The 16-bit working copy (buffer_size() values); null with fp32 precision.
  const std::uint16_t* working_params() const { return params_half_; }
  std::uint16_t* working_params() { return params_half_; }

  // ZeRO-3 with a 16-bit precision (trainer/parallel/zero/gatherer.h), as FSDP's param_dtype: the 16-bit working
  // copy is what gets gathered, so every parameter the model computes with is the 16-bit value. After this call
  // forward() and backward() stop reading params() (the master, of which a rank then holds only its shards) and
  // read the tensors their fp32 kernels need (fp32_tensors()) from compute_params() instead, a buffer of
  // buffer_size() floats that the gatherer fills by widening the gathered 16-bit copy. Throws std::logic_error
  // with fp32 precision. Without the call compute_params() is params().
  void read_params_from_working_copy();
  float* compute_params() { return compute_; }
  // The tensors of ZeRO unit u (layout.h) that fp32 kernels read from compute_params(): the embeddings, LayerNorm
  // weights and biases, the linear layers' biases; not the four weight matrices of a block, which only the 16-bit
  // matrix products read.
  std::vector<ParamRange> fp32_tensors(int unit) const;

  // Hooks around each unit's parameter use (ZeRO-3); empty hooks (the default) do nothing.
  void set_unit_hooks(UnitHooks hooks) { hooks_ = std::move(hooks); }
  // The tensor-parallel group's communicator (its size layout().tensor_parallel().size and this rank's rank in it, or
  // std::invalid_argument); it must outlive the model. Every rank of the group runs the same forward() and
  // backward() on the same batch.
  void set_tensor_parallel_group(Communicator* group);

  // GPT-2 initialisation as nanoGPT: Linear and Embedding weights ~ normal(0, 0.02), the two residual projections
  // (attprojw, fcprojw) ~ normal(0, 0.02 / sqrt(2 L)), biases 0, LayerNorm weights 1 and biases 0; padded wte rows
  // (V..Vp) are 0, as in llm.c's checkpoints. Random numbers: std::mt19937_64 seeded with `seed`, Box-Muller
  // (deterministic on every platform; it does not reproduce torch's generator). A tensor-parallel rank takes its
  // slices of the whole model's initialisation, so T ranks together hold the model T = 1 starts from.
  void init_weights(std::uint64_t seed);

  // inputs, targets: (B, T) token ids in [0, V); T <= max_seq_len. Returns the mean cross-entropy over B*T, or
  // NaN when targets is null (logits only; backward() then throws std::logic_error).
  // Throws std::invalid_argument for bad B, T or token ids (naming the position).
  float forward(const std::int32_t* inputs, const std::int32_t* targets, int B, int T);
  // forward() of a micro-batch as the loader holds it, B*T + 1 consecutive ids (inputs tokens[0, B*T), targets
  // tokens[1, B*T + 1)), for a step that reads nothing back: the ids are copied with Backend::copy_in_async (so
  // `tokens` should be Backend::allocate_host memory, and stays untouched until a fence recorded after this call
  // has passed), and the mean loss is written to *loss, in the backend's memory. Same checks and bits as forward().
  void forward_batch(const std::int32_t* tokens, int B, int T, float* loss);
  // (B, T, Vp) logits of the last forward(); valid until the next forward().
  const float* logits() const { return logits_; }

  // Pipeline parallelism (top of this file). set_activation_sets(n >= 1) frees every set (they are sized anew at
  // their next forward); use_activation_set(i) picks set i in [0, n) (std::out_of_range otherwise).
  void set_activation_sets(int n);
  // chunk: the model chunk (layout.h's virtual stages, 0 .. chunks() - 1) that the set's micro-batch runs through.
  void use_activation_set(int i, int chunk = 0);
  int activation_sets() const { return static_cast<int>(sets_.size()); }
  // The current set's (B, T, C) input of the stage, sized for B x T (a stage after the first receives into it before
  // forward_batch(); the first stage's embedding writes it).
  float* stage_input(int B, int T);
  // The current set's (B, T, C) output of the stage's last layer, after forward_batch().
  const float* stage_output() const;
  // The current set's (B, T, C) d loss / d output (a stage before the last receives into it, after forward_batch()
  // and before backward()); after backward(), d loss / d input (stage_input_grad(), the same buffer).
  float* stage_output_grad();
  const float* stage_input_grad() const;
  // Floats in each of those buffers for a B x T micro-batch: B*T*C, or this rank's B*T/T tokens' with sequence
  // parallelism.
  std::size_t stage_floats(int B, int T) const {
    return static_cast<std::size_t>(B) * T / static_cast<std::size_t>(shards()) * config().channels;
  }

  // grads[0, buffer_size()) = 0.
  void zero_grad();
  // grads += d(loss_scale * loss)/dparams for the last forward(), once per forward() (it consumes the softmax
  // buffers; a second call throws std::logic_error). grads_ready may be empty.
  void backward(float loss_scale, const GradsReady& grads_ready);

 private:
  struct Activations;
  // A rank's widths: 3C/T (q, k, v), C/T (attention's output), 4C/T (MLP), NH/T heads and Vp/T logits of
  // its T-rank tensor-parallel group (the whole model's with T = 1).
  struct Widths {
    int qkv, att, fc, heads, vocab;
  };
  Widths widths() const;
  int tp_size() const { return layout_.tensor_parallel().size; }
  // Sequence parallelism's split of the tokens (gpt_sequence.cpp): the group's size with it, else 1.
  int shards() const { return layout_.tensor_parallel().sequence_parallel ? tp_size() : 1; }
  bool sequence_parallel() const { return shards() > 1; }
  // This rank's tokens of the residual stream in the current activations: B*T / shards().
  std::size_t shard_tokens() const;
  const PipelineStage& stage() const { return layout_.pipeline_stage(); }
  // Layer l's index among this stage's layers (the activations hold this stage's layers only).
  int local(int l) const { return l - layout_.chunk_first_layer(chunk_); }
  // Whether the current chunk starts with the embeddings (the first stage's first) or ends with the head (the last
  // stage's last).
  bool embeds() const { return stage().first() && chunk_ == 0; }
  bool heads() const { return stage().last() && chunk_ == layout_.chunks() - 1; }
  // Where the current chunk's gradients start and end in the buffer (backward hands over [begin, end)); the first chunk
  // from 0, the last to the buffer's end.
  std::size_t chunk_grads_begin() const;
  std::size_t chunk_grads_end() const;
  // The activations of the current set, or std::logic_error naming `what` when it has none yet.
  Activations& current(const char* what) const;
  VocabSlice vocab_slice() const;
  // Sums `count` floats in place over the tensor-parallel group (nothing with T = 1); `what` names it in errors.
  void tp_allreduce(float* data, std::size_t count, const char* what);
  // The row-parallel layers' bias: added by TP rank 0 only, before the allreduce sums the ranks' partial outputs.
  const float* row_bias(const float* bias) const { return layout_.tensor_parallel().rank == 0 ? bias : nullptr; }
  // The embeddings' forward into the activations (vocabulary-parallel with T > 1), and the loss of its logits.
  void embed();
  float loss_forward();
  // Initialises params (a host buffer of `layout`) with nanoGPT's initialisation (init_weights).
  static void init_layout(const ParamLayout& layout, float* params, std::uint64_t seed);
  void ensure_activations(int B, int T);
  // forward()'s checks of B, T and the ids (inputs, and targets when not null), then its activations for B x T.
  void check_and_size(const std::int32_t* inputs, const std::int32_t* targets, int B, int T);
  // The layers, from the ids in the activations to the logits.
  void forward_layers();
  // Block l's forward from its input `residual` (B*T*C) to residual3[l], its activations kept at slot(l) (and
  // att_slot(l)); the unit hooks are the caller's.
  void forward_block(int l, const float* residual);
  // Block l's backward, from d residual3[l] in the activations' dresidual to d of its input there; ready_from(offset)
  // hands the gradients from `offset` on to backward()'s GradsReady as they become final.
  void backward_block(int l, const std::function<void(std::size_t)>& ready_from);
  // The last stage's loss, output head and final LayerNorm backward, into the activations' dresidual.
  void head_backward(float loss_scale, const std::function<void(std::size_t)>& ready_from);
  // Sequence parallelism (gpt_sequence.cpp): the block's forward and backward, the embedding's, and their collectives.
  void forward_block_sp(int l, const float* residual);
  void backward_block_sp(int l, const std::function<void(std::size_t)>& ready_from);
  void embed_sp();
  void embed_backward_sp();
  void tp_all_gather(const float* shard, float* whole, std::size_t count, const char* what);
  void tp_reduce_scatter(const float* whole, float* shard, std::size_t count, const char* what);
  void layernorm_gather(MatmulInput& x, int l, float* mean, float* rstd, const float* in, const float* weight,
                        const float* bias, const char* what);
  void layernorm_backward_shard(std::size_t at, const float* dout, const float* in, const float* weight,
                                const float* mean, const float* rstd, const char* what);
  // Where layer l's kept activations are: full recompute keeps one layer's, at 0; selective keeps one layer's
  // attention probabilities.
  int slot(int l) const { return recompute_ == Recompute::full ? 0 : local(l); }
  int att_slot(int l) const { return recompute_ == Recompute::none ? local(l) : 0; }
  void gather(int unit) { if (hooks_.gather) hooks_.gather(unit); }
  void release(int unit) { if (hooks_.release) hooks_.release(unit); }
  // The matrix products of forward and backward in the model's precision: the input activation x (layer l of it)
  // against the weight at `weight` in the parameter buffer.
  float* staging(MatmulInput& x, int l);
  void stage_done(MatmulInput& x, int l, std::size_t count);
  void linear(float* out, const MatmulInput& x, int l, std::size_t weight, const float* bias, int N, int C, int OC);
  void linear_backward(float* dinp, std::size_t weight, float* dbias, const float* dout, const MatmulInput& x,
                       int l, int N, int C, int OC);

  ParamLayout layout_;
  kernels::Backend& backend_;
  std::unique_ptr<BufferSource> own_buffers_;  // the backend's memory, when the constructor was given no buffers
  BufferSource& buffers_;
  kernels::Dtype precision_;
  float* params_ = nullptr;
  float* compute_ = nullptr;  // params_, or its own buffer after read_params_from_working_copy()
  std::uint16_t* params_half_ = nullptr;  // mixed precision's working copy (allocated as floats, two per float)
  float* grads_ = nullptr;
  Recompute recompute_ = Recompute::none;
  float* logits_ = nullptr;
  std::unique_ptr<Activations> acts_;                // the current set's
  std::vector<std::unique_ptr<Activations>> sets_;   // the others (set_ is acts_, moved out)
  int set_ = 0;
  int chunk_ = 0;
  UnitHooks hooks_;
  Communicator* tp_group_ = nullptr;
};

}  // namespace dtrain::trainer
