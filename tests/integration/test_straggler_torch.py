"""Stragglers in a real PyTorch DDP job (gloo, 2 nodes x 2 ranks) that uses the Python health helper
(python/dtrain_health.py: timed, step, watch), under real agents and the launcher's diagnosis:
  data     rank 2's loader sleeps 60 ms per batch: the others wait for it inside DDP's allreduce (exposed
           communication, not their own work), so the summary of the successful job and its events name rank 2 as
           the straggler, with data wait as its cause;
  compute  rank 1 spends 60 ms more per step inside the step (a slow compute step): it is named, with compute.
The helper reports once per DTRAIN_HEALTH_INTERVAL_MS (a fifth of heartbeat_timeout_s: 600 ms here), and a
straggler takes 3 windows of at least 3 new steps each, so 200 steps of about 70 ms leave room for several."""

import glob
import json
import os
import re

from harness import PYTHON, Run, check, finish, write

WORKER = r"""
import os, sys, time
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
import dtrain_health as health

rank, mode = int(os.environ["RANK"]), sys.argv[1]
torch.set_num_threads(1)
dist.init_process_group("gloo")
torch.manual_seed(0)
model = DDP(torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.Tanh(), torch.nn.Linear(128, 1)))
health.watch(model)
opt = torch.optim.SGD(model.parameters(), lr=0.01)

def batches():
    gen = torch.Generator().manual_seed(rank)
    while True:
        time.sleep(0.06 if mode == "data" and rank == 2 else 0.005)
        x = torch.randn(32, 64, generator=gen)
        yield x, x.sum(dim=1, keepdim=True)

for step, (x, y) in enumerate(health.timed(batches())):
    with health.step():
        loss = torch.nn.functional.mse_loss(model(x), y)
        if mode == "compute" and rank == 1:
            time.sleep(0.06)   # a slow device or CPU contention: inside the step, before the allreduce
        opt.zero_grad()
        loss.backward()
        opt.step()
        health.report(loss=loss, tokens=32)
    if step + 1 == 200:   # the same number of steps on every rank: each step's allreduce needs them all
        break
time.sleep(1.5)   # a heartbeat carries the last step
"""

SPEC = """
name: %s
nodes: {provider: local, count: 2}
workers_per_node: 2
command: [%s, %s, %s]
stop: {grace_s: 1}
health: {startup_timeout_s: 120, heartbeat_timeout_s: 3}
logs: {dir: runs, console: all}
"""


def launch(mode):
    run = Run([], timeout=240)
    script = write(os.path.join(run.dir, "worker.py"), WORKER)
    run.args += ["launch", write(os.path.join(run.dir, "job.yaml"), SPEC % ("straggler-" + mode, PYTHON, script,
                                                                            mode))]
    run.run()
    run.show()
    return run


def events_of(run):
    events = []
    for path in glob.glob(os.path.join(run.dir, "runs", "*", "events.jsonl")):
        with open(path) as f:
            events += [json.loads(line) for line in f if line.strip()]
    return events


for mode, rank, node, cause in (("data", 2, 1, "data wait"), ("compute", 1, 0, "compute")):
    run = launch(mode)
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
