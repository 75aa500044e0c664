"""A stopped rank still gets its SIGTERM when the job stops, and runs its handler at once, not when the grace period
ends in SIGKILL:
  sigstop  rank 0 SIGSTOPs itself, then its sibling fails: with stop.grace_s 15, rank 0's TERM trap runs within a
           second of the stop (the agent sends SIGCONT right after every SIGTERM of its stop path), and it exits 0;
  gdb      a hang on 4 PyTorch gloo DDP ranks with stack collection: gdb on 4 torch processes at once does not finish
           within the evidence budget on 2 cores, and ending it used to leave ranks group-stopped with SIGTERM
           pending (SIGKILLed after the grace, signal 9 in events.jsonl). Over 2 runs every rank now ends by its
           SIGTERM (signal 15), none by signal 9. On 2 cores each run cuts short all 4 gdbs while they are attached
           (a rank's stacks file then holds gdb's attach lines and no frame; each run prints how many), so each run
           ends 4 of them the way this is about; the moment within gdb's work at which it is cut short is swept over
           15 budgets by tests/unit/agent_evidence_test.cpp, so these runs are the end-to-end check (agent,
           launcher, torch ranks, events.jsonl), the second one to catch a rank left stopped now and then.
Each run also leaves no process behind."""

import glob
import json
import os
import re
import time

from harness import PYTHON, Run, check, finish, write

SIGSTOP_SPEC = """
name: stopped
nodes: {provider: local, count: 1}
workers_per_node: 2
shell: true
command: "if [ $RANK = 0 ]; then trap 'echo rank 0 got SIGTERM; exit 0' TERM; echo rank 0 stops; kill -STOP $$; sleep 300; else sleep 2; echo rank 1 fails; exit 3; fi"
stop: {grace_s: 15}
logs: {dir: runs, console: all}
"""


def events(run):
    found = glob.glob(os.path.join(run.dir, "runs", "*", "events.jsonl"))
    check(len(found) == 1, "one events.jsonl (%s)" % found)
    with open(found[0]) as f:
        return [json.loads(line) for line in f if line.strip()]


def exits(run):
    return {e["rank"]: e for e in events(run) if e.get("event") == "worker_exited"}


# ---- sigstop
run = Run([], timeout=60)
spec = write(os.path.join(run.dir, "job.yaml"), SIGSTOP_SPEC)
run.args += ["launch", spec]
began = time.monotonic()
run.run()
took = time.monotonic() - began
run.show()
check(run.code == 3, "rank 1's exit code is the job's (got %s)" % run.code)
check("rank 0 got SIGTERM" in run.out, "the stopped rank ran its TERM handler")
ended = exits(run)
check(ended.get(0, {}).get("signal") == 0 and ended.get(0, {}).get("exit_code") == 0,
      "the stopped rank exited 0 from its handler, not by SIGKILL: %s" % ended.get(0))
# rank 1 fails after 2 s; the stop's SIGTERM reaches the stopped rank at once instead of after 15 s of grace.
check(took < 2 + 4, "the job ended %.1f s after it started (the grace period is 15 s)" % took)
run.assert_no_leaks()

# ---- gdb: a hang on 4 PyTorch ranks, stacks collected, 2 runs
HANG = r"""
import os, time
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
import dtrain_health as health

rank = int(os.environ["RANK"])
torch.set_num_threads(1)
dist.init_process_group("gloo")
model = DDP(torch.nn.Linear(32, 32))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(10**6):
    with health.step():
        if step == 3 and rank == 3:
            print("rank 3 hangs", flush=True)
            time.sleep(600)
        loss = model(torch.randn(8, 32)).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
"""

HANG_SPEC = """
name: stopped-hang
nodes: {provider: local, count: 1}
workers_per_node: 4
command: [%s, %s]
stop: {grace_s: 20}
health: {hang_timeout_s: 3, startup_timeout_s: 120}
logs: {dir: runs, console: rank0}
"""


def cut_short(stacks):
    """How many of these stacks files hold a gdb that attached (its 'New LWP' lines) and printed no frame."""
    count = 0
    for path in stacks:
        with open(path) as f:
            lines = f.read().split("gdb -batch", 1)[-1].splitlines()
        if any(line.startswith("[New LWP") for line in lines) and not any(line.startswith("#") for line in lines):
            count += 1
    return count


RUNS = 2
sigkilled = 0
for attempt in range(RUNS):
    run = Run([], timeout=120)
    script = write(os.path.join(run.dir, "hang.py"), HANG)
    run.args += ["launch", write(os.path.join(run.dir, "job.yaml"), HANG_SPEC % (PYTHON, script))]
    began = time.monotonic()
    run.run()
    took = time.monotonic() - began
    stacks = glob.glob(os.path.join(run.dir, "runs", "*", "attempt_0", "stacks", "rank_[0-9].txt"))
    print("run %d: exit %s after %.1f s, gdb cut short on %d of %d ranks" % (attempt, run.code, took, cut_short(stacks),
                                                                          len(stacks)), flush=True)
    if run.code != 124:
        run.show()
    check(run.code == 124, "run %d: the hang fails the job with 124 (got %s)" % (attempt, run.code))
    check(re.search(r"made no step progress for 3\.\d s", run.err), "run %d: the hang check fired" % attempt)
    check(len(stacks) == 4, "run %d: every rank's stacks were collected (%d files)" % (attempt, len(stacks)))
    ended = exits(run)
    check(sorted(ended) == [0, 1, 2, 3], "run %d: every rank's exit is recorded: %s" % (attempt, sorted(ended)))
    signals = {rank: e.get("signal") for rank, e in ended.items()}
    sigkilled += sum(1 for s in signals.values() if s == 9)
    check(all(s == 15 for s in signals.values()), "run %d: every rank ended by its SIGTERM: %s" % (attempt, signals))
    # 3 s of hang, 4 s of evidence, the stop: nowhere near the 20 s grace a stopped rank would wait out.
    check(took < 60, "run %d took %.1f s" % (attempt, took))
    run.assert_no_leaks()
print("%d of %d ranks SIGKILLed over %d runs" % (sigkilled, 4 * RUNS, RUNS), flush=True)

finish()
