#include "trainer/ckpt/checkpoint_dir.h"

#include <algorithm>
#include <filesystem>
#include <regex>

namespace dtrain::trainer {

CheckpointPair checkpoint_pair(const std::string& dir, std::uint64_t step) {
  std::filesystem::path base(dir);
  std::string suffix = "_" + std::to_string(step) + ".bin";
  return {step, (base / ("model" + suffix)).string(), (base / ("state" + suffix)).string()};
}

std::vector<CheckpointPair> list_checkpoints(const std::string& dir) {
  std::vector<CheckpointPair> pairs;
  std::error_code ec;
  std::filesystem::directory_iterator it(dir, ec);
  if (ec) return pairs;
  static const std::regex state_name("state_([0-9]{1,19})\\.bin");
  for (const auto& entry : it) {
    std::smatch match;
    std::string name = entry.path().filename().string();
    if (!std::regex_match(name, match, state_name)) continue;
    CheckpointPair pair = checkpoint_pair(dir, std::stoull(match[1].str()));
    if (std::filesystem::is_regular_file(pair.model, ec) && std::filesystem::is_regular_file(pair.state, ec)) {
      pairs.push_back(pair);
    }
  }
  std::sort(pairs.begin(), pairs.end(), [](const auto& a, const auto& b) { return a.step > b.step; });
  return pairs;
}

}  // namespace dtrain::trainer
