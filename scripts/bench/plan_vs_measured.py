"""`dtrain plan`'s predicted step time against dtrain-trainer's measured one, for the same layouts on this machine,
with the machine's own measured numbers given to the plan.

Model: BENCHMARKS.md's bench model, GPT-2 with L=4, C=256, NH=4, T=256, V=256, fp32, global batch 8 sequences,
1 thread a rank, every collective and send over --backend: shm (the default: what dtrain-trainer uses on one node,
the job's and every group's communicator in shared memory) or gloo (DTRAIN_COMM_BACKEND=gloo, TCP on loopback), the
bench below run with the same backend.
Layouts: DDP on 2 ranks (b=4), TP=2 (b=8), PP=2 with 1F1B over m=4 (b=2) and m=8 (b=1), and T=2 x P=2 on 4 ranks
(m=4, b=2).

What the plan is given, measured in every round with dtrain's own tools (N: the layout's ranks):
  --gpu-tflops            the model FLOP/s one rank achieves: a single-process `dtrain-trainer` run of the model
                          (1 thread, b=4, 2 micro-steps), model FLOPs a step (6P + 12*L*h*s a token, as the plan and
                          the trainer count them) over its median step; with N ranks on fewer cores, a rank's share,
                          rate x cores / N. It is the plan's "achieved, not peak" rate; the kernel's peak,
                          `dtrain-trainer gemm-rate --threads 1` (what `dtrain doctor` caches), is printed beside it
                          with the plan's prediction from it (shared the same way).
  --intra-node-bw         busbw of `dtrain run -n 2 -- dtrain bench allreduce -b 64M -e 64M`
  --collective-latency-us the time of one small collective issued after compute, as a step issues its own:
                          `dtrain run -n 2 -- dtrain bench allreduce -b 4K -e 4K --busy-ms 10` (back to back, without
                          --busy-ms, the runs fall into step with the scheduler's tick and wait a whole one each)
Every group of these layouts (tensor-, pipeline- or data-parallel) has 2 ranks, so the bench runs over 2. (Two such
benches at once, as the T=2 x P=2 layout has two tensor-parallel groups, measured 2.4-2.9 ms and 0.54-0.59 GB/s, more
than that layout's stage-0 collectives cost, 1.6-2.2 ms each: its groups sit in different stages and seldom
communicate at the same time.)
Each layout runs through `dtrain run`; measured: the median step_ms after the first 2 of --steps steps, rank 0's
comm_exposed_ms and pp_bubble_ms (its waits for its pipeline neighbours); the rest of the step is compute (and the
optimizer). The plan's parts: compute (with the optimizer), the exposed communication (tensor-parallel and
data-parallel) and the pipeline's bubble with its transfers. Rounds interleave the inputs and the layouts so machine
noise hits all alike; each number is the median over rounds."""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from trainer_vs_pytorch import make_shard  # noqa: E402  the same llm.c shard of random tokens

L, C, NH, T, V, GLOBAL = 4, 256, 4, 256, 256, 8
MODEL = ["--layers", str(L), "--channels", str(C), "--heads", str(NH), "--max-seq-len", str(T), "--vocab", str(V),
         "--seq-len", str(T), "--threads", "1"]
# label, ranks, tp, pp, micro-batch b, micro-batches m
LAYOUTS = (("DDP, 2 ranks", 2, 1, 1, 4, 1),
           ("TP=2", 2, 2, 1, 8, 1),
           ("PP=2, 1f1b, m=4", 2, 1, 2, 2, 4),
           ("PP=2, 1f1b, m=8", 2, 1, 2, 1, 8),
           ("T=2 x P=2, m=4, 4 ranks", 4, 2, 2, 2, 4))


BACKEND = "shm"  # --backend


def clean_env():
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")}
    env.update(DTRAIN_COMM_BACKEND=BACKEND, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    return env


def model_flops_per_step(params):
    return (6 * params + 12 * L * C * T) * GLOBAL * T


def read_steps(path):
    with open(path) as f:
        return [json.loads(line) for line in f][2:]


def layout_flags(tp, pp, b, m):
    flags = ["--batch-size", str(b), "--grad-accum", str(m)]
    if tp > 1:
        flags += ["--tp", str(tp)]
    if pp > 1:
        flags += ["--pp", str(pp), "--pp-schedule", "1f1b"]
    return flags


def run_layout(args, work, index, layout):
    _, ranks, tp, pp, b, m = layout
    metrics = os.path.join(work, f"layout{index}.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    trainer = [args.trainer, *MODEL, *layout_flags(tp, pp, b, m), "--steps", str(args.steps),
               "--data", os.path.join(work, "data.bin"), "--metrics", metrics]
    cmd = [args.dtrain, "run", "-n", str(ranks), "--logs-dir", os.path.join(work, "runs"), "--", *trainer]
    subprocess.run(cmd, check=True, capture_output=True, text=True, env=clean_env(), timeout=600)
    lines = read_steps(metrics)
    return {"ms": statistics.median(s["step_ms"] for s in lines),
            "comm": statistics.median(s.get("comm_exposed_ms", 0.0) for s in lines),
            "bubble": statistics.median(s.get("pp_bubble_ms", 0.0) for s in lines)}


def achieved_rate(args, work):
    """Model FLOP/s of the model on one rank of 1 thread (a single-process dtrain-trainer run)."""
    path = os.path.join(work, "one.jsonl")
    if os.path.exists(path):
        os.remove(path)
    cmd = [args.trainer, *MODEL, "--batch-size", "4", "--grad-accum", "2", "--steps", str(args.steps),
           "--data", os.path.join(work, "data.bin"), "--metrics", path]
    subprocess.run(cmd, check=True, capture_output=True, text=True, env=clean_env(), timeout=600)
    step_ms = statistics.median(s["step_ms"] for s in read_steps(path))
    return model_flops_per_step(args.params) / (step_ms / 1e3)


def bench(args, work, size, iters, busy_ms=0):
    """(time in ms, busbw in GB/s) of `dtrain run -n 2 -- dtrain bench allreduce -b SIZE -e SIZE` (rank 0's row)."""
    cmd = [args.dtrain, "run", "-n", "2", "--logs-dir", os.path.join(work, "runs"), "--", args.dtrain, "bench",
           "allreduce", "-b", size, "-e", size, "-n", str(iters), "-w", "3", "--busy-ms", str(busy_ms),
           "--backend", BACKEND]
    done = subprocess.run(cmd, check=True, capture_output=True, text=True, env=clean_env(), timeout=600)
    for line in done.stdout.splitlines():
        fields = line.split()
        if len(fields) == 7 and fields[0] == "[0]" and fields[1].isdigit():
            return float(fields[3]), float(fields[5])
    raise RuntimeError("no result row in dtrain bench's output:\n" + done.stdout[-2000:])


def gemm_rate(args):
    done = subprocess.run([args.trainer, "gemm-rate", "--threads", "1"], check=True, capture_output=True, text=True,
                          env=clean_env(), timeout=120)
    return json.loads(done.stdout.strip().splitlines()[-1])["flops_per_s"]


def measure_inputs(args, work, rounds):
    rounds.append({"gemm": gemm_rate(args), "achieved": achieved_rate(args, work),
                   "latency_ms": bench(args, work, "4K", 40, busy_ms=10)[0], "busbw": bench(args, work, "64M", 5)[1]})


def median_inputs(rounds):
    return {k: statistics.median(r[k] for r in rounds) for k in ("gemm", "achieved", "latency_ms", "busbw")}


def share(args, rate, ranks):
    """A rank's share of `rate` (one rank on a core of its own) when `ranks` ranks run on the machine's cores."""
    return rate * min(1.0, args.cores / ranks)


def predict(args, layout, rate, inputs):
    _, ranks, tp, pp, b, _ = layout
    cmd = [args.dtrain, "plan", "--layers", str(L), "--hidden", str(C), "--heads", str(NH), "--seq-len", str(T),
           "--vocab", str(V), "--gpus", str(ranks), "--gpus-per-node", str(ranks), "--tp", str(tp), "--pp", str(pp),
           "--sequence-parallel", "off", "--attention", "eager", "--precision", "fp32", "--zero", "0",
           "--recompute", "none", "--micro-batch", str(b), "--global-batch", str(GLOBAL),
           "--gpu-tflops", f"{rate / 1e12:.6g}", "--intra-node-bw", f"{inputs['busbw']:.6g}",
           "--gpu-memory", "128GB", "--json"]
    if not args.nccl_latency:
        cmd += ["--collective-latency-us", f"{inputs['latency_ms'] * 1e3:.6g}"]
    done = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=60)
    strategy = json.loads(done.stdout)["strategies"][0]
    parts = strategy["predicted"]["breakdown"]
    return {"ms": strategy["predicted"]["step_s"] * 1e3,
            "comm": (parts["tensor_parallel_s"] + parts["data_parallel_exposed_s"]) * 1e3,
            "bubble": (parts["pipeline_bubble_s"] + parts["pipeline_transfer_s"]) * 1e3,
            "compute": (parts["compute_s"] + parts["optimizer_s"]) * 1e3}


def print_table(results, inputs, args):
    print("| layout | measured ms | predicted ms | ratio | measured parts vs predicted parts (ms): compute, exposed "
          "comm, bubble + pipeline transfers | predicted from the kernel GEMM peak (ms, ratio) |")
    print("| --- | --- | --- | --- | --- | --- |")
    for i, layout in enumerate(LAYOUTS):
        got = {k: statistics.median(r[k] for r in results[i]) for k in ("ms", "comm", "bubble")}
        got["compute"] = got["ms"] - got["comm"] - got["bubble"]
        want = predict(args, layout, share(args, inputs["achieved"], layout[1]), inputs)
        peak = predict(args, layout, share(args, inputs["gemm"], layout[1]), inputs)
        print(f"| {layout[0]} | {got['ms']:.1f} | {want['ms']:.1f} | {want['ms'] / got['ms']:.2f} | "
              f"{got['compute']:.0f} vs {want['compute']:.0f}, {got['comm']:.0f} vs {want['comm']:.0f}, "
              f"{got['bubble']:.0f} vs {want['bubble']:.0f} | {peak['ms']:.1f}, {peak['ms'] / got['ms']:.2f} |")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--trainer", required=True)
    parser.add_argument("--dtrain", required=True)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--steps", type=int, default=7)
    parser.add_argument("--nccl-latency", action="store_true",
                        help="give the plan no measured latency (its NCCL model), to see what it changes")
    parser.add_argument("--backend", choices=("shm", "gloo"), default="shm")
    args = parser.parse_args()
    global BACKEND
    BACKEND = args.backend
    args.cores = len(os.sched_getaffinity(0))
    args.params = 12 * L * C * C + 13 * L * C + V * C + T * C + 2 * C  # GPT-2 with biases, tied head, Vp = V
    with tempfile.TemporaryDirectory(prefix="dtrain-plan-vs-") as work:
        make_shard(os.path.join(work, "data.bin"))
        input_rounds, results = [], {i: [] for i in range(len(LAYOUTS))}
        for _ in range(args.rounds):
            measure_inputs(args, work, input_rounds)
            for i, layout in enumerate(LAYOUTS):
                results[i].append(run_layout(args, work, i, layout))
        inputs = median_inputs(input_rounds)
        print(f"Inputs (medians over {args.rounds} rounds; a rank's share of {args.cores} cores with more ranks): "
              f"achieved {inputs['achieved'] / 1e9:.1f} GFLOP/s a rank (kernel GEMM peak {inputs['gemm'] / 1e9:.1f}), "
              f"allreduce busbw {inputs['busbw']:.3f} GB/s, small allreduce {inputs['latency_ms'] * 1e3:.0f} us")
        print()
        print_table(results, inputs, args)


if __name__ == "__main__":
    main()
