#pragma once

// Where dtrain keeps what it learns about a node between runs (XDG Base Directory's state home):
// $XDG_STATE_HOME/dtrain when XDG_STATE_HOME is absolute, else $HOME/.local/state/dtrain (the password database's
// home without HOME, /tmp without either). The agent's run directory (agent/job/run_dir.h: <this>/runs) and the
// node's measured GEMM rate (agent/node/cpu_gemm.h: <this>/cpu_gemm.json) live there.

#include <string>

namespace dtrain {

std::string state_dir();

}  // namespace dtrain
