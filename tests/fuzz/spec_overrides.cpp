// Fuzz target: `--set key.path=value` overrides, one per input line, applied to a valid spec (the path checked
// against the schema, the value parsed as YAML, sections created as needed), then the plan of what loaded.

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "cli/spec/spec.h"
#include "tests/fuzz/fuzz_support.h"

namespace {

constexpr std::string_view kBase = R"(name: tiny-gpt
nodes: {provider: local, count: 2}
workers_per_node: 2
command: [dtrain-trainer, --model, tiny]
env: {FOO: bar}
restart: {max_restarts: 1, backoff_s: 1}
stop: {grace_s: 5}
logs: {dir: runs, console: [0, 1]}
nccl: {auto: true, env: {NCCL_DEBUG: INFO}}
)";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto overrides = dtrain::fuzz::lines_of(std::string_view(reinterpret_cast<const char*>(data), size));
  try {
    const auto spec = dtrain::spec::load_spec_string(kBase, "job.yaml", overrides);
    dtrain::fuzz::plan_and_render(spec);
  } catch (const dtrain::spec::SpecError& e) {
    if (e.diagnostics.empty()) __builtin_trap();
    (void)e.what();
  }
  return 0;
}
