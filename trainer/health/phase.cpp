#include "trainer/health/phase.h"

#include <atomic>

namespace dtrain::trainer {
namespace {

// Release/acquire: the reader sees the literal the pointer names (literals are constant, so this is all it needs).
std::atomic<const char*> phase{"starting"};

}  // namespace

void set_phase(const char* name) { phase.store(name, std::memory_order_release); }

const char* current_phase() { return phase.load(std::memory_order_acquire); }

}  // namespace dtrain::trainer
