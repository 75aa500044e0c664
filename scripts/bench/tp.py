"""dtrain-trainer's tensor parallelism against DDP on the same ranks and global batch, side by side in one run: the
median step time, the exposed communication (the --metrics line's comm_exposed_ms) and the parameters a rank keeps
(rank 0's line "N parameters on each rank").

Model: BENCHMARKS.md's bench model, GPT-2 with L=4, C=256, NH=4, T=256, V=256; global batch 8 sequences. Layouts,
each on 2 ranks of 1 thread through `dtrain run -n 2`: DDP (B=4 a rank) and --tp 2 (one group, B=8). Rounds interleave the layouts so machine noise hits
all alike; each cell is the median over rounds of the median step time after the first 2 of --steps steps."""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from trainer_vs_pytorch import make_shard  # noqa: E402  the same llm.c shard of random tokens

MODEL = ["--layers", "4", "--channels", "256", "--heads", "4", "--max-seq-len", "256", "--vocab", "256",
         "--seq-len", "256"]
LAYOUTS = (("DDP, 2 ranks", 2, ["--batch-size", "4", "--threads", "1"]),
           ("TP=2, 2 ranks", 2, ["--batch-size", "8", "--threads", "1", "--tp", "2"]))


def run(args, work, index, layout):
    label, ranks, flags = layout
    metrics = os.path.join(work, f"layout{index}.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    trainer = [args.trainer, *MODEL, *flags, "--steps", str(args.steps), "--data", os.path.join(work, "data.bin"),
               "--metrics", metrics]
    cmd = [args.dtrain, "run", "-n", str(ranks), "--logs-dir", os.path.join(work, "runs"), "--", *trainer]
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    done = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env, timeout=600)
    with open(metrics) as f:
        lines = [json.loads(line) for line in f][2:]
    held = re.search(r": (\d+) parameters on rank 0", done.stdout + done.stderr)
    return {"ms": statistics.median(m["step_ms"] for m in lines),
            "comm": statistics.median(m.get("comm_exposed_ms", 0.0) for m in lines),
            "params": int(held.group(1)) if held else None}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--trainer", required=True)
    parser.add_argument("--dtrain", required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=8)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="dtrain-tp-") as work:
        make_shard(os.path.join(work, "data.bin"))
        results = {i: [] for i in range(len(LAYOUTS))}
        for _ in range(args.rounds):
            for i, layout in enumerate(LAYOUTS):
                results[i].append(run(args, work, i, layout))
        ddp = statistics.median(r["ms"] for r in results[0])
        print("| layout | step (ms, median) | vs DDP | exposed comm (ms) | parameters a rank |")
        print("| --- | --- | --- | --- | --- |")
        for i, (label, _, _) in enumerate(LAYOUTS):
            ms = statistics.median(r["ms"] for r in results[i])
            comm = statistics.median(r["comm"] for r in results[i])
            params = results[i][-1]["params"] or "all"
            print(f"| {label} | {ms:.1f} | {ms / ddp:.2f}x | {comm:.1f} | {params} |")


if __name__ == "__main__":
    main()
