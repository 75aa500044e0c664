"""A rank waiting in init_process_group for a late peer is not a stopped rank (real agents, the real datagram socket,
Debian's torch 1.13 over gloo): 2 ranks import dtrain_health before init_process_group (its reporter heartbeats
from then on), rank 1 calls init_process_group 6 s after rank 0 has reached it (rank 0 leaves a file just before
its call, whatever its own imports took), and rank 0 waits there for it, holding the interpreter
lock all along (its own ticker thread, which wakes every 0.1 s, measures the longest gap, so the test shows that the
reporter really could not run); health.heartbeat_timeout_s is 2.
  auto  health.instrument: auto (the default): the bootstrap runs init_process_group through dtrain_health's
        wait_quietly(), whose report says quiet: the launcher does not judge rank 0 by its heartbeat during the wait,
        and the job succeeds (exit 0, 3 steps each), rank 0 having waited 5 s or more with a ticker gap of 5 s or more;
  off   health.instrument: off: nothing wraps the call, and the same wait fails the job (124) with "rank 0 stopped
        reporting health". This is the failure the key removes, and it shows the wait here is silent: without it the
        first case would prove nothing.
Each run leaves no process behind."""

import re
import time

from harness import PYTHON, Run, check, finish, write

WORKER = r"""
import os, threading, time
import torch
import torch.distributed as dist
import dtrain_health as health   # (after torch: its import is no part of what this test measures)

rank = int(os.environ["RANK"])
gaps = [0.0]
def ticker():
    last = time.monotonic()
    while True:
        time.sleep(0.1)
        now = time.monotonic()
        gaps.append(now - last)
        last = now
threading.Thread(target=ticker, daemon=True).start()
MARK = "@MARK@"
if rank == 1:
    # A late peer (a slow node's imports, say): 6 s after rank 0 is at init_process_group, however long rank 0's own
    # imports took on a loaded machine.
    deadline = time.monotonic() + 60
    while not os.path.exists(MARK) and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(6)
began = time.monotonic()
if rank == 0:
    open(MARK, "w").close()
dist.init_process_group("gloo")
print("rank %d waited %.1f s in init_process_group, longest ticker gap %.1f s"
      % (rank, time.monotonic() - began, max(gaps)), flush=True)
for _ in range(3):
    with health.step():
        t = torch.ones(4)
        dist.all_reduce(t)
dist.destroy_process_group()
print("rank %d done" % rank, flush=True)
"""

SPEC = """
name: quiet-%s
nodes: {provider: local, count: 1}
workers_per_node: 2
command: [%s, %s]
stop: {grace_s: 1}
health: {heartbeat_timeout_s: 2, instrument: %s}
logs: {dir: runs, console: all}
"""


def launch(instrument):
    run = Run([], timeout=120)
    script = write(run.dir + "/worker.py", WORKER.replace("@MARK@", run.dir + "/rank0-at-init"))
    run.args += ["launch", write(run.dir + "/job.yaml", SPEC % (instrument, PYTHON, script, instrument))]
    start = time.monotonic()
    run.run()
    run.took = time.monotonic() - start
    run.show()
    return run


run = launch("auto")
print("auto: the job took %.1f s" % run.took, flush=True)
check(run.code == 0, "rank 0's wait for its late peer is not a failure -> exit 0, got %s" % run.code)
check("stopped reporting health" not in run.err, "no rank failed the heartbeat check")
wait = re.search(r"rank 0 waited ([\d.]+) s in init_process_group, longest ticker gap ([\d.]+) s", run.out + run.err)
check(wait and float(wait.group(1)) >= 5, "rank 0 waited 5 s or more for rank 1: %s" % (wait and wait.group(0)))
check(wait and float(wait.group(2)) >= 5,
      "rank 0's threads could not run meanwhile (the wait held the interpreter lock): %s" % (wait and wait.group(0)))
check((run.out + run.err).count("done") >= 2, "both ranks made their steps and finished")
run.assert_no_leaks()

run = launch("off")
check(run.code == 124, "without the bootstrap the same wait fails the heartbeat check -> 124, got %s" % run.code)
check(re.search(r"rank 0 stopped reporting health [2-9]\.\d s ago", run.err),
      "the heartbeat check names rank 0, the one waiting in init_process_group")
check("as torch 1.13's init_process_group does while it waits for a late peer" in run.err,
      "the message names the call that can silence a Python reporter")
run.assert_no_leaks()

finish()
