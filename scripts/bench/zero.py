"""ZeRO stages of dtrain-trainer side by side, and --zero 1 against PyTorch DDP + ZeroRedundancyOptimizer (ZeRO-1),
in one run on this machine.

Model: BENCHMARKS.md's bench model, GPT-2 with L=4, C=256, NH=4, T=256, V=256 (3.29M parameters, 13.2 MB fp32),
B=8 per rank, 1 thread per rank, Gloo over loopback. Cases, for each world size in --worlds:
  dtrain-zZ-PREC   `dtrain run -n W -- dtrain-trainer --zero Z [--precision PREC]`, Z = 0 (DDP), 1, 2, 3
  torch-zero1      torchrun --nproc_per_node W zero_torch_worker.py: DDP + ZeroRedundancyOptimizer(AdamW)
Precisions: fp32 always; bf16 when the trainer's --help offers --precision; bf16+r16 (bf16 with 16-bit gradient
reduction: --reduce-dtype bf16 for --zero 1..3, --ddp-comm-dtype bf16 for --zero 0) when it offers --reduce-dtype
(--precisions overrides). Every run is a
fresh job; rounds interleave the cases so machine noise hits all alike. Per run: medians over the steps after
--warmup of step_ms, comm_bytes (bytes rank 0 sent in the step, ring accounting; where a build's --zero 0 does not
report it, the table gives DDP's ring allreduce 2(W-1)/W x 4N instead) and comm_hidden; each cell is the median over rounds. tokens/s = W*B*T / step time.
PyTorch's FSDP is not compared: torch 1.13's torch.distributed.fsdp does not import on Python 3.11 (the driver tries
and prints the error)."""

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
L, C, V, MAXT = 4, 256, 256, 256
B, T = 8, 256
N_PARAMS = (V + MAXT) * C + L * (12 * C * C + 13 * C) + 2 * C
RUN_TIMEOUT_S = 1800  # one job of 4 ranks on 2 cores: about 10 steps of 3-10 s plus start-up, with a wide margin




def env_one_thread():
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "TORCHELASTIC_RESTART_COUNT"):
        env.pop(name, None)
    return env


def run(argv, cwd):
    proc = subprocess.run(argv, env=env_one_thread(), cwd=cwd, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")


def median_of(steps, key):
    values = [s[key] for s in steps if s.get(key) is not None]
    return statistics.median(values) if values else None


def dtrain_case(args, work, world, zero, precision):
    metrics = os.path.join(work, f"dtrain_w{world}_z{zero}_{precision}.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    cmd = [args.dtrain, "run", "-n", str(world), "--logs-dir", os.path.join(work, "runs"), "--", args.trainer] + \
        MODEL + ["--data", os.path.join(work, "data.bin"), "--batch-size", str(B), "--seq-len", str(T), "--steps",
                 str(args.warmup + args.steps), "--threads", "1", "--zero", str(zero), "--metrics", metrics,
                 "--log-every", "1000"]
    if precision != "fp32":
        cmd += ["--precision", precision.split("+")[0]]
    if precision.endswith("+r16"):
        cmd += ["--ddp-comm-dtype" if zero == 0 else "--reduce-dtype", precision.split("+")[0]]
    try:
        run(cmd, work)
    except RuntimeError as e:
        # A mixed-precision combination this build refuses becomes a row that says so, not a failed benchmark.
        refusal = [line for line in str(e).splitlines() if "is not supported" in line]
        if precision == "fp32" or not refusal:
            raise
        return {"refused": refusal[0].split("[error] ")[-1].strip()}
    with open(metrics) as f:
        steps = [json.loads(line) for line in f][args.warmup:]
    comm = median_of(steps, "comm_bytes")
    return {"step_ms": median_of(steps, "step_ms"), "comm_bytes": comm, "comm_reported": comm is not None,
            "comm_hidden": median_of(steps, "comm_hidden")}


def torch_case(args, work, world):
    out = os.path.join(work, f"torch_w{world}.json")
    run([args.python, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={world}", "--redirects", "1",
         "--tee", "1", "--log_dir", os.path.join(work, "torchrun_logs"), args.torch_worker] + MODEL +
        ["-B", str(B), "-T", str(T), "--threads", "1", "--warmup", str(args.warmup), "--steps", str(args.steps),
         "--out", out], work)
    with open(out) as f:
        result = json.loads(f.read())
    return {"step_ms": statistics.median(result["step_ms"]), "comm_bytes": None, "comm_reported": False,
            "comm_hidden": None, "torch": result["torch"]}


def trainer_precisions(args):
    if args.precisions:
        return args.precisions.split(",")
    help_text = subprocess.run([args.trainer, "--help"], capture_output=True, text=True).stdout
    if "--precision" not in help_text:
        return ["fp32"]
    return ["fp32", "bf16", "bf16+r16"] if "--reduce-dtype" in help_text else ["fp32", "bf16"]


def fsdp_import(python):
    proc = subprocess.run([python, "-c", "import torch.distributed.fsdp"], capture_output=True, text=True)
    return "imports" if proc.returncode == 0 else "does not import: " + proc.stderr.strip().splitlines()[-1]


def cc1plus_count():
    proc = subprocess.run(["pgrep", "-c", "cc1plus"], capture_output=True, text=True)
    return int(proc.stdout.strip() or 0)


def print_tables(med, refused, worlds, precisions, torch_version):
    for world in worlds:
        print(f"\n{world} ranks x 1 thread, B={B} per rank (global {world * B * T} tokens per step):\n")
        print("| case | tokens/s | ms/step | step time vs --zero 0 (same precision) | bytes sent per step, rank 0 "
              "| comm hidden |")
        print("| --- | ---: | ---: | ---: | ---: | ---: |")
        for precision in precisions:
            base = med[f"dtrain-w{world}-z0-{precision}"]["step_ms"]
            for zero in range(4):
                name = f"dtrain-w{world}-z{zero}-{precision}"
                if name in refused:
                    print(f"| dtrain --zero {zero} {precision} | refused by this build: {refused[name]} | | | | |")
                    continue
                m = med[name]
                comm = (f"{m['comm_bytes'] / 1e6:.2f} MB" if m["comm_reported"] else
                        f"({2 * (world - 1) / world * 4 * N_PARAMS / 1e6:.2f} MB: DDP ring allreduce, not reported)")
                hidden = f"{100 * m['comm_hidden']:.0f}%" if m["comm_hidden"] is not None else "-"
                print(f"| dtrain --zero {zero} {precision} | {world * B * T / (m['step_ms'] / 1000):.0f} | "
                      f"{m['step_ms']:.1f} | {m['step_ms'] / base:.2f} | {comm} | {hidden} |")
        if "bf16" not in precisions:
            print("| dtrain --zero 0..3 bf16 | (not run: this build's dtrain-trainer has no --precision) | | | | |")
        t = med[f"torch-w{world}"]
        print(f"| PyTorch {torch_version} DDP + ZeroRedundancyOptimizer (ZeRO-1) | "
              f"{world * B * T / (t['step_ms'] / 1000):.0f} | {t['step_ms']:.1f} | - | - | - |")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--trainer", required=True)
    parser.add_argument("--dtrain", required=True)
    parser.add_argument("--torch-worker", required=True)
    parser.add_argument("--python", default="/usr/bin/python3", help="Python with torch (torchrun)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=5, help="timed steps per run")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps per run")
    parser.add_argument("--worlds", default="2,4")
    parser.add_argument("--precisions", help="comma list (fp32,bf16,bf16+r16); default: what the trainer has")
    args = parser.parse_args()
    args.trainer, args.dtrain, args.torch_worker = map(os.path.abspath, (args.trainer, args.dtrain, args.torch_worker))
    worlds = [int(w) for w in args.worlds.split(",")]
    precisions = trainer_precisions(args)

    print(f"torch.distributed.fsdp (torch 1.13, {args.python}) {fsdp_import(args.python)}", flush=True)
    work = tempfile.mkdtemp(prefix="dtrain-bench-zero-")
    make_shard(os.path.join(work, "data.bin"), tokens=2_000_000)
    cases = {}
    for world in worlds:
        for precision in precisions:
            for zero in range(4):
                cases[f"dtrain-w{world}-z{zero}-{precision}"] = \
                    lambda w=world, z=zero, p=precision: dtrain_case(args, work, w, z, p)
        cases[f"torch-w{world}"] = lambda w=world: torch_case(args, work, w)
    samples = {name: [] for name in cases}
    torch_version, busy, refused = "?", [], {}
    load_before = os.getloadavg()[0]
    for r in range(args.rounds):
        for name, case in cases.items():
            before = cc1plus_count()
            result = case()
            after = cc1plus_count()
            if "refused" in result:
                refused[name] = result["refused"]
                print(f"round {r + 1}/{args.rounds} {name}: refused: {result['refused']}", file=sys.stderr, flush=True)
                continue
            if before or after:
                busy.append(f"round {r + 1} {name}")
            torch_version = result.get("torch", torch_version)
            samples[name].append(result)
            world = int(name.split("-w")[1].split("-")[0])
            print(f"round {r + 1}/{args.rounds} {name}: {world * B * T / (result['step_ms'] / 1000):.0f} tokens/s, "
                  f"{result['step_ms']:.1f} ms/step, comm {result['comm_bytes']}, hidden {result['comm_hidden']}"
                  f"{' (a compiler was running)' if before or after else ''}", file=sys.stderr, flush=True)

    med = {}
    for name, runs in samples.items():
        if not runs:
            continue
        med[name] = {"step_ms": statistics.median(s["step_ms"] for s in runs),
                     "comm_reported": runs[0]["comm_reported"],
                     "comm_bytes": median_of(runs, "comm_bytes"), "comm_hidden": median_of(runs, "comm_hidden")}
    print(f"\nmodel L={L} C={C} NH=4 T={T} V={V} ({N_PARAMS} parameters), B={B} per rank, 1 thread per rank; "
          f"{args.rounds} rounds x {args.steps} timed steps (+{args.warmup} warm-up), medians; load average "
          f"{load_before:.1f} before, {os.getloadavg()[0]:.1f} after (on {os.cpu_count()} cores); runs with a "
          f"compiler running: {', '.join(busy) if busy else 'none'}")
    print_tables(med, refused, worlds, precisions, torch_version)
    print("\nall samples (ms/step):")
    for name, runs in samples.items():
        print(f"  {name:22s} " + (" ".join(f"{s['step_ms']:.1f}" for s in runs) or "refused"))
    print()
    for world in worlds:
        z1, tz = med[f"dtrain-w{world}-z1-fp32"]["step_ms"], med[f"torch-w{world}"]["step_ms"]
        print(f"target --zero 1 >= PyTorch ZeRO-1 tokens/s, {world} ranks: {'met' if z1 <= tz else 'MISSED'} "
              f"({tz / z1:.2f}x PyTorch's tokens/s)")
    if 2 in worlds:
        z0, z3 = med["dtrain-w2-z0-fp32"]["step_ms"], med["dtrain-w2-z3-fp32"]["step_ms"]
        print(f"target --zero 3 step time <= 1.3x --zero 0 at 2 ranks (fp32): {'met' if z3 <= 1.3 * z0 else 'MISSED'}"
              f" ({z3 / z0:.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
