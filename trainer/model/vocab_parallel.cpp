#include "trainer/model/vocab_parallel.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <vector>

#include "trainer/metrics/comm_time.h"

namespace dtrain::trainer {
namespace {

bool in_slice(std::int32_t token, const VocabSlice& s) { return token >= s.start && token < s.start + s.count; }

// Columns of this slice below V (the rest is padding).
int real_columns(const VocabSlice& s) { return std::clamp(s.vocab - s.start, 0, s.count); }

}  // namespace

void slice_embedding_forward(float* out, const std::int32_t* tokens, const float* wte_slice, const float* wpe, int B,
                             int T, int C, const VocabSlice& slice) {
  const std::size_t N = static_cast<std::size_t>(B) * T, width = static_cast<std::size_t>(C);
  for (std::size_t n = 0; n < N; ++n) {
    float* row = out + n * width;
    const float* position = wpe != nullptr ? wpe + (n % static_cast<std::size_t>(T)) * width : nullptr;
    const bool mine = in_slice(tokens[n], slice);
    const float* word = mine ? wte_slice + static_cast<std::size_t>(tokens[n] - slice.start) * width : nullptr;
    for (std::size_t c = 0; c < width; ++c) row[c] = (word ? word[c] : 0.0f) + (position ? position[c] : 0.0f);
  }
}

void slice_embedding_backward(float* dwte_slice, float* dwpe, const float* dout, const std::int32_t* tokens, int B,
                              int T, int C, const VocabSlice& slice) {
  const std::size_t N = static_cast<std::size_t>(B) * T, width = static_cast<std::size_t>(C);
  for (std::size_t n = 0; n < N; ++n) {
    const float* d = dout + n * width;
    if (in_slice(tokens[n], slice)) {
      float* word = dwte_slice + static_cast<std::size_t>(tokens[n] - slice.start) * width;
      for (std::size_t c = 0; c < width; ++c) word[c] += d[c];
    }
    if (dwpe != nullptr) {
      float* position = dwpe + (n % static_cast<std::size_t>(T)) * width;
      for (std::size_t c = 0; c < width; ++c) position[c] += d[c];
    }
  }
}

float vocab_parallel_crossentropy_forward(Communicator& group, float* probs, float* losses, const float* logits,
                                          const std::int32_t* targets, int N, const VocabSlice& slice) {
  const std::size_t rows = static_cast<std::size_t>(N), width = static_cast<std::size_t>(slice.count);
  const int real = real_columns(slice);
  const int W = group.size();
  // Each row's maximum over the whole vocabulary: this rank's, all-gathered, then the largest.
  std::vector<float> maxima(rows * static_cast<std::size_t>(W), -std::numeric_limits<float>::infinity());
  float* own = maxima.data() + static_cast<std::size_t>(group.rank()) * rows;
  for (std::size_t n = 0; n < rows; ++n)
    for (int v = 0; v < real; ++v) own[n] = std::max(own[n], logits[n * width + v]);
  if (W > 1) wait_collective(*group.all_gather(own, maxima.data(), rows), "tp-all-gather (the logits' row maxima)");
  std::vector<float> row_max(rows, -std::numeric_limits<float>::infinity());
  for (int r = 0; r < W; ++r)
    for (std::size_t n = 0; n < rows; ++n) row_max[n] = std::max(row_max[n], maxima[r * rows + n]);
  // Each row's sum of exponentials and its target's logit (0 here unless this rank holds the target's column).
  std::vector<float> sums(2 * rows, 0.0f);
  for (std::size_t n = 0; n < rows; ++n) {
    const float* x = logits + n * width;
    float* p = probs + n * width;
    float sum = 0.0f;
    for (int v = 0; v < real; ++v) sum += (p[v] = std::exp(x[v] - row_max[n]));
    for (std::size_t v = static_cast<std::size_t>(real); v < width; ++v) p[v] = 0.0f;
    sums[n] = sum;
    if (in_slice(targets[n], slice)) sums[rows + n] = x[targets[n] - slice.start] - row_max[n];
  }
  if (W > 1) wait_collective(*group.allreduce(sums.data(), sums.size()), "tp-allreduce (the softmax's sums)");
  double total = 0;
  for (std::size_t n = 0; n < rows; ++n) {
    const float inv = 1.0f / sums[n];
    for (int v = 0; v < real; ++v) probs[n * width + v] *= inv;
    losses[n] = std::log(sums[n]) - sums[rows + n];
    total += losses[n];
  }
  return static_cast<float>(total / static_cast<double>(rows));
}

void vocab_parallel_crossentropy_backward(float* dlogits, const float* probs, const std::int32_t* targets,
                                          float dloss, int N, const VocabSlice& slice) {
  const std::size_t rows = static_cast<std::size_t>(N), width = static_cast<std::size_t>(slice.count);
  const int real = real_columns(slice);
  for (std::size_t n = 0; n < rows; ++n) {
    float* d = dlogits + n * width;
    const float* p = probs + n * width;
    for (int v = 0; v < real; ++v) d[v] = p[v] * dloss;
    for (std::size_t v = static_cast<std::size_t>(real); v < width; ++v) d[v] = 0.0f;
    if (in_slice(targets[n], slice)) d[targets[n] - slice.start] -= dloss;
  }
}

}  // namespace dtrain::trainer
