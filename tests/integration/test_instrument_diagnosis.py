"""health.instrument: auto on an unmodified PyTorch DDP script whose rank 2 is slow, from its reports to the
launcher's diagnosis, `dtrain status --json` and the report page (real agents, real PyTorch: Debian's 1.13 under
/usr/bin/python3).
  slow rank  gloo DDP, 2 nodes x 2 ranks, a torch.utils.data.DataLoader whose Dataset sleeps in __getitem__ on rank 2
             only (100 ms a batch); the script imports nothing of dtrain. After the job `dtrain status --json` shows
             every rank at the optimizer steps it ran, each with a step time; rank 2's data_wait_ratio is above 0.5
             and every other rank's below 0.5; the summary and events.jsonl name rank 2 on node 1 as the straggler,
             with data wait as its cause, and no other rank; `dtrain report` on the run directory writes the page
             whose heat map has a row with cells for each of the 4 ranks (not the "No rank reported this"
             placeholder), rank 2's outlined as the straggler's.
The bootstrap reports once per DTRAIN_HEALTH_INTERVAL_MS (a fifth of heartbeat_timeout_s: 600 ms here), a window
needs 3 reports with new steps (about 2 s at one evaluation a second) and a straggler 3 windows in a row: 100 steps
of about 110 ms leave room for 5."""

import glob
import json
import os
import re
import subprocess
import sys
import time

from harness import DTRAIN, PYTHON, Run, check, finish, status_json, write

STEPS = 100
SLOW_RANK, SLOW_NODE = 2, 1

# Plain PyTorch: nothing of dtrain is imported. Every rank runs STEPS optimizer steps (the loader's length), so each
# step's gradient allreduce has all ranks; rank 2's loader sleeps 25 ms per sample, 100 ms per batch of 4: its data
# wait stays above half its step even in windows where a loaded machine slows the other ranks (it then waits for
# them too).
DDP = r"""
import os, time
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset

STEPS, BATCH, SLOW_RANK = %d, 4, %d
rank = int(os.environ["RANK"])
torch.set_num_threads(1)
dist.init_process_group("gloo")
torch.manual_seed(0)

class Samples(Dataset):
    def __len__(self):
        return STEPS * BATCH
    def __getitem__(self, i):
        if rank == SLOW_RANK:
            time.sleep(0.025)   # a slow disk or decoder on this rank only
        x = torch.randn(64, generator=torch.Generator().manual_seed(i))
        return x, x.sum().reshape(1)

model = DDP(torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.Tanh(), torch.nn.Linear(128, 1)))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
steps = 0
for x, y in DataLoader(Samples(), batch_size=BATCH):
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    steps += 1
print("rank %%d ran %%d optimizer steps, last loss %%.4f" %% (rank, steps, float(loss)), flush=True)
# torch 1.13: DDP (and ZeroRedundancyOptimizer) keep the process group alive past destroy_process_group(), and
# gloo's threads left to the interpreter's teardown may abort the process ("terminate called without an active
# exception"): drop them first, so its threads end here.
del model
dist.destroy_process_group()
""" % (STEPS, SLOW_RANK)

SPEC = """
name: instrument-diagnosis
nodes: {provider: local, count: 2}
workers_per_node: 2
command: [%s, %s]
stop: {grace_s: 1}
health: {startup_timeout_s: 120, heartbeat_timeout_s: 3}
logs: {dir: runs, console: all}
"""

# `python3 test_instrument_diagnosis.py --set KEY=VALUE ...` passes the overrides to `dtrain launch`: with
# health.instrument=off every check of the reports must fail (the test's own check that it can).
overrides = sys.argv[1:]

began = time.monotonic()
run = Run([], timeout=240)
script = write(os.path.join(run.dir, "ddp_slow_loader.py"), DDP)
run.args += ["launch", write(os.path.join(run.dir, "job.yaml"), SPEC % (PYTHON, script))] + overrides
run.run()
run.show()
print("job took %.1f s" % (time.monotonic() - began), flush=True)

check(run.code == 0, "the job succeeds, got %s" % run.code)
ran = {int(r): int(n) for r, n in re.findall(r"rank (\d+) ran (\d+) optimizer steps", run.out)}
check(ran == {r: STEPS for r in range(4)}, "every rank ran %d optimizer steps: %s" % (STEPS, ran))

# ---- dtrain status --json after the job: the last snapshot (status.json in the run directory)
status = status_json(run)
ranks = {r["rank"]: r for r in status.get("ranks", [])}
check(sorted(ranks) == [0, 1, 2, 3], "status shows all 4 ranks: %s" % sorted(ranks))
for rank, row in sorted(ranks.items()):
    print("status rank %d: step %s, step_ms %s, data_wait_ratio %s" % (rank, row.get("step"), row.get("step_ms"),
                                                                       row.get("data_wait_ratio")), flush=True)
    check(row.get("step") == STEPS, "rank %d is at step %d, one per optimizer step: %s" % (rank, STEPS, row))
    check((row.get("step_ms") or 0) > 0, "rank %d has a step time: %s" % (rank, row))
    ratio = row.get("data_wait_ratio") or 0
    if rank == SLOW_RANK:
        check(ratio > 0.5, "rank %d, the one with the slow loader, waits for data over half its step: %s" %
              (rank, ratio))
    else:
        check(ratio < 0.5, "rank %d waits for data under half its step: %s" % (rank, ratio))


# ---- the diagnosis: the summary line, events.jsonl and the status snapshot
def named_stragglers(diagnoses):
    return sorted({r for d in diagnoses if d.get("kind") == "straggler" for r in d.get("ranks", [])})


named = re.search(r"diagnosis \(straggler\): rank (\d+) on node (\d+) \(.*\) was (\d+)% slower than the median: "
                  r"(\d+)% of its step was ([a-z ]+)", run.err)
check(named is not None and named.group(1) == str(SLOW_RANK) and named.group(2) == str(SLOW_NODE) and
      named.group(5).strip() == "data wait", "the summary names rank %d on node %d as the straggler, caused by data "
      "wait (%s)" % (SLOW_RANK, SLOW_NODE, named.group(0) if named else None))
others = re.findall(r"diagnosis \(straggler\): rank (\d+)", run.err)
check(set(others) == {str(SLOW_RANK)}, "no other rank is named a straggler in the summary (%s)" % others)
events = []
for path in glob.glob(os.path.join(run.dir, "runs", "*", "events.jsonl")):
    with open(path) as f:
        events += [json.loads(line) for line in f if line.strip()]
found = [e for e in events if e.get("event") == "diagnosis"]
check(named_stragglers(found) == [SLOW_RANK], "events.jsonl names rank %d, and only it, as the straggler: %s" %
      (SLOW_RANK, found))
check(named_stragglers(status.get("diagnoses", [])) == [SLOW_RANK],
      "the status snapshot names rank %d as the straggler: %s" % (SLOW_RANK, status.get("diagnoses")))

# ---- the report page: its heat map has every rank, with data
job_dirs = run.job_dirs()
check(len(job_dirs) == 1, "one run directory: %s" % job_dirs)
if job_dirs:
    page = os.path.join(job_dirs[0], "report.html")
    if os.path.exists(page):
        os.unlink(page)   # the launcher wrote one at the end; this one is `dtrain report`'s
    made = subprocess.run([DTRAIN, "report", job_dirs[0]], capture_output=True, text=True, timeout=60)
    check(made.returncode == 0 and made.stdout.strip() == page and os.path.exists(page),
          "dtrain report DIR writes DIR/report.html (%r %r)" % (made.stdout, made.stderr))
    html = ""
    if os.path.exists(page):
        with open(page) as f:
            html = f.read()
    section = re.search(r'<section id="heat-map">(.*?)</section>', html, re.S)
    heat = section.group(1) if section else ""
    check(section is not None and "No rank reported this" not in heat and 'class="chart heat-map"' in heat,
          "the page has a heat map, not the placeholder: %r" % heat[:300])
    rows = re.findall(r'<g class="hm-row" data-rank="(\d+)" data-straggler="([01])">(.*?)</g>', heat, re.S)
    check(sorted(int(r) for r, _, _ in rows) == [0, 1, 2, 3], "the heat map has a row per rank: %s" %
          [r for r, _, _ in rows])
    for rank, _, cells in rows:
        check(len(re.findall(r'<rect x="[^"]*" y="[^"]*" width="[^"]*" height="[^"]*" fill=', cells)) > 0,
              "rank %s's heat-map row has cells" % rank)
    check([int(r) for r, s, _ in rows if s == "1"] == [SLOW_RANK], "rank %d's row, and only it, is outlined as the "
          "straggler's: %s" % (SLOW_RANK, [(r, s) for r, s, _ in rows]))

run.assert_no_leaks()
print("test took %.1f s" % (time.monotonic() - began), flush=True)
finish()
