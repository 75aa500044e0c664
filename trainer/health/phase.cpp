#include "trainer/health/phase.h"

#include <atomic>
#include <mutex>
#include <set>

namespace dtrain::trainer {
namespace {

// Release/acquire: the reader sees the text the pointer names (literals and lasting names never change, so this is
// all it needs).
std::atomic<const char*> phase{"starting"};

}  // namespace

void set_phase(const char* name) { phase.store(name, std::memory_order_release); }

const char* current_phase() { return phase.load(std::memory_order_acquire); }

const char* lasting_phase(const std::string& name) {
  // Never freed: a reader may hold a pointer into it at any time. A std::set's nodes do not move as it grows.
  static std::mutex mutex;
  static auto* names = new std::set<std::string>;
  std::lock_guard<std::mutex> lock(mutex);
  return names->insert(name).first->c_str();
}

std::vector<const char*> numbered_phases(const std::string& what, int count) {
  std::vector<const char*> names;
  for (int i = 0; i < count; ++i) names.push_back(lasting_phase(what + " " + std::to_string(i)));
  return names;
}

}  // namespace dtrain::trainer
