#pragma once

// Every wait of the launcher, in one place, with the reason for its value. A wait without a bound here is a hang
// we cannot name.

#include <chrono>

namespace dtrain::controller {

struct Timeouts {
  using ms = std::chrono::milliseconds;

  // Local agents: from starting the processes to every agent's socket answering. Starting dtrain (a dynamically
  // linked gRPC binary) takes ~20 ms of CPU; hundreds of them on a few loaded cores take seconds, never 30.
  ms agent_start{30000};
  // Dialing one agent (provider local and static): a live agent answers in milliseconds; 10 s rides out a
  // loaded node and a slow first TLS handshake, and is short enough that a dead address is reported promptly.
  ms connect{10000};
  // Node 0's answer to PrepareRound (reserve a port, open a store namespace: both instant on a live agent). Longer
  // means a stuck agent; the round fails over that node instead of waiting for the node timeout.
  ms prepare_round{10000};
  // Beyond stop.grace_s, how long StopGroup may take to be confirmed: the agent's own SIGKILL sweep after the
  // grace, then reaping and reporting every process. An agent that has not confirmed by then is lost.
  ms stop_confirm_margin{10000};
  // Beyond stop.grace_s, how long the launcher waits for every session to end after Shutdown (agents stop
  // whatever is left with the same grace, then close).
  ms shutdown_margin{10000};
  // After the sessions ended: how long the launcher waits for the agent processes it started (local, ssh, srun)
  // to exit by themselves, then how long between SIGTERM and SIGKILL for the ones that did not.
  ms agent_exit{5000};
  ms agent_kill_grace{1000};
  // After the first SIGINT/SIGTERM/SIGHUP the launcher exits within stop.grace_s + exit_margin whatever its agents
  // do (a second signal: within exit_margin / 2): the user is waiting.
  ms exit_margin{600};
  // A worker failed a health check (heartbeat, hang, startup): how long the launcher waits for every node's
  // Evidence (each worker's stacks) before it stops the round. gdb attaches and walks a few dozen threads in 1-2 s;
  // the round is lost either way, so the wait buys a diagnosis but must not hold up the restart much. The agents get
  // evidence_budget, a second less, to leave the reply time to travel.
  ms evidence{5000};
  ms evidence_budget{4000};
  // `dtrain doctor JOB.yaml`: one TCP connect from a node to a peer. A reachable port answers within a round trip;
  // 2 s separates "filtered" from "slow" without making the check slow.
  ms reach_probe{2000};
};

}  // namespace dtrain::controller
