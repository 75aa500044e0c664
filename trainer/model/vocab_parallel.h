#pragma once

// Vocabulary parallelism over a tensor-parallel group (Megatron-LM's VocabParallelEmbedding and
// vocab_parallel_cross_entropy; Shoeybi et al. 2019, section 3): each of the group's T ranks holds rows
// [start, start + count) of the embedding wte (Vp/T of them; layout.h's TensorParallel), so the tied output head
// gives it only those columns of the logits, and no rank ever holds a full row of logits.
//   embedding: each rank looks up the tokens of its rows (0 for the others) and one rank adds wpe; the caller's
//              allreduce of `out` over the group then gives every rank wte[token] + wpe.
//   loss:      the row maxima are all-gathered (the communicator has no max reduction: N floats per rank), then one
//              allreduce of 2N floats sums each row's exp(logit - max) and the target's logit (from the rank whose
//              rows hold it): loss = log(sum) + max - logit[target], on every rank.
// Padded columns (token ids >= V, which exist only to round Vp up) take no part in the softmax, as in the unsplit
// model. Host memory (the CPU backend) for now; a device backend needs kernels for them.

#include <cstdint>

#include "trainer/comm/communicator.h"

namespace dtrain::trainer {

struct VocabSlice {
  int start = 0;   // this rank's first row of wte (a token id)
  int count = 0;   // rows it holds: Vp / T
  int vocab = 0;   // V: ids at or above it are padding
};

// out (B*T, C) = wte_slice[token - start] for the tokens of this slice, else 0; plus wpe[n % T] when wpe is not null.
void slice_embedding_forward(float* out, const std::int32_t* tokens, const float* wte_slice, const float* wpe, int B,
                             int T, int C, const VocabSlice& slice);
// dwte_slice[token - start] += dout for the tokens of this slice; dwpe[n % T] += dout when dwpe is not null.
void slice_embedding_backward(float* dwte_slice, float* dwpe, const float* dout, const std::int32_t* tokens, int B,
                              int T, int C, const VocabSlice& slice);

// logits (N, count): this rank's columns. probs (N, count) = the softmax over the whole vocabulary, of these columns
// (0 for padded ones); losses (N); returns the mean loss, the same on every rank of `group`. Collective: every rank
// of the group calls it with the same N.
float vocab_parallel_crossentropy_forward(Communicator& group, float* probs, float* losses, const float* logits,
                                          const std::int32_t* targets, int N, const VocabSlice& slice);
// dlogits (N, count) = dloss * (probs - onehot(target)) on this rank's columns; may alias probs.
void vocab_parallel_crossentropy_backward(float* dlogits, const float* probs, const std::int32_t* targets,
                                          float dloss, int N, const VocabSlice& slice);

}  // namespace dtrain::trainer
