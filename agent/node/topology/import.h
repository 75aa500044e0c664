#pragma once

// Reads a saved `nvidia-smi topo -m` output into a Matrix: tab separated (as nvidia-smi writes it) or with the tabs
// turned into spaces (as it arrives pasted in issues and chats); NIC columns named NIC# with a NIC Legend, or named
// directly (mlx5_0) as older drivers print them; SOC for SYS; CPU Affinity with or without NUMA Affinity and GPU
// NUMA ID; N/A anywhere a value is. Everything after the matrix except the NIC Legend is ignored.

#include <stdexcept>
#include <string>

#include "agent/node/topology/matrix.h"

namespace dtrain::node::topo {

// What is wrong with the text and on which line (1-based), e.g. "line 4: row GPU2 has 9 cells, the header 16".
struct ImportError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

Matrix parse_nvidia_smi_topo(const std::string& text);

}  // namespace dtrain::node::topo
