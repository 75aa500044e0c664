// Fuzz target: a saved `nvidia-smi topo -m` output as `dtrain topo --import FILE` reads it: parse, per-rank
// recommendations, and both renderings. Any input must end in a report or an ImportError.

#include <cstddef>
#include <cstdint>
#include <string>

#include "agent/node/topology/import.h"
#include "agent/node/topology/report.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const auto report = dtrain::node::topo::analyze_import(text);
    (void)dtrain::node::topo::render_text(report);
    (void)dtrain::node::topo::render_json(report);
  } catch (const dtrain::node::topo::ImportError&) {
  }
  return 0;
}
