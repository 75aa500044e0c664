// Tensor-parallel slices of the parameter layout (trainer/model/layout.h, TensorParallel): each rank's slice of the
// split tensors is Megatron-LM's (its heads' rows of q, k and v; column slices of the row-parallel weights; row
// slices of the column-parallel ones and of wte), every element of a split tensor is held by exactly one rank, the
// replicated tensors by all, and the whole model's checkpoint order goes to the slices and back unchanged. Size 1
// is the layout without tensor parallelism.
#include <doctest/doctest.h>

#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

#include "trainer/model/layout.h"

using namespace dtrain::trainer;

namespace trainer_model_tp_layout_test {

// maxT 16, V 250 (Vp 256), L 2, NH 4, C 32.
GptConfig config() { return GptConfig{16, 250, 256, 2, 4, 32}; }

// The whole model in checkpoint order, each value its own index.
std::vector<float> whole_model() {
  std::vector<float> whole(ParamLayout(config()).num_params());
  for (std::size_t i = 0; i < whole.size(); ++i) whole[i] = static_cast<float>(i);
  return whole;
}

const TensorInfo& tensor(const ParamLayout& layout, const std::string& name, int layer) {
  for (const TensorInfo& t : layout.checkpoint_tensors())
    if (t.name == name && t.layer == layer) return t;
  throw std::logic_error("no tensor " + name);
}

// Element (i, j) of rank's slice of a 2-D tensor, and of the whole tensor, as floats of the whole model.
float local_at(const ParamLayout& layout, const std::vector<float>& ours, const std::string& name, int i, int j) {
  const TensorInfo& t = tensor(layout, name, 1);
  return ours[t.offset + static_cast<std::size_t>(i) * (t.shape.size() > 1 ? t.shape[1] : 1) + j];
}
float whole_at(const ParamLayout& layout, const std::string& name, int i, int j) {
  const TensorInfo& t = tensor(layout, name, 1);
  const std::size_t row = t.full_shape.size() > 1 ? static_cast<std::size_t>(t.full_shape[1]) : 1;
  return static_cast<float>(t.full_at + static_cast<std::size_t>(i) * row + j);
}

TEST_CASE("without tensor parallelism the slices are the whole tensors, in the same places") {
  const ParamLayout layout(config());
  const std::vector<float> whole = whole_model();
  std::vector<float> ours(layout.num_params()), reordered(layout.num_params());
  layout.take_slices(whole.data(), ours.data());
  layout.from_checkpoint_order(whole.data(), reordered.data());
  CHECK(ours == reordered);
  for (const TensorInfo& t : layout.checkpoint_tensors()) CHECK(t.replicated);
}

TEST_CASE("each rank holds Megatron-LM's slice: its heads of q, k and v, its columns, its rows of wte") {
  const std::vector<float> whole = whole_model();
  const int C = 32, Vp = 256;
  for (int T : {2, 4}) {
    for (int r = 0; r < T; ++r) {
      INFO("T=" << T << " rank " << r);
      const ParamLayout layout(config(), 1, {T, r});
      std::vector<float> ours(layout.num_params());
      layout.take_slices(whole.data(), ours.data());
      const int c = C / T;
      CHECK(tensor(layout, "qkvw", 1).shape == std::vector<int>{3 * c, C});
      for (int part = 0; part < 3; ++part)  // q, k, v: this rank's heads' rows of each
        CHECK(local_at(layout, ours, "qkvw", part * c + 1, 5) == whole_at(layout, "qkvw", part * C + r * c + 1, 5));
      CHECK(local_at(layout, ours, "qkvb", 2 * c, 0) == whole_at(layout, "qkvb", 2 * C + r * c, 0));
      CHECK(tensor(layout, "attprojw", 1).shape == std::vector<int>{C, c});
      CHECK(local_at(layout, ours, "attprojw", 7, 2) == whole_at(layout, "attprojw", 7, r * c + 2));
      CHECK(local_at(layout, ours, "fcw", 3, 9) == whole_at(layout, "fcw", r * 4 * c + 3, 9));
      CHECK(local_at(layout, ours, "fcprojw", 6, 4 * c - 1) == whole_at(layout, "fcprojw", 6, r * 4 * c + 4 * c - 1));
      const TensorInfo& wte = tensor(layout, "wte", -1);
      CHECK(wte.shape == std::vector<int>{Vp / T, C});
      CHECK(ours[wte.offset + C + 3] == static_cast<float>((r * Vp / T + 1) * C + 3));
      CHECK(tensor(layout, "attprojb", 1).replicated);
      CHECK(!tensor(layout, "fcb", 1).replicated);
    }
  }
}

TEST_CASE("every element of a split tensor is on exactly one rank; the slices put back give the whole model") {
  const std::vector<float> whole = whole_model();
  for (int T : {2, 4}) {
    INFO("T=" << T);
    std::vector<float> rebuilt(whole.size(), -1.0f);
    std::vector<int> holders(whole.size(), 0);
    std::size_t local_total = 0, replicated = 0;
    for (int r = 0; r < T; ++r) {
      const ParamLayout layout(config(), 1, {T, r});
      std::vector<float> ours(layout.num_params());
      layout.take_slices(whole.data(), ours.data());
      layout.put_slices(ours.data(), rebuilt.data());
      local_total += layout.num_params();
      for (const TensorInfo& t : layout.checkpoint_tensors()) {
        if (t.replicated) {
          if (r == 0) replicated += t.count;
          continue;
        }
        for (const SlicePiece& p : t.pieces)
          for (std::size_t k = 0; k < p.count; ++k) ++holders[t.full_at + p.full + k];
      }
    }
    CHECK(rebuilt == whole);
    CHECK(local_total == whole.size() + (T - 1) * replicated);
    std::size_t wrong = 0;
    const ParamLayout first(config(), 1, {T, 0});
    for (const TensorInfo& t : first.checkpoint_tensors()) {
      if (t.replicated) continue;
      std::size_t whole_count = 1;
      for (int d : t.full_shape) whole_count *= static_cast<std::size_t>(d);
      for (std::size_t k = 0; k < whole_count; ++k) wrong += holders[t.full_at + k] != 1;
    }
    CHECK(wrong == 0);
  }
}

TEST_CASE("heads or a vocabulary that do not divide by the tensor-parallel size are refused with the numbers") {
  try {
    ParamLayout(config(), 1, {3, 0});
    FAIL("3 ranks over 4 heads were accepted");
  } catch (const std::invalid_argument& e) {
    CHECK(std::string(e.what()).find("4 heads") != std::string::npos);
    CHECK(std::string(e.what()).find("size 3") != std::string::npos);
  }
  CHECK_THROWS_AS(ParamLayout(config(), 1, {2, 2}), std::invalid_argument);
}

}  // namespace trainer_model_tp_layout_test
