"""dtrain-trainer on one process, started by hand (no launcher, no torchrun variables: world 1): --zero 0, 1, 2 and 3
all train, and give the same loss and gradient norm at every step (one rank holds every shard, so ZeRO must be
plain AdamW on the whole model). ZeRO at world 1 used to fail its first step ("gradients [0, N) were never reported
ready": backward reported to the engine only on more than one rank)."""

import json
import os
import subprocess

from harness import DTRAIN, SOURCE_DIR, Run, check, finish

TRAINER = os.path.join(os.path.dirname(DTRAIN), "dtrain-trainer")
work = Run([]).dir
data = os.path.join(work, "train.bin")
subprocess.run([TRAINER, "prepare-text", os.path.join(SOURCE_DIR, "README.md"), data], check=True,
               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR")}
runs = {}
for zero in (0, 1, 2, 3):
    metrics = os.path.join(work, "zero%d.jsonl" % zero)
    p = subprocess.run([TRAINER, "--model", "tiny", "--zero", str(zero), "--steps", "3", "--data", data, "--metrics",
                        metrics], env=env, capture_output=True, text=True, timeout=120)
    check(p.returncode == 0, "--zero %d on one process exits 0, got %s: %s" % (zero, p.returncode, p.stderr[-400:]))
    with open(metrics) if os.path.exists(metrics) else open(os.devnull) as f:
        runs[zero] = [(r["step"], round(r["loss"], 5), round(r["grad_norm"], 4)) for r in map(json.loads, f)]
check(len(runs[0]) == 3, "DDP on one process logs 3 steps: %s" % runs[0])
for zero in (1, 2, 3):
    check(runs[zero] == runs[0], "--zero %d gives DDP's losses and norms on one process: %s vs %s" % (
        zero, runs[zero], runs[0]))
finish()
