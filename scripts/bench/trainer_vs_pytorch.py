"""Training throughput, dtrain-trainer vs PyTorch eager (Debian's torch), side by side in one run on this machine.

Model: GPT-2 with L=4, C=256, NH=4, T=256, V=256 (Vp 256), batch B=8 per rank; one optimizer step = forward,
backward, global-norm clip, AdamW. Cases (each run is a fresh process; rounds interleave the cases so machine noise
hits all alike; medians over rounds of each run's median step time after warm-up):
  trainer-1t / torch-1t     one process, 1 thread    (dtrain-trainer --threads 1; torch.set_num_threads(1))
  trainer-2t / torch-2t     one process, 2 threads
  ddp-2x1t                  dtrain-trainer, 2 ranks x 1 thread started by `dtrain run -n 2` (Gloo over loopback:
                            DTRAIN_COMM_BACKEND=gloo), B=8 per rank (global batch 16), default DDP buckets (1 MiB,
                            then min(25 MiB, max(1 MiB, gradient / 8)): 1.57 MiB for this 13 MB gradient); compared
                            with trainer-1t (ideal: 2x its tokens/s) and its "comm_hidden": the fraction of each
                            step's gradient allreduce time that overlapped backward, as DdpReducer measures it (median
                            over steps)
  ddp-2x1t-b25              the same with --ddp-bucket-mb 25 (PyTorch's bucket_cap_mb, the default before the rule:
                            1 MiB then 11.6 MiB, the last bucket holding wte, which backward finishes last)
--ddp-only runs trainer-1t and the two DDP cases only.
The trainer reads a random-token shard through its prefetch thread; PyTorch's bench reuses one random batch.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

import numpy as np

MODEL = ["--layers", "4", "--channels", "256", "--heads", "4", "--max-seq-len", "256", "--vocab", "256"]
B, T = 8, 256


def make_shard(path, tokens=400_000):
    header = np.zeros(256, dtype=np.int32)
    header[:3] = [20240520, 1, tokens]
    data = np.random.default_rng(0).integers(0, 256, tokens, dtype=np.uint16)
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(data.tobytes())


def env_for(threads):
    # Gloo named explicitly: the default backend for ranks on one node is shared memory.
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads), DTRAIN_COMM_BACKEND="gloo")
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "TORCHELASTIC_RESTART_COUNT"):
        env.pop(name, None)
    return env


def run(argv, env, cwd):
    proc = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc.stdout


def trainer_case(args, work, threads, ranks, tag, extra=()):
    metrics = os.path.join(work, f"{tag}.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    cmd = [args.trainer] + MODEL + ["--data", os.path.join(work, "data.bin"), "--batch-size", str(B), "--seq-len",
                                    str(T), "--steps", str(args.warmup + args.steps), "--threads", str(threads),
                                    "--metrics", metrics, "--log-every", "1000"] + list(extra)
    if ranks > 1:
        cmd = [args.dtrain, "run", "-n", str(ranks), "--logs-dir", os.path.join(work, "runs"), "--"] + cmd
    run(cmd, env_for(threads), work)
    with open(metrics) as f:
        steps = [json.loads(line) for line in f][args.warmup:]
    ms = statistics.median(s["step_ms"] for s in steps)
    hidden = [s["comm_hidden"] for s in steps if s.get("comm_hidden") is not None]
    return {"tokens_per_s": B * T * ranks / (ms / 1000.0), "step_ms": ms,
            "comm_hidden": statistics.median(hidden) if hidden else None}


def torch_case(args, work, threads):
    out = run(["/usr/bin/python3", args.reference, "bench", "--threads", str(threads), "-B", str(B), "-T", str(T),
               "--warmup", str(args.warmup), "--steps", str(args.steps)] + MODEL, env_for(threads), work)
    result = json.loads(out.strip().splitlines()[-1])
    return {"tokens_per_s": result["tokens_per_s"], "step_ms": result["step_ms_median"], "comm_hidden": None,
            "torch": result["torch"]}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--trainer", required=True)
    parser.add_argument("--dtrain", required=True)
    parser.add_argument("--reference", required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=6, help="timed steps per run")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps per run")
    parser.add_argument("--ddp-only", action="store_true", help="only trainer-1t and the DDP cases")
    args = parser.parse_args()
    args.trainer, args.dtrain, args.reference = map(os.path.abspath, (args.trainer, args.dtrain, args.reference))

    load_before = os.getloadavg()[0]
    work = tempfile.mkdtemp(prefix="dtrain-bench-trainer-")
    make_shard(os.path.join(work, "data.bin"))
    cases = {
        "trainer-1t": lambda: trainer_case(args, work, 1, 1, "t1"),
        "torch-1t": lambda: torch_case(args, work, 1),
        "trainer-2t": lambda: trainer_case(args, work, 2, 1, "t2"),
        "torch-2t": lambda: torch_case(args, work, 2),
        "ddp-2x1t": lambda: trainer_case(args, work, 1, 2, "ddp"),
        "ddp-2x1t-b25": lambda: trainer_case(args, work, 1, 2, "ddpb25", ["--ddp-bucket-mb", "25"]),
    }
    if args.ddp_only:
        cases = {name: case for name, case in cases.items() if name == "trainer-1t" or name.startswith("ddp")}
    samples = {name: [] for name in cases}
    torch_version = "?"
    for r in range(args.rounds):
        for name, case in cases.items():
            result = case()
            torch_version = result.get("torch", torch_version)
            samples[name].append(result)
            print(f"round {r + 1}/{args.rounds} {name}: {result['tokens_per_s']:.0f} tokens/s, "
                  f"{result['step_ms']:.1f} ms/step"
                  + (f", comm hidden {result['comm_hidden']:.2f}" if result["comm_hidden"] is not None else ""),
                  file=sys.stderr, flush=True)

    med = {name: statistics.median(s["tokens_per_s"] for s in v) for name, v in samples.items()}
    ms = {name: statistics.median(s["step_ms"] for s in v) for name, v in samples.items()}
    hidden = statistics.median(s["comm_hidden"] for s in samples["ddp-2x1t"])
    hidden_b25 = statistics.median(s["comm_hidden"] for s in samples["ddp-2x1t-b25"])

    torch_note = "" if args.ddp_only else f"; torch {torch_version}"
    print(f"model L=4 C=256 NH=4 T={T} V=256, B={B} per rank{torch_note}; {args.rounds} rounds x "
          f"{args.steps} timed steps (+{args.warmup} warm-up); medians; load average {load_before:.1f} before, "
          f"{os.getloadavg()[0]:.1f} after (on {os.cpu_count()} cores)")
    if not args.ddp_only:
        print()
        print("| threads | dtrain-trainer tokens/s | PyTorch eager tokens/s | ratio | dtrain ms/step | PyTorch ms/step |")
        print("| ---: | ---: | ---: | ---: | ---: | ---: |")
        for t in (1, 2):
            a, b = f"trainer-{t}t", f"torch-{t}t"
            print(f"| {t} | {med[a]:.0f} | {med[b]:.0f} | {med[a] / med[b]:.2f} | {ms[a]:.1f} | {ms[b]:.1f} |")
    print()
    print("| run | tokens/s | ms/step | speedup vs 1 rank x 1 thread | comm hidden behind backward |")
    print("| --- | ---: | ---: | ---: | ---: |")
    print(f"| 1 rank x 1 thread, B=8 | {med['trainer-1t']:.0f} | {ms['trainer-1t']:.1f} | 1.00 | - |")
    print(f"| 2 ranks x 1 thread (DDP, Gloo), B=8 each, default buckets (1 MiB, then 1.57 MiB) | "
          f"{med['ddp-2x1t']:.0f} | {ms['ddp-2x1t']:.1f} | {med['ddp-2x1t'] / med['trainer-1t']:.2f} | "
          f"{100 * hidden:.0f}% |")
    print(f"| the same with `--ddp-bucket-mb 25` (1 MiB, then 11.6 MiB) | {med['ddp-2x1t-b25']:.0f} | "
          f"{ms['ddp-2x1t-b25']:.1f} | {med['ddp-2x1t-b25'] / med['trainer-1t']:.2f} | {100 * hidden_b25:.0f}% |")
    print()
    print("all samples (tokens/s):")
    for name, v in samples.items():
        print(f"  {name:12s} " + " ".join(f"{s['tokens_per_s']:.0f}" for s in v))
    print("  ddp comm hidden " + " ".join(f"{s['comm_hidden']:.2f}" for s in samples["ddp-2x1t"]))
    print("  ddp (--ddp-bucket-mb 25) comm hidden " + " ".join(f"{s['comm_hidden']:.2f}" for s in samples["ddp-2x1t-b25"]))
    targets = [f">= 80% of communication hidden with the default buckets: {'met' if hidden >= 0.8 else 'MISSED'}"]
    if not args.ddp_only:
        ratio_ok = all(med[f"trainer-{t}t"] >= med[f"torch-{t}t"] for t in (1, 2))
        targets.insert(0, f"tokens/s >= PyTorch's on 1 and 2 threads: {'met' if ratio_ok else 'MISSED'}")
    print("\ntargets: " + "; ".join(targets))
    return 0


if __name__ == "__main__":
    sys.exit(main())
