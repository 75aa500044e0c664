#include "cli/run/node_console.h"

#include <memory>
#include <set>
#include <stdexcept>

namespace dtrain::cli::run {

std::string node_console_text(const std::string& mode, const std::vector<int>& local_ranks) {
  if (local_ranks.empty()) return mode;
  std::string text = "local:";
  for (std::size_t i = 0; i < local_ranks.size(); ++i) text += (i ? "," : "") + std::to_string(local_ranks[i]);
  return text;
}

NodeConsole node_console(const std::string& text) {
  if (text == "none") return nullptr;
  if (text == "all") return [](std::uint32_t, std::uint32_t) { return true; };
  if (text == "rank0") return [](std::uint32_t rank, std::uint32_t) { return rank == 0; };
  const std::string prefix = "local:";
  if (text.rfind(prefix, 0) != 0 || text.size() == prefix.size()) {
    throw std::invalid_argument("expected none, all, rank0 or local:L,... (got '" + text + "')");
  }
  auto locals = std::make_shared<std::set<std::uint32_t>>();
  std::string item;
  for (std::size_t i = prefix.size(); i <= text.size(); ++i) {
    if (i < text.size() && text[i] != ',') {
      if (text[i] < '0' || text[i] > '9' || item.size() >= 6) {
        throw std::invalid_argument("local ranks are numbers separated by commas (got '" + text + "')");
      }
      item += text[i];
      continue;
    }
    if (item.empty()) throw std::invalid_argument("an empty local rank in '" + text + "'");
    locals->insert(static_cast<std::uint32_t>(std::stoul(item)));
    item.clear();
  }
  return [locals](std::uint32_t, std::uint32_t local_rank) { return locals->count(local_rank) > 0; };
}

}  // namespace dtrain::cli::run
