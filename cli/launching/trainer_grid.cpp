#include "cli/launching/trainer_grid.h"

#include <cstdlib>
#include <filesystem>
#include <stdexcept>

#include "trainer/parallel/grid/rank_grid.h"

namespace dtrain::cli {
namespace {

int positive(const std::string& text) {
  char* end = nullptr;
  const long value = std::strtol(text.c_str(), &end, 10);
  return end != text.c_str() && *end == '\0' && value > 0 && value < (1 << 20) ? static_cast<int>(value) : 1;
}

}  // namespace

std::optional<TrainerParallelFlags> trainer_parallel_flags(const std::vector<std::string>& argv) {
  std::size_t program = 0;
  // `env A=B dtrain-trainer ...`: the program is the first word that is neither env nor an assignment.
  while (program < argv.size() && (std::filesystem::path(argv[program]).filename() == "env" ||
                                   argv[program].find('=') != std::string::npos)) {
    ++program;
  }
  if (program >= argv.size() || std::filesystem::path(argv[program]).filename() != "dtrain-trainer") {
    return std::nullopt;
  }
  TrainerParallelFlags flags;
  bool given = false;
  for (std::size_t i = program + 1; i < argv.size(); ++i) {
    const std::string& arg = argv[i];
    for (const auto& [name, field] : {std::pair{"--tp", &flags.tp}, std::pair{"--pp", &flags.pp}}) {
      const std::string flag = name;
      if (arg == flag && i + 1 < argv.size()) {
        *field = positive(argv[++i]);
        given = true;
      } else if (arg.rfind(flag + "=", 0) == 0) {
        *field = positive(arg.substr(flag.size() + 1));
        given = true;
      }
    }
    if (arg == "--allow-cross-node-tp") flags.allow_cross_node_tp = true;
  }
  if (!given) return std::nullopt;
  return flags;
}

std::string trainer_grid_text(const TrainerParallelFlags& flags, int world, int ranks_per_node,
                              std::string* refusal) {
  try {
    const trainer::RankGrid grid({world, flags.tp, flags.pp, ranks_per_node, flags.allow_cross_node_tp});
    return trainer::describe_grid(grid);
  } catch (const std::invalid_argument& e) {
    *refusal = e.what();
    return "";
  }
}

}  // namespace dtrain::cli
