// The launch lines of `dtrain plan` (cli/plan/launch_lines.h): every Megatron-LM argument, torchtitan key and
// DeepSpeed key it emits is one of those the frameworks define, as read from their sources (lists below, with the
// file and version each was read from), and the values are the recommended layout's.

#include <doctest/doctest.h>

#include <set>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/plan/launch_lines.h"
#include "cli/plan/recommend.h"

#pragma GCC diagnostic push   // GCC 12's optional<string> false positive, as in plan_advisor_test.cpp
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace plan_launch_lines_test {

// NVIDIA/Megatron-LM megatron/training/arguments.py, tag core_v0.12.0 (the lines of each add_argument).
const std::set<std::string> kMegatronFlags = {
    "--tensor-model-parallel-size",  // 2036
    "--pipeline-model-parallel-size",  // 2040
    "--num-layers-per-virtual-pipeline-stage",  // 2060
    "--decoder-last-pipeline-num-layers",  // 2053
    "--sequence-parallel",           // 1739
    "--recompute-granularity",       // 1533: full | selective
    "--recompute-method",            // 1554: uniform | block
    "--recompute-num-layers",        // 1563
    "--micro-batch-size",            // 1497
    "--global-batch-size",           // 1504
    "--use-distributed-optimizer",   // 2131
    "--bf16",                        // 1997
    "--fp16",                        // 1995
    "--num-layers",                  // 1224
    "--hidden-size",                 // 1230
    "--num-attention-heads",         // 1235
    "--group-query-attention",       // 1243
    "--num-query-groups",            // 1245
    "--seq-length",                  // 2285
    "--max-position-embeddings",     // 1247
};

// pytorch/torchtitan torchtitan/config/job_config.py, v0.2.0: section -> keys.
const std::set<std::string> kTorchtitanKeys = {
    "parallelism.data_parallel_replicate_degree", "parallelism.data_parallel_shard_degree",
    "parallelism.fsdp_reshard_after_forward",     "parallelism.tensor_parallel_degree",
    "parallelism.pipeline_parallel_degree",       "parallelism.pipeline_parallel_schedule",
    "activation_checkpoint.mode",                 "training.local_batch_size",
    "training.global_batch_size",                 "training.seq_len",
    "training.mixed_precision_param",
};

// deepspeedai/DeepSpeed 0.19.6: runtime/constants.py and runtime/zero/config.py.
const std::set<std::string> kDeepspeedKeys = {
    "train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "zero_optimization.stage",
    "bf16.enabled",     "fp16.enabled",
};

dtrain::plan::PlanReport plan(const std::string& model, int gpus, long long global_batch, const std::string& gpu) {
  dtrain::plan::PlanArgs a;
  a.model = model;
  a.gpus = gpus;
  a.global_batch = global_batch;
  a.gpu = gpu;
  const auto request = dtrain::plan::make_request(a);
  REQUIRE_MESSAGE(request.ok(), request.status.message());
  return dtrain::plan::make_report(request.value);
}

// "section.key" for every `key = value` line of the TOML, by the [section] above it.
std::set<std::string> toml_keys(const std::vector<std::string>& lines) {
  std::set<std::string> keys;
  std::string section;
  for (const std::string& line : lines) {
    if (line.front() == '[') {
      section = line.substr(1, line.size() - 2);
    } else {
      keys.insert(section + "." + line.substr(0, line.find(' ')));
    }
  }
  return keys;
}

void json_keys(const nlohmann::json& object, const std::string& prefix, std::set<std::string>& out) {
  for (const auto& [key, value] : object.items()) {
    if (value.is_object()) {
      json_keys(value, prefix + key + ".", out);
    } else {
      out.insert(prefix + key);
    }
  }
}

std::string value_after(const std::vector<std::string>& args, const std::string& flag) {
  for (std::size_t i = 0; i + 1 < args.size(); ++i) {
    if (args[i] == flag) return args[i + 1];
  }
  return "";
}

TEST_CASE("every emitted name is one the frameworks define; the values are the layout's") {
  for (const auto& [model, gpus, batch, gpu] :
       {std::tuple{"llama2-70b", 64, 1024LL, "h100-sxm"}, std::tuple{"llama3-8b", 16, 256LL, "a100-80gb"},
        std::tuple{"gpt2-124m", 8, 64LL, "a100-40gb"}}) {
    CAPTURE(model);
    const auto report = plan(model, gpus, batch, gpu);
    REQUIRE(report.recommendation.launch.has_value());
    const auto& launch = *report.recommendation.launch;
    const auto& c = *report.recommendation.choice;
    for (const std::string& arg : launch.megatron) {
      if (arg.rfind("--", 0) == 0) CHECK_MESSAGE(kMegatronFlags.count(arg) == 1, arg);
    }
    CHECK(value_after(launch.megatron, "--tensor-model-parallel-size") == std::to_string(c.layout.tp));
    CHECK(value_after(launch.megatron, "--pipeline-model-parallel-size") == std::to_string(c.layout.pp));
    CHECK(value_after(launch.megatron, "--global-batch-size") == std::to_string(c.accumulation.global_batch));
    CHECK(value_after(launch.megatron, "--micro-batch-size") == std::to_string(c.layout.micro_batch));
    for (const std::string& key : toml_keys(launch.torchtitan)) CHECK_MESSAGE(kTorchtitanKeys.count(key) == 1, key);
    std::set<std::string> keys;
    const auto config = nlohmann::json::parse(launch.deepspeed);
    json_keys(config, "", keys);
    for (const std::string& key : keys) CHECK_MESSAGE(kDeepspeedKeys.count(key) == 1, key);
    // DeepSpeed's own check: train_batch_size = micro-batch x accumulation x data-parallel size.
    CHECK(config["train_batch_size"].get<long long>() ==
          config["train_micro_batch_size_per_gpu"].get<long long>() *
              config["gradient_accumulation_steps"].get<long long>() * c.dp);
    CHECK(config["zero_optimization"]["stage"].get<int>() == c.layout.stage);
  }
}

TEST_CASE("recomputation, sequence parallelism and grouped-query attention reach Megatron-LM's line") {
  const auto report = plan("llama2-70b", 64, 1024, "h100-sxm");
  const auto& launch = *report.recommendation.launch;
  const auto& l = report.recommendation.choice->layout;
  const bool sp = std::find(launch.megatron.begin(), launch.megatron.end(), "--sequence-parallel") !=
                  launch.megatron.end();
  CHECK(sp == l.sequence_parallel);
  CHECK(value_after(launch.megatron, "--recompute-granularity") ==
        (l.recompute == dtrain::plan::Recompute::none ? "" : dtrain::plan::recompute_name(l.recompute)));
  CHECK(value_after(launch.megatron, "--num-query-groups") == "8");
  std::ostringstream toml;
  for (const std::string& line : launch.torchtitan) toml << line << "\n";
  CHECK(toml.str().find(std::string("mode = \"") + dtrain::plan::recompute_name(l.recompute) + "\"") !=
        std::string::npos);
}

TEST_CASE("stages that do not divide the layers: Megatron-LM is told what the last one holds") {
  // BLOOM's shape (70 layers) on its 12 stages: 11 of 6 layers, 4 on the last.
  dtrain::plan::PlanArgs a;
  a.params = 176e9;
  a.layers = 70;
  a.hidden = 14336;
  a.heads = 112;
  a.seq_len = 2048;
  a.vocab = 250880;
  a.gpus = 384;
  a.global_batch = 2048;
  a.tp = 4;
  a.pp = 12;
  a.gpu = "a100-80gb";
  a.recompute = "full";
  const auto request = dtrain::plan::make_request(a);
  REQUIRE_MESSAGE(request.ok(), request.status.message());
  const auto report = dtrain::plan::make_report(request.value);
  REQUIRE(report.recommendation.launch.has_value());
  CHECK(value_after(report.recommendation.launch->megatron, "--decoder-last-pipeline-num-layers") == "4");
  CHECK(value_after(report.recommendation.launch->megatron, "--pipeline-model-parallel-size") == "12");
  // An even split (72 layers on the same 12 stages) says nothing of it.
  a.layers = 72;
  const auto even_request = dtrain::plan::make_request(a);
  REQUIRE_MESSAGE(even_request.ok(), even_request.status.message());
  const auto even = dtrain::plan::make_report(even_request.value);
  REQUIRE(even.recommendation.launch.has_value());
  CHECK(value_after(even.recommendation.launch->megatron, "--decoder-last-pipeline-num-layers").empty());
}

}  // namespace plan_launch_lines_test

#pragma GCC diagnostic pop
