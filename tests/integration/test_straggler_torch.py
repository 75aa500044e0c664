"""Stragglers in a real PyTorch DDP job (gloo, 2 nodes x 2 ranks) that uses the Python health helper
(worker/python/dtrain_health.py: timed, step, watch), under real agents and the launcher's diagnosis:
  data     rank 2's loader sleeps 60 ms per batch: the others wait for it inside DDP's allreduce (exposed
           communication, not their own work), so the summary of the successful job and its events name rank 2 as
           the straggler, with data wait as its cause;
  compute  rank 1 spends 60 ms more per step inside the step (a slow compute step): it is named, with compute.
The helper reports once per DTRAIN_HEALTH_INTERVAL_MS (a fifth of heartbeat_timeout_s: 600 ms here), and a
straggler takes 3 windows of at least 3 new steps each, at one evaluation a second: on 2 busy cores it was named
about 5 s after the first step (at step 60 to 85), so STEPS (150) steps of 55-70 ms (8-10 s) leave 3 to 5 more
evaluations.
The two jobs run at the same time, each under its own launcher, run directory and tag, so the test takes about one
job's time instead of two. Their ranks spend most of a step asleep (a job alone used 6.9 s of CPU in its 16 s, most
of it starting PyTorch), and what the checks depend on did not move: on 2 cores loaded by other work (load 4-12), 11
runs together named the data straggler 4-8.8 s after the first step and the compute one 4-6 s; apart (6 data jobs, 4
compute jobs), 4-7.7 s and 5-6 s; as late as step 120 both ways. Running them together was tried once before and
dropped: 8 ranks starting at once left one in init_process_group, holding the interpreter lock, for 3 s, past
heartbeat_timeout_s. The bootstrap now passes that call through the helper's wait_quietly() (its reports say quiet,
and the launcher does not judge the rank by its heartbeat meanwhile), so that wait no longer fails a job."""

import glob
import json
import os
import re
import threading

from harness import PYTHON, STRAGGLER_TORCH_WORKER, Run, check, finish, write

STEPS = 150

SPEC = """
name: %s
nodes: {provider: local, count: 2}
workers_per_node: 2
command: [%s, %s, %s, %d]
stop: {grace_s: 1}
health: {startup_timeout_s: 120, heartbeat_timeout_s: 3}
logs: {dir: runs, console: all}
"""


def launch(mode):
    """Starts the job of `mode` and returns its Run, without waiting for it."""
    run = Run([], timeout=240)
    script = write(os.path.join(run.dir, "worker.py"), STRAGGLER_TORCH_WORKER)
    run.args += ["launch", write(os.path.join(run.dir, "job.yaml"), SPEC % ("straggler-" + mode, PYTHON, script,
                                                                            mode, STEPS))]
    return run.start()


def events_of(run):
    events = []
    for path in glob.glob(os.path.join(run.dir, "runs", "*", "events.jsonl")):
        with open(path) as f:
            events += [json.loads(line) for line in f if line.strip()]
    return events


CASES = (("data", 2, 1, "data wait"), ("compute", 1, 0, "compute"))
runs = [launch(mode) for mode, _, _, _ in CASES]   # both at once (see above)
# A thread per launcher reads its output as it comes: waiting on one while the other's pipes fill could stall it.
waiters = [threading.Thread(target=run.wait) for run in runs]
for waiter in waiters:
    waiter.start()
for waiter in waiters:
    waiter.join()
for run in runs:
    run.show()
for run, (mode, rank, node, cause) in zip(runs, CASES):
    check(run.code == 0, "%s: the job succeeds, got %s" % (mode, run.code))
    named = re.search(r"diagnosis \(straggler\): rank (\d+) on node (\d+) \(.*\) was (\d+)% slower than the median: "
                      r"(\d+)% of its step was ([a-z ]+)", run.err)
    check(named is not None and named.group(1) == str(rank) and named.group(2) == str(node) and
          named.group(5).strip() == cause, "%s: the summary names rank %d on node %d as the straggler, caused by %s (%s)" %
          (mode, rank, node, cause, named.group(0) if named else None))
    others = re.findall(r"diagnosis \(straggler\): rank (\d+)", run.err)
    check(set(others) == {str(rank)}, "%s: no other rank is named a straggler (%s)" % (mode, others))
    found = [e for e in events_of(run) if e.get("event") == "diagnosis" and e.get("kind") == "straggler"]
    check(found and all(e.get("ranks") == [rank] for e in found), "%s: events.jsonl has the straggler diagnosis for "
          "rank %d: %s" % (mode, rank, found[:1]))
    run.assert_no_leaks()

finish()
