"""dtrain-trainer's pipeline parallelism (--pp) and tensor parallelism (--tp) against DDP on the same ranks and global
batch, side by side in one run: the median step time, the exposed communication (the --metrics line's
comm_exposed_ms), the pipeline's bubble (pp_bubble_ms: the time a stage waited for its neighbours) as a share of the
step against the ideal (P-1)/(m+P-1) of 1F1B and GPipe with equal stages, and the parameters rank 0 keeps.

Model: BENCHMARKS.md's bench model, GPT-2 with L=4, C=256, NH=4, T=256, V=256; global batch 8 sequences, 1 thread a
rank through `dtrain run`. On 2 ranks: DDP (B=4), TP=2 (B=8), PP=2 with m = 2, 4 and 8 micro-batches (B = 8/m), and
PP=2 GPipe with m=8. On 4 ranks (two per core of a 2-core machine, every layout alike): DDP (B=2), T=2 x P=2 (m=8,
B=1), P=2 x DP=2 (m=4, B=1). Every layout runs as dtrain-trainer runs by default on one node, its groups' collectives
and sends through shared memory; the layouts marked "gloo" run the same with DTRAIN_COMM_BACKEND=gloo, every group
over TCP on loopback, as they did before groups within a node used shared memory. Rounds interleave the layouts so
machine noise hits all alike; each cell is the median over rounds of the median step (or bubble) after the first 2
of --steps steps."""

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
         "--seq-len", "256", "--threads", "1"]
# label, ranks, pipeline stages, micro-batches, flags[, environment]
GLOO = {"DTRAIN_COMM_BACKEND": "gloo"}
LAYOUTS = (("DDP, 2 ranks", 2, 1, 1, ["--batch-size", "4"]),
           ("TP=2", 2, 1, 1, ["--batch-size", "8", "--tp", "2"]),
           ("PP=2, 1f1b, m=2", 2, 2, 2, ["--batch-size", "4", "--grad-accum", "2", "--pp", "2"]),
           ("PP=2, 1f1b, m=4", 2, 2, 4, ["--batch-size", "2", "--grad-accum", "4", "--pp", "2"]),
           ("PP=2, 1f1b, m=8", 2, 2, 8, ["--batch-size", "1", "--grad-accum", "8", "--pp", "2"]),
           ("PP=2, 1f1b, m=8, gloo", 2, 2, 8, ["--batch-size", "1", "--grad-accum", "8", "--pp", "2"], GLOO),
           ("PP=2, gpipe, m=8", 2, 2, 8, ["--batch-size", "1", "--grad-accum", "8", "--pp", "2",
                                          "--pp-schedule", "gpipe"]),
           ("DDP, 4 ranks", 4, 1, 1, ["--batch-size", "2"]),
           ("T=2 x P=2, m=8", 4, 2, 8, ["--batch-size", "1", "--grad-accum", "8", "--tp", "2", "--pp", "2"]),
           ("T=2 x P=2, m=8, gloo", 4, 2, 8, ["--batch-size", "1", "--grad-accum", "8", "--tp", "2", "--pp", "2"],
            GLOO),
           ("P=2 x DP=2, m=4", 4, 2, 4, ["--batch-size", "1", "--grad-accum", "4", "--pp", "2"]))

def run(args, work, index, layout):
    label, ranks, _, _, flags = layout[:5]
    metrics = os.path.join(work, f"layout{index}.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    trainer = [args.trainer, *MODEL, *flags, "--steps", str(args.steps), "--data", os.path.join(work, "data.bin"),
               "--metrics", metrics]
    cmd = [args.dtrain, "run", "-n", str(ranks), "--logs-dir", os.path.join(work, "runs"), "--", *trainer]
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "DTRAIN_COMM_BACKEND")}
    env.update(layout[5] if len(layout) > 5 else {})
    done = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env, timeout=600)
    with open(metrics) as f:
        lines = [json.loads(line) for line in f][2:]
    held = re.search(r": (\d+) parameters on rank 0", done.stdout + done.stderr)
    return {"ms": statistics.median(m["step_ms"] for m in lines),
            "comm": statistics.median(m.get("comm_exposed_ms", 0.0) for m in lines),
            "bubble": statistics.median(m.get("pp_bubble_ms", 0.0) for m in lines),
            "params": int(held.group(1)) if held else None}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--trainer", required=True)
    parser.add_argument("--dtrain", required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--layouts", help="comma-separated labels of the layouts to run (default all), e.g. tp.sh's "
                        "'DDP, 2 ranks;TP=2' separated by ';'")
    args = parser.parse_args()
    global LAYOUTS
    if args.layouts:
        wanted = args.layouts.split(";")
        LAYOUTS = tuple(layout for layout in LAYOUTS if layout[0] in wanted)
    with tempfile.TemporaryDirectory(prefix="dtrain-pp-") as work:
        make_shard(os.path.join(work, "data.bin"))
        results = {i: [] for i in range(len(LAYOUTS))}
        for _ in range(args.rounds):
            for i, layout in enumerate(LAYOUTS):
                results[i].append(run(args, work, i, layout))
        print("| layout | step (ms, median) | vs DDP on as many ranks | exposed comm (ms) | rank 0's bubble (ms) | "
              "bubble share of the step | ideal (P-1)/(m+P-1) | parameters on rank 0 |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- |")
        ddp = {}  # each rank count's DDP step, the first layout on that many ranks
        for i, (label, ranks, *_) in enumerate(LAYOUTS):
            ddp.setdefault(ranks, statistics.median(r["ms"] for r in results[i]))
        for i, (label, ranks, stages, micro, *_) in enumerate(LAYOUTS):
            ms = statistics.median(r["ms"] for r in results[i])
            comm = statistics.median(r["comm"] for r in results[i])
            bubble = statistics.median(r["bubble"] for r in results[i])
            ideal = (stages - 1) / (micro + stages - 1)
            params = results[i][-1]["params"] or "all"
            share = f"{bubble / ms:.2f}" if stages > 1 else "-"
            print(f"| {label} | {ms:.1f} | {ms / ddp[ranks]:.2f}x | {comm:.1f} | {bubble:.1f} | {share} | "
                  f"{ideal:.2f} | {params} |")


if __name__ == "__main__":
    main()
