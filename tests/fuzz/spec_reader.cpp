// Fuzz target: a job spec file as `dtrain validate` / `dtrain launch` read it (YAML parse, schema, values), then,
// for a spec that loads, the plan and the dry-run text. Any input must end in a Spec or a SpecError.

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "cli/spec/spec.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const auto spec = dtrain::spec::load_spec_string(text, "fuzz.yaml", {});
    dtrain::fuzz::plan_and_render(spec);
  } catch (const dtrain::spec::SpecError& e) {
    if (e.diagnostics.empty()) __builtin_trap();  // an error must say what is wrong
    (void)e.what();
  }
  return 0;
}
