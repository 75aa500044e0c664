// Gpt as a pipeline stage (gpt.h): the activation sets of the micro-batches in flight, and the buffers that stages
// exchange.

#include <stdexcept>
#include <string>

#include "trainer/model/activations.h"
#include "trainer/model/gpt.h"

namespace dtrain::trainer {

void Gpt::set_activation_sets(int n) {
  if (n < 1)
    throw std::invalid_argument("Gpt::set_activation_sets: " + std::to_string(n) +
                                " sets; a model keeps at least one micro-batch's activations");
  acts_.reset();
  sets_.clear();
  sets_.resize(static_cast<std::size_t>(n));
  set_ = 0;
  backend_.release(logits_);
  logits_ = nullptr;
}

void Gpt::use_activation_set(int i, int chunk) {
  if (i < 0 || i >= activation_sets())
    throw std::out_of_range("Gpt::use_activation_set: set " + std::to_string(i) + " of " +
                            std::to_string(activation_sets()) + "; set_activation_sets() first");
  if (chunk < 0 || chunk >= layout_.chunks())
    throw std::out_of_range("Gpt::use_activation_set: chunk " + std::to_string(chunk) + " of " +
                            std::to_string(layout_.chunks()));
  chunk_ = chunk;
  if (i == set_) return;
  sets_[static_cast<std::size_t>(set_)] = std::move(acts_);
  acts_ = std::move(sets_[static_cast<std::size_t>(i)]);
  set_ = i;
}

Gpt::Activations& Gpt::current(const char* what) const {
  if (!acts_)
    throw std::logic_error(std::string("Gpt::") + what + ": activation set " + std::to_string(set_) +
                           " holds no micro-batch yet");
  return *acts_;
}

float* Gpt::stage_input(int B, int T) {
  if (B <= 0 || T <= 0 || T > config().max_seq_len)
    throw std::invalid_argument("Gpt::stage_input: batch " + std::to_string(B) + " x " + std::to_string(T) +
                                " is not allowed; B must be positive and T in [1, max_seq_len = " +
                                std::to_string(config().max_seq_len) + "]");
  ensure_activations(B, T);
  return acts_->encoded;
}

const float* Gpt::stage_output() const {
  const Activations& a = current("stage_output");
  return a.residual3 + static_cast<std::size_t>(layout_.chunk_layers() - 1) * stage_floats(a.B, a.T);
}

std::size_t Gpt::chunk_grads_begin() const {
  return chunk_ == 0 ? 0 : layout_.layer(layout_.chunk_first_layer(chunk_)).offset;
}

std::size_t Gpt::chunk_grads_end() const {
  return chunk_ == layout_.chunks() - 1 ? buffer_size() : layout_.layer(layout_.chunk_first_layer(chunk_ + 1)).offset;
}

float* Gpt::stage_output_grad() { return current("stage_output_grad").dresidual; }

const float* Gpt::stage_input_grad() const { return current("stage_input_grad").dresidual; }

}  // namespace dtrain::trainer
