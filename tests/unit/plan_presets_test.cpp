// `dtrain plan --model`'s presets (cli/plan/presets.h) against the published parameter counts, and the request they
// make.

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <string>
#include <vector>

#include "cli/plan/presets.h"
#include "cli/plan/recommend.h"
#include "cli/plan/request.h"
#include "cli/plan/trainer_model.h"
#include "tests/unit/contains.h"

// GCC 12 reports a std::optional<std::string> assigned a literal as maybe used uninitialized (a known false
// positive of its optional<string> inlining); PlanArgs is that, field by field.
#pragma GCC diagnostic push   // popped at the end of the file (unity builds join files)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

using namespace dtrain::plan;

namespace {

// Published totals: GPT-2's as Hugging Face's GPT2LMHeadModel counts them (tied head, V = 50,257); Llama's as
// LlamaForCausalLM counts its parameters (the -hf checkpoints' safetensors also hold 64 rotary inverse frequencies
// per layer, a buffer: Llama-2-13b-hf's metadata says 13,015,866,880 = 13,015,864,320 + 40 x 64).
struct Published {
  const char* name;
  double params;
};
constexpr Published kPublished[] = {
    {"gpt2-124m", 124439808},      {"gpt2-355m", 354823168},       {"gpt2-774m", 774030080},
    {"gpt2-1.5b", 1557611200},     {"llama2-7b", 6738415616},      {"llama2-13b", 13015864320},
    {"llama2-70b", 68976648192},   {"llama3-8b", 8030261248},      {"llama3-70b", 70553706496},
};

// GPT-2 as published: wte Vh + wpe Sh + L (12h^2 + 13h) + final LayerNorm 2h, with V = 50,257.
double gpt2_published_layout(const ModelPreset& p) {
  const double h = p.hidden;
  return static_cast<double>(p.vocab) * h + static_cast<double>(p.seq_len) * h + p.layers * (12 * h * h + 13 * h) +
         2 * h;
}

std::string preset_refusal(const PlanArgs& args) {
  const auto r = make_request(args);
  CHECK_FALSE(r.ok());
  return r.status.message();
}

}  // namespace

TEST_CASE("presets: every published model's parameters within 1% of its published total") {
  for (const Published& published : kPublished) {
    CAPTURE(published.name);
    const ModelPreset* p = find_preset(published.name);
    REQUIRE(p != nullptr);
    const double counted = preset_params(*p);
    CHECK(std::abs(counted - published.params) / published.params < 0.01);
    if (p->family == Family::llama) {
      // Exact: grouped-query k/v, three SwiGLU matrices, an untied head, RMSNorm weights, no biases.
      CHECK(counted == published.params);
    } else {
      // The published layout exactly, plus the 47 rows llm.c pads the vocabulary with (50,304 - 50,257).
      CHECK(gpt2_published_layout(*p) == published.params);
      CHECK(counted == published.params + 47.0 * p->hidden);
    }
  }
  // Every preset but the trainer's test model is published.
  CHECK(model_presets().size() == std::size(kPublished) + 1);
}

TEST_CASE("presets: Llama counts grouped-query attention and SwiGLU, not GPT-2's layer") {
  const ModelPreset& l70 = *find_preset("llama2-70b");
  CHECK(l70.kv_heads == 8);
  // Per layer: q and o 2 x 8192^2, k and v 2 x 8192 x (8 x 128), gate/up/down 3 x 8192 x 28672, two norms 2 x 8192.
  const double layer = 2.0 * 8192 * 8192 + 2.0 * 8192 * 1024 + 3.0 * 8192 * 28672 + 2 * 8192;
  CHECK(layer == 855654400);
  CHECK(llama_params(l70) == 2.0 * 32000 * 8192 + 80 * layer + 8192);
  // Full multi-head attention instead would be 80 x 2 x 8192 x 7168 more parameters.
  ModelPreset mha = l70;
  mha.kv_heads = mha.heads;
  CHECK(llama_params(mha) - llama_params(l70) == 80 * 2.0 * 8192 * 7168);
  CHECK_FALSE(preset_trainer_config(l70).has_value());
}

TEST_CASE("presets: dtrain-trainer's own presets are the trainer's configs") {
  for (const char* name : {"tiny", "gpt2-124m"}) {
    CAPTURE(name);
    const auto ours = preset_trainer_config(*find_preset(name));
    const auto trainer = dtrain::trainer::GptConfig::preset(name);
    REQUIRE(ours.has_value());
    CHECK(ours->describe() == trainer.describe());
    CHECK(find_preset(name)->trainer_name);
  }
  CHECK(preset_params(*find_preset("gpt2-124m")) == 124475904);
  CHECK_FALSE(find_preset("gpt2-355m")->trainer_name);
}

TEST_CASE("presets: a request for a Llama gets its size and shape and no dtrain-trainer flags") {
  PlanArgs a;
  a.model = "llama3-8b";
  a.gpus = 64;
  a.seq_len = 2048;
  const auto r = make_request(a);
  REQUIRE_MESSAGE(r.ok(), r.status.message());
  CHECK(r.value.workload.params == 8030261248);
  REQUIRE(r.value.workload.shape.has_value());
  CHECK(r.value.workload.shape->seq_len == 2048);
  a.seq_len.reset();
  CHECK(make_request(a).value.workload.shape->seq_len == 8192);
  CHECK(r.value.workload.shape->layers == 32);
  CHECK_FALSE(r.value.workload.trainer.has_value());
  const PlanReport report = make_report(r.value);
  REQUIRE(report.recommendation.choice.has_value());
  CHECK(report.recommendation.choice->layout.tp * report.recommendation.choice->layout.pp == 1);
  CHECK(report.recommendation.trainer_args.empty());
  CHECK(contains(report.recommendation.spec_lines.back(), "dtrain-trainer runs GPT-2 only: run llama3-8b"));
  a.trainer_accounting = true;
  CHECK(contains(preset_refusal(a), "--trainer-accounting needs dtrain-trainer's model"));
  a.trainer_accounting = false;
  a.seq_len = 8193;
  CHECK(contains(preset_refusal(a), "--seq-len 8193 is longer than llama3-8b's 8192 positions"));
}

TEST_CASE("presets: a GPT-2 the trainer has no name for gets its shape flags") {
  PlanArgs a;
  a.model = "gpt2-355m";
  a.gpus = 8;
  a.trainer_accounting = true;
  const auto r = make_request(a);
  REQUIRE_MESSAGE(r.ok(), r.status.message());
  const PlanReport report = make_report(r.value);
  REQUIRE(report.recommendation.choice.has_value());
  const auto& args = report.recommendation.trainer_args;
  REQUIRE(args.size() >= 10);
  CHECK(std::vector<std::string>(args.begin(), args.begin() + 10) ==
        std::vector<std::string>{"--layers", "24", "--channels", "1024", "--heads", "16", "--max-seq-len", "1024",
                                 "--vocab", "50257"});
  CHECK(report.strategies[1].trainer.has_value());
}

TEST_CASE("presets: a recomputing layout tells dtrain-trainer to recompute, and its activations shrink") {
  PlanArgs a;
  a.model = "gpt2-124m";
  a.gpus = 1;
  a.trainer_accounting = true;
  std::vector<double> activations;
  for (const char* recompute : {"none", "selective", "full"}) {
    a.recompute = recompute;
    const auto r = make_request(a);
    REQUIRE_MESSAGE(r.ok(), r.status.message());
    const PlanReport report = make_report(r.value);
    REQUIRE(report.recommendation.choice.has_value());
    const auto& args = report.recommendation.trainer_args;
    const auto flag = std::find(args.begin(), args.end(), "--recompute");
    if (std::string(recompute) == "none") {
      CHECK(flag == args.end());
    } else {
      REQUIRE(flag != args.end());
      CHECK(*(flag + 1) == recompute);
    }
    REQUIRE(report.recommendation.choice->trainer_activations.has_value());
    activations.push_back(*report.recommendation.choice->trainer_activations);
  }
  CHECK(activations[0] > activations[1]);
  CHECK(activations[1] > activations[2]);
}

TEST_CASE("presets: tensor parallelism splits whole key/value heads") {
  PlanArgs a;
  a.model = "llama2-70b";  // 64 query heads in 8 key/value groups
  a.gpus = 64;
  a.gpus_per_node = 16;
  a.tp = 16;
  CHECK(contains(preset_refusal(a), "--tp 16 does not divide the 8 key/value heads"));
  a.tp.reset();
  const auto r = make_request(a);
  REQUIRE_MESSAGE(r.ok(), r.status.message());
  CHECK(r.value.workload.shape->kv_heads == 8);
  const PlanReport report = make_report(r.value);
  REQUIRE_FALSE(report.search.empty());
  for (const Evaluation& e : report.search) CHECK(e.layout.tp <= 8);
}

TEST_CASE("presets: a wrong name is refused with every known one") {
  PlanArgs a;
  a.model = "llama2-8b";
  a.gpus = 8;
  const std::string message = preset_refusal(a);
  CHECK(contains(message, "--model: unknown model preset 'llama2-8b'; known presets: "));
  for (const ModelPreset& p : model_presets()) {
    CAPTURE(p.name);
    CHECK(contains(message, p.name));
  }
  CHECK(preset_names() == "tiny, gpt2-124m, gpt2-355m, gpt2-774m, gpt2-1.5b, llama2-7b, llama2-13b, llama2-70b, "
                          "llama3-8b, llama3-70b");
}

#pragma GCC diagnostic pop
