#include "trainer/comm/communicator.h"

#include <charconv>
#include <cstdlib>
#include <string>
#include <string_view>

#include "trainer/comm/gloo/communicator.h"
#include "trainer/comm/local/communicator.h"

namespace dtrain::trainer {
namespace {

// The integer value of an environment variable, or `fallback` when it is unset.
int env_int(const char* name, int fallback) {
  const char* raw = std::getenv(name);
  if (raw == nullptr) return fallback;
  std::string_view text(raw);
  int value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || error != std::errc() || end != text.data() + text.size()) {
    throw CommError(std::string(name) + "='" + std::string(text) +
                    "' is not an integer; the launcher (dtrain run/launch, torchrun) sets it for every worker");
  }
  return value;
}

}  // namespace

std::unique_ptr<Communicator> make_communicator_from_env(const CommOptions& options) {
  const int world = env_int("WORLD_SIZE", 1);
  if (world < 1) {
    throw CommError("WORLD_SIZE=" + std::to_string(world) + " must be at least 1");
  }
  if (world == 1) return std::make_unique<LocalCommunicator>();
  if (std::getenv("RANK") == nullptr) {
    throw CommError("RANK is not set but WORLD_SIZE=" + std::to_string(world) +
                    "; start workers with dtrain run/launch (or torchrun), which set both");
  }
  const int rank = env_int("RANK", 0);
  if (rank < 0 || rank >= world) {
    throw CommError("RANK=" + std::to_string(rank) + " is outside [0, WORLD_SIZE=" + std::to_string(world) + ")");
  }
  return GlooCommunicator::from_env(rank, world, options);
}

}  // namespace dtrain::trainer
