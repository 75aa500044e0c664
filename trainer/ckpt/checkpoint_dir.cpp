#include "trainer/ckpt/checkpoint_dir.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <regex>

#include "trainer/ckpt/model_file.h"

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

std::vector<std::string> remove_interrupted_saves(const std::string& dir) {
  std::vector<std::string> removed;
  std::vector<CheckpointPair> complete = list_checkpoints(dir);
  const bool any_complete = !complete.empty();
  const std::uint64_t newest = any_complete ? complete.front().step : 0;
  std::error_code ec;
  std::filesystem::directory_iterator it(dir, ec);
  if (ec) return removed;
  static const std::regex temp_name("(model|state)_[0-9]{1,19}\\.bin\\.tmp\\.[0-9]+");
  static const std::regex model_name("model_([0-9]{1,19})\\.bin");
  std::vector<std::pair<std::filesystem::path, std::string>> doomed;
  for (const auto& entry : it) {
    std::string name = entry.path().filename().string();
    std::smatch match;
    if (std::regex_match(name, temp_name)) {
      doomed.emplace_back(entry.path(), name + " is a partly written file (a save that was interrupted)");
    } else if (std::regex_match(name, match, model_name)) {
      std::uint64_t step = std::stoull(match[1].str());
      // Only our own spelling of the name (llm.c writes model_00000500.bin, which is not ours to remove).
      if (name != "model_" + std::to_string(step) + ".bin") continue;
      if (std::filesystem::exists(checkpoint_pair(dir, step).state, ec)) continue;
      if (any_complete && step <= newest) continue;
      doomed.emplace_back(entry.path(), name + " has no state file (an interrupted save)");
    }
  }
  std::sort(doomed.begin(), doomed.end());
  for (const auto& [path, why] : doomed) {
    if (std::filesystem::remove(path, ec)) {
      removed.push_back(why + ": removed");
    } else if (ec) {
      removed.push_back(why + ": could not remove it (" + ec.message() + ")");
    }
  }
  return removed;
}

TrainState read_checkpoint_pair(const CheckpointPair& pair, const GptConfig& config, float* params, float* m,
                                float* v, std::size_t n, bool& model_checked) {
  std::uint32_t crc = read_model_file(pair.model, config, params, n);
  TrainState state = read_state_file(pair.state, m, v, n);
  model_checked = state.model_crc.has_value();
  if (state.model_crc && *state.model_crc != crc) {
    char found[16], recorded[16];
    std::snprintf(found, sizeof found, "%08x", crc);
    std::snprintf(recorded, sizeof recorded, "%08x", *state.model_crc);
    throw CheckpointError("model checkpoint " + pair.model + ": checksum mismatch (CRC-32C " + found + ", but " +
                          pair.state + " recorded " + recorded +
                          "); the model file was damaged or replaced after it was written");
  }
  return state;
}

}  // namespace dtrain::trainer
