// The tune overlay (cli/tune/overlay.h): what it reads, what it refuses and how it says so, DTRAIN_TUNE's JSON, and
// the checks against the job it is put into.

#include <doctest/doctest.h>

#include <string>

#include "cli/tune/overlay.h"

namespace tune_overlay_test {

using dtrain::spec::SpecError;
using dtrain::tune::Overlay;
using dtrain::tune::parse_overlay;

// The message of the SpecError that reading `yaml` throws; "" when it reads.
std::string refusal(const std::string& yaml) {
  try {
    parse_overlay(yaml, "tune.yaml");
  } catch (const SpecError& e) {
    return e.what();
  }
  return "";
}

bool says(const std::string& yaml, const std::string& part) {
  const std::string message = refusal(yaml);
  INFO(message);
  return message.find(part) != std::string::npos;
}

TEST_CASE("tune overlay: every knob is read into its field") {
  const Overlay o = parse_overlay(
      "tune:\n"
      "  dataloader: {num_workers: 4, pin_memory: true, prefetch_factor: 2, persistent_workers: false}\n"
      "  ddp: {bucket_cap_mb: 12.5, gradient_as_bucket_view: true}\n"
      "  threads: {intra_op: 2}\n"
      "  env: {NCCL_ALGO: Ring, PYTORCH_CUDA_ALLOC_CONF: 'expandable_segments:True'}\n"
      "  allow_numerics: false\n"
      "  numerics: {}\n",
      "tune.yaml");
  CHECK(o.dataloader.num_workers == 4);
  CHECK(o.dataloader.pin_memory == true);
  CHECK(o.dataloader.prefetch_factor == 2);
  CHECK(o.dataloader.persistent_workers == false);
  CHECK(o.ddp.bucket_cap_mb == 12.5);
  CHECK(o.ddp.gradient_as_bucket_view == true);
  CHECK(o.intra_op_threads == 2);
  CHECK(o.env.at("NCCL_ALGO") == "Ring");
  CHECK(o.env.at("PYTORCH_CUDA_ALLOC_CONF") == "expandable_segments:True");
  CHECK_FALSE(o.allow_numerics);
  CHECK(dtrain::tune::python_knobs_json(o) ==
        "{\"file\":\"tune.yaml\",\"dataloader\":{\"num_workers\":4,\"pin_memory\":true,\"prefetch_factor\":2,"
        "\"persistent_workers\":false},\"ddp\":{\"bucket_cap_mb\":12.5,\"gradient_as_bucket_view\":true},"
        "\"threads\":{\"intra_op\":2}}");
}

TEST_CASE("tune overlay: what is not written stays unset") {
  const Overlay o = parse_overlay("tune:\n  ddp: {bucket_cap_mb: 25}\n", "dir/my tune\".yaml");
  CHECK_FALSE(o.dataloader.num_workers);
  CHECK_FALSE(o.intra_op_threads);
  CHECK(o.env.empty());
  CHECK(dtrain::tune::has_python_knobs(o));
  CHECK(dtrain::tune::python_knobs_json(o) == "{\"file\":\"my tune\\\".yaml\",\"ddp\":{\"bucket_cap_mb\":25}}");
  CHECK_FALSE(dtrain::tune::has_python_knobs(parse_overlay("tune:\n", "t.yaml")));
}

TEST_CASE("tune overlay: unknown keys name the file, line, key and what is accepted") {
  CHECK(says("tune:\n  dataloader: {num_worker: 2}\n",
             "tune.yaml:2:16: tune.dataloader.num_worker: unknown key. Accepted keys under tune.dataloader: "
             "num_workers, pin_memory, prefetch_factor, persistent_workers."));
  CHECK(says("tune:\n  optimizer: {}\n", "tune.optimizer: unknown key. Accepted keys under tune: dataloader, ddp"));
  CHECK(says("tuning:\n  threads: {intra_op: 1}\n", "tuning: unknown key."));
  CHECK(says("", "tune: missing"));
  CHECK(says("tune:\n  threads: {intra_op: 1}\n  threads: {intra_op: 2}\n", "tune.threads: repeated key"));
  CHECK(says("tune: [1]\n", "tune: expected a mapping, got a list."));
}

TEST_CASE("tune overlay: values of the wrong type or out of range are refused") {
  CHECK(says("tune:\n  dataloader: {pin_memory: yes}\n", "invalid value 'yes'. Accepted: true or false."));
  CHECK(says("tune:\n  dataloader: {num_workers: -1}\n", "Accepted: a whole number from 0 to 256."));
  CHECK(says("tune:\n  dataloader: {num_workers: 2.5}\n", "tune.dataloader.num_workers: invalid value '2.5'"));
  CHECK(says("tune:\n  dataloader: {prefetch_factor: 0}\n", "Accepted: a whole number from 1 to 1024."));
  CHECK(says("tune:\n  ddp: {bucket_cap_mb: 0}\n", "Accepted: a number above 0, at most 65536."));
  CHECK(says("tune:\n  ddp: {bucket_cap_mb: nan}\n", "tune.ddp.bucket_cap_mb: invalid value 'nan'"));
  CHECK(says("tune:\n  threads: {intra_op: [2]}\n", "tune.threads.intra_op: invalid value a list."));
  CHECK(says("tune:\n  allow_numerics: 1\n", "tune.allow_numerics: invalid value '1'"));
  // Every problem at once.
  const std::string both = refusal("tune:\n  dataloader: {num_workers: x, pin_memory: 2}\n");
  CHECK(both.find("num_workers") != std::string::npos);
  CHECK(both.find("pin_memory") != std::string::npos);
}

TEST_CASE("tune overlay: env takes NCCL_* and PYTORCH_CUDA_ALLOC_CONF only") {
  CHECK(dtrain::tune::env_allowed("NCCL_ALGO"));
  CHECK(dtrain::tune::env_allowed("PYTORCH_CUDA_ALLOC_CONF"));
  CHECK_FALSE(dtrain::tune::env_allowed("NCCL_"));
  CHECK_FALSE(dtrain::tune::env_allowed("NCCL_A-B"));
  CHECK_FALSE(dtrain::tune::env_allowed("OMP_NUM_THREADS"));
  CHECK(says("tune:\n  env: {LD_PRELOAD: x.so}\n", "tune.env.LD_PRELOAD: not a variable a tune overlay may set."));
  CHECK(says("tune:\n  env: {NCCL_ALGO: [Ring]}\n", "tune.env.NCCL_ALGO: invalid value a list."));
  CHECK(says("tune:\n  env: [NCCL_ALGO]\n", "tune.env: expected a mapping"));
}

TEST_CASE("tune overlay: numerics knobs are refused, with or without allow_numerics") {
  CHECK(says("tune:\n  numerics: {tf32: true}\n", "tune.numerics.tf32: changes the numbers"));
  CHECK(says("tune:\n  numerics: {tf32: true}\n  allow_numerics: true\n",
             "tune.numerics.tf32: no numerics knob is implemented yet."));
  CHECK(parse_overlay("tune:\n  allow_numerics: true\n  numerics:\n", "t.yaml").allow_numerics);
}

TEST_CASE("tune overlay: not YAML, or more than one document") {
  CHECK(says("tune: {dataloader: [\n", "invalid YAML"));
  CHECK(says("tune: {}\n---\ntune: {}\n", "one YAML document"));
  CHECK(says(",", "tune.yaml"));
}

TEST_CASE("tune overlay: put into a job") {
  dtrain::spec::Spec spec;
  spec.command = {"python3", "train.py"};
  spec.env["NCCL_ALGO"] = "Tree";
  const Overlay o = parse_overlay("tune:\n  threads: {intra_op: 2}\n  env: {NCCL_ALGO: Ring}\n", "tune.yaml");
  dtrain::tune::apply_overlay(o, spec);
  CHECK(spec.tune_env.at("DTRAIN_TUNE") == "{\"file\":\"tune.yaml\",\"threads\":{\"intra_op\":2}}");
  CHECK(spec.tune_env.at("NCCL_ALGO") == "Ring");

  dtrain::spec::Spec off = spec;
  off.health.instrument = dtrain::spec::Spec::Health::Instrument::off;
  CHECK_THROWS_WITH_AS(dtrain::tune::apply_overlay(o, off), doctest::Contains("health.instrument: off"), SpecError);

  dtrain::spec::Spec trainer = spec;
  trainer.command = {"dtrain-trainer", "--steps", "10"};
  CHECK_THROWS_WITH_AS(dtrain::tune::apply_overlay(o, trainer), doctest::Contains("dtrain-trainer"), SpecError);

  // env knobs alone need neither the bootstrap nor Python.
  trainer.tune_env.clear();
  dtrain::tune::apply_overlay(parse_overlay("tune:\n  env: {NCCL_ALGO: Ring}\n", "tune.yaml"), trainer);
  CHECK(trainer.tune_env.size() == 1);
  CHECK(trainer.tune_env.at("NCCL_ALGO") == "Ring");

  // binding, for any program: the job's binding.
  CHECK(trainer.binding == dtrain::spec::Binding::automatic);
  dtrain::tune::apply_overlay(parse_overlay("tune:\n  binding: none\n", "tune.yaml"), trainer);
  CHECK(trainer.binding == dtrain::spec::Binding::none);
  CHECK(says("tune:\n  binding: all\n", "tune.binding"));
}

}  // namespace tune_overlay_test
