#pragma once

// Reads a saved `nvidia-smi topo -m` output into a Matrix: tab separated (as nvidia-smi writes it) or with the tabs
// turned into spaces (as it arrives pasted in issues and chats); NIC columns named NIC# with a NIC Legend, or named
// directly (mlx5_0) as older drivers print them; SOC for SYS; CPU Affinity with or without NUMA Affinity and GPU
// NUMA ID; N/A anywhere a value is. Everything after the matrix except the NIC Legend is ignored.

#include <cstddef>
#include <stdexcept>
#include <string>

#include "agent/node/topology/matrix.h"

namespace dtrain::node::topo {

// What is wrong with the text and on which line (1-based), e.g. "line 4: row GPU2 has 9 cells, the header 16".
struct ImportError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The most GPUs, and the most NICs, an imported matrix may have. The largest single machines have 8 to 16 GPUs
// (HGX, DGX) and up to 72 share one NVLink domain across a rack; 256 of each is far above any node while keeping the
// (GPUs + NICs)^2 matrix of a hostile file to 262,144 cells, analysed in well under a second. A 2,000-GPU matrix
// would otherwise take seconds and GBs for nothing that a real node prints.
inline constexpr std::size_t kMaxImportGpus = 256;
inline constexpr std::size_t kMaxImportNics = 256;
// The largest file read: a 512-device matrix is about 1.5 MB of cells; 4 MiB leaves room for long affinity lists
// and a legend while refusing what cannot be `nvidia-smi topo -m` output.
inline constexpr std::size_t kMaxImportBytes = 4 << 20;

Matrix parse_nvidia_smi_topo(const std::string& text);

}  // namespace dtrain::node::topo
