#pragma once

// Which of a node's workers' lines its own `dtrain run` shows, in a multi-node job where each node's command shows
// its own ranks (torchrun's rule). The filter travels to the launcher node's agent as `dtrain agent --console-ranks
// TEXT`: "none", "all", "rank0" (global rank 0, on whichever node runs it: dtrain's default) or "local:0,2" (these
// local ranks of this node: --local-ranks-filter).

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace dtrain::cli::run {

using NodeConsole = std::function<bool(std::uint32_t rank, std::uint32_t local_rank)>;

// The text for "all", "none", "rank0", or the local ranks when `local_ranks` is not empty.
std::string node_console_text(const std::string& mode, const std::vector<int>& local_ranks);
// The filter for a text node_console_text made; null for "none". Throws std::invalid_argument naming what is wrong.
NodeConsole node_console(const std::string& text);

}  // namespace dtrain::cli::run
