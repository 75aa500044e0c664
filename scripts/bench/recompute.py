"""dtrain-trainer --recompute none|selective|full side by side in one run: median step time, the activations kept
(the --metrics line's mem_activations_bytes) and `dtrain plan --trainer-accounting`'s prediction of them.

Model: BENCHMARKS.md's bench model, GPT-2 with L=4, C=256, NH=4, T=256, V=256, B=8, one rank, 2 threads, --zero 1
(for the memory metrics; one rank holds every shard). Rounds interleave the modes so machine noise hits all alike;
each cell is the median over rounds of the median step time after the first 2 of --steps steps."""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from trainer_vs_pytorch import make_shard  # noqa: E402  the same llm.c shard of random tokens

MODEL = ["--layers", "4", "--channels", "256", "--heads", "4", "--max-seq-len", "256", "--vocab", "256"]
MODES = ("none", "selective", "full")


def run(args, work, mode, steps, precision):
    metrics = os.path.join(work, f"{mode}-{precision}.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    cmd = [args.trainer, *MODEL, "--seq-len", "256", "--batch-size", "8", "--steps", str(steps), "--threads", "2",
           "--zero", "1", "--precision", precision, "--recompute", mode, "--data", os.path.join(work, "data.bin"),
           "--metrics", metrics]
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    subprocess.run(cmd, check=True, capture_output=True, env=env, timeout=600)
    with open(metrics) as f:
        lines = [json.loads(line) for line in f]
    return statistics.median(m["step_ms"] for m in lines[2:]), lines[-1]["mem_activations_bytes"]


def predicted(args, mode, precision):
    out = subprocess.run([args.dtrain, "plan", "--layers", "4", "--hidden", "256", "--heads", "4", "--seq-len",
                          "256", "--vocab", "256", "--gpus", "1", "--micro-batch", "8", "--zero", "1", "--precision",
                          precision, "--recompute", mode, "--trainer-accounting", "--json"],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)["strategies"][0]["trainer"]["activations_bytes"]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--trainer", required=True)
    parser.add_argument("--dtrain", required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=8)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="dtrain-recompute-") as work:
        make_shard(os.path.join(work, "data.bin"))
        for precision in ("fp32", "bf16"):
            times = {m: [] for m in MODES}
            kept = {}
            for _ in range(args.rounds):
                for mode in MODES:
                    ms, kept[mode] = run(args, work, mode, args.steps, precision)
                    times[mode].append(ms)
            base = statistics.median(times["none"])
            print(f"{precision}: mode, step ms (median of {args.rounds} rounds), vs none, activations MB, "
                  "plan's MB, plan/trainer")
            for mode in MODES:
                ms = statistics.median(times[mode])
                plan = predicted(args, mode, precision)
                print(f"  {mode:9s} {ms:8.1f} {ms / base:6.3f}x {kept[mode] / 1e6:8.2f} {plan / 1e6:8.2f} "
                      f"{plan / kept[mode]:6.3f}")


if __name__ == "__main__":
    main()
