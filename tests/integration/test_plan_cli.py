"""`dtrain plan` as a user runs it (the real binary):
  - the ZeRO paper's example (P = 7.5e9, N = 64, K = 12) prints 120.0, 31.4, 16.6 and 1.9 GB per GPU, and --json
    carries the same numbers in bytes;
  - the advisor agrees with dtrain-trainer: for the trainer's tiny model on 2 ranks under `dtrain run -n 2`, at
    --zero 1, 2, 3 in fp32 and bf16 (and a shape given by flags, fp16), the model-state bytes of
    `dtrain plan --trainer-accounting` equal the trainer's mem_params/grads/optim_bytes metrics;
  - the job spec it recommends passes `dtrain validate`, and its dtrain-trainer flags run;
  - bad input is refused with exit 2 and a message naming the flag, never a crash.
"""

import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "parity"))
import trainer_harness as h  # noqa: E402

h.require_binaries(h.DTRAIN, h.TRAINER)
work = h.workdir()


SHAPE4 = ("--layers", "4", "--hidden", "64", "--heads", "4", "--seq-len", "64", "--vocab", "256", "--gpus", "2")


def plan(*args, expect=0):
    proc = subprocess.run([h.DTRAIN, "plan", *args], capture_output=True, text=True, timeout=60)
    h.check(proc.returncode == expect,
            f"dtrain plan {' '.join(args)}: exit {proc.returncode} (expected {expect}); stderr: {proc.stderr.strip()}")
    return proc


def plan_json(*args):
    proc = plan(*args, "--json")
    return json.loads(proc.stdout) if proc.returncode == 0 else None


# --- The ZeRO paper's example ---
text = plan("--params", "7.5e9", "--gpus", "64").stdout
rows = {line.split()[0]: line for line in text.splitlines() if line.split()[:1] and line.split()[0] in
        ("DDP", "ZeRO-1", "ZeRO-2", "ZeRO-3/FSDP")}
for name, gb in (("DDP", "120.0 GB"), ("ZeRO-1", "31.4 GB"), ("ZeRO-2", "16.6 GB"), ("ZeRO-3/FSDP", "1.9 GB")):
    h.check(name in rows and gb in rows[name], f"paper example: {name} needs {gb} per GPU: {rows.get(name)!r}")
report = plan_json("--params", "7.5e9", "--gpus", "64")
states = [s["memory"]["model_states_bytes"] for s in report["strategies"]]
h.check(states == [120_000_000_000, 31_406_250_000, 16_640_625_000, 1_875_000_000],
        f"paper example in JSON, bytes: {states}")
h.check(report["recommendation"]["strategy"]["name"] == "ZeRO-1",
        f"120 GB does not fit 80 GB, ZeRO-1 does: recommended {report['recommendation']['strategy']['name']}")

# --- The same numbers in text and JSON, with a shape, bandwidths and a global batch ---
args = ["--params", "1e9", "--gpus", "16", "--layers", "16", "--hidden", "2048", "--heads", "16", "--seq-len", "1024",
        "--micro-batch", "4", "--global-batch", "1000", "--intra-node-bw", "100", "--inter-node-bw", "10"]
text = plan(*args).stdout
report = plan_json(*args)
for s in report["strategies"]:
    row = next((line for line in text.splitlines() if line.startswith(s["name"] + " ")), "")
    mem = s["memory"]
    want = [f"{mem['model_states_bytes'] / 1e9:.1f} GB", f"{mem['activations_bytes'] / 1e9:.1f} GB",
            f"{mem['total_bytes'] / 1e9:.1f} GB", f" {s['accumulation']['micro_steps']} "]
    h.check(all(w in row for w in want), f"text row of {s['name']} carries the JSON's numbers {want}: {row!r}")
# 1000 sequences / (4 x 16) = 15.6 -> 16 micro-steps, 1024; DDP's allreduce crosses nodes: 2 x 15/16 x 2e9 bytes.
ddp = report["strategies"][0]
h.check(ddp["accumulation"] == {"micro_steps": 16, "global_batch": 1024, "exact": False},
        f"accumulation reaching --global-batch 1000: {ddp['accumulation']}")
# Plus 25 allreduces' latency (buckets of 40M parameters), NCCL's tree over 2 nodes of 8: 92.4 us each.
h.check(ddp["comm"]["data_parallel_bytes"] == 3_750_000_000 and abs(ddp["comm"]["latency_s"] - 25 * 92.4e-6) < 1e-9
        and abs(ddp["comm"]["seconds"] - 0.375 - 25 * 92.4e-6) < 1e-9, f"DDP across nodes: {ddp['comm']}")
h.check("is not a multiple of 64" in text, "the text says the global batch was rounded up")

# --- Scaling: DDP's last bucket is exposed, --ddp-bucket-mb sets the buckets (BENCHMARKS.md "dtrain plan against
# measured scaling": the trainer's bench model on 2 nodes over 200 Mbit/s, compute 1 s a step) ---
bench = ["--layers", "4", "--hidden", "256", "--heads", "4", "--seq-len", "256", "--vocab", "256", "--micro-batch", "8",
         "--precision", "fp32", "--gpus", "2", "--gpus-per-node", "1", "--inter-node-bw", "0.025",
         "--gpu-tflops", repr((6 * 3290624 + 12 * 4 * 256 * 256) * 8 * 256 / 1e12)]  # model FLOPs: 6P + 12Lhs a token
# The gradients' allreduce: 0.5265 s, plus 36.4 us of latency (2 ranks on 2 nodes) for each of its collectives:
# one by default and with 25 MiB buckets, 7 with 2 MiB ones.
# Default: the trainer's rule, buckets of gradient / 8 = 1,645,312 bytes after the first MiB (ddp/buckets.h).
for bucket, last, count in (([], 596736, 1), (["--ddp-bucket-mb", "25"], 12113920, 1),
                            (["--ddp-bucket-mb", "2"], 1628160, 7)):
    scaling = (plan_json(*bench, *bucket) or {"strategies": [{}]})["strategies"][0].get("scaling") or {}
    want = (13162496 / 25e6 + count * 36.4e-6) * last / 13162496
    h.check(abs(scaling.get("exposed_comm_s", -1) - want) < 1e-9 and
            abs(scaling.get("efficiency_overlap", -1) - 1 / (1 + want)) < 1e-9,
            f"{bucket or 'default buckets'}: the last bucket of {last} bytes ({want:.4f} s) is exposed: {scaling}")
h.check("a step still exposed" in plan(*bench).stdout, "the text gives the exposed communication")

# --- dtrain plan agrees with dtrain-trainer's own metrics ---
shard = h.make_text_shard(work)


def trainer_memory(model_args, zero, precision):
    metrics = os.path.join(work, f"m_{zero}_{precision}_{len(model_args)}.jsonl")
    run = h.launched(2, model_args + ["--data", shard, "--batch-size", "1", "--seq-len", "32", "--steps", "1",
                                      "--threads", "1", "--zero", str(zero), "--precision", precision,
                                      "--metrics", metrics], work)
    if not h.check(run.code == 0, f"dtrain-trainer --zero {zero} --precision {precision} ran"):
        return None
    line = h.metrics(metrics)[-1]
    return {k: line.get(f"mem_{k}_bytes") for k in ("params", "grads", "optim")}


CUSTOM = ["--layers", "2", "--channels", "128", "--heads", "4", "--max-seq-len", "64", "--vocab", "256"]
cases = [(["--model", "tiny"], ["--model", "tiny"], precision) for precision in ("fp32", "bf16")]
cases.append((CUSTOM, ["--layers", "2", "--hidden", "128", "--heads", "4", "--seq-len", "64", "--vocab", "256"],
              "fp16"))
for trainer_model, plan_model, precision in cases:
    advice = plan_json(*plan_model, "--gpus", "2", "--precision", precision, "--trainer-accounting")
    for zero in (1, 2, 3):
        measured = trainer_memory(trainer_model, zero, precision)
        predicted = advice["strategies"][zero]["trainer"] if advice else None
        predicted = predicted and {k: predicted[f"{k}_bytes"] for k in ("params", "grads", "optim")}
        h.check(measured is not None and measured == predicted,
                f"{' '.join(plan_model)} {precision} --zero {zero}: dtrain plan {predicted} == trainer {measured}")
    zero0 = (advice or {"strategies": [{}]})["strategies"][0].get("trainer") or {}
    h.check("params_bytes" not in zero0, "--zero 0 has no model-state columns (dtrain-trainer reports no mem_* "
            f"model-state metrics there): {zero0}")

# Activations: the trainer's mem_activations_bytes (1 rank, --zero 1, B=1, T=32) against the plan's accounting
# for each recomputation, within 5% (the plan leaves out attention backward's scratch, threads x 64 x T floats).
for precision in ("fp32", "bf16"):
    for recompute in ("none", "selective", "full"):
        metrics = os.path.join(work, f"act_{precision}_{recompute}.jsonl")
        run = h.trainer(["--model", "tiny", "--data", shard, "--batch-size", "1", "--seq-len", "32", "--steps", "1",
                         "--threads", "1", "--zero", "1", "--precision", precision, "--recompute", recompute,
                         "--metrics", metrics], work)
        measured = h.metrics(metrics)[-1].get("mem_activations_bytes") if run.code == 0 else None
        advice = plan_json("--model", "tiny", "--gpus", "1", "--precision", precision, "--trainer-accounting",
                           "--micro-batch", "1", "--seq-len", "32", "--recompute", recompute, "--zero", "1")
        strategies = (advice or {}).get("strategies") or [{}]
        predicted = (strategies[0].get("trainer") or {}).get("activations_bytes")
        h.check(measured and predicted and abs(predicted - measured) <= 0.05 * measured,
                f"tiny {precision} --recompute {recompute}: dtrain plan's activations {predicted} within 5% of the "
                f"trainer's {measured}")

# --- The recommendation runs: its spec validates, its flags train ---
advice = plan_json("--model", "tiny", "--gpus", "2", "--global-batch", "8", "--micro-batch", "2")
rec = advice["recommendation"]
h.check(rec["strategy"]["name"] == "DDP" and rec["strategy"]["accumulation"]["micro_steps"] == 2,
        f"tiny fits: DDP with 2 micro-steps of 2 x 2 ranks: {rec['strategy']['name']}")
spec = os.path.join(work, "plan.yaml")
with open(spec, "w") as f:
    f.write("\n".join(rec["job_spec"]) + "\n")
proc = subprocess.run([h.DTRAIN, "validate", spec], capture_output=True, text=True, timeout=60)
h.check(proc.returncode == 0, f"the recommended job spec validates: {proc.stdout}{proc.stderr}")
metrics = os.path.join(work, "recommended.jsonl")
run = h.launched(2, rec["trainer_args"] + ["--data", shard, "--steps", "1", "--threads", "1", "--metrics", metrics],
                 work)
h.check(run.code == 0, f"the recommended dtrain-trainer flags run: {' '.join(rec['trainer_args'])}")

# --- Bad input: exit 2, a message that names the flag, never a crash ---
BAD = [
    (["--params", "-1", "--gpus", "8"], "--params"),
    (["--params", "0", "--gpus", "8"], "--params"),
    (["--params", "lots", "--gpus", "8"], "--params"),
    (["--params", "nan", "--gpus", "8"], "--params"),
    (["--params", "1e9", "--gpus", "0"], "--gpus"),
    (["--params", "1e9", "--gpus", "-8"], "--gpus"),
    (["--params", "1e9", "--gpus", "eight"], "--gpus"),
    (["--params", "1e9"], "--gpus is required"),
    (["--gpus", "8"], "give the model's size"),
    (["--model", "gpt9", "--gpus", "8"], "unknown model preset 'gpt9'"),
    (["--model", "tiny", "--params", "1e9", "--gpus", "8"], "give one of them"),
    (["--model", "tiny", "--gpus", "4", "--tp", "3"], "--tp 3 does not divide the 4 attention heads"),
    (["--model", "tiny", "--gpus", "2", "--pp", "3"], "--pp 3 cannot split the 2 layers"),
    (["--model", "tiny", "--gpus", "2", "--tp", "0"], "--tp 0"),
    (["--model", "tiny", "--gpus", "2", "--seq-len", "65"], "--seq-len 65 is longer"),
    (["--params", "1e9", "--gpus", "8", "--gpu-memory", "80XB"], "--gpu-memory '80XB' is not a size"),
    (["--params", "1e9", "--gpus", "8", "--gpu-memory", "-80GB"], "--gpu-memory"),
    (["--params", "1e9", "--gpus", "8", "--precision", "int8"], "--precision"),
    (["--params", "1e9", "--gpus", "8", "--bottleneck", "disk"], "--bottleneck"),
    (["--params", "1e9", "--gpus", "8", "--inter-node-bw", "0"], "--inter-node-bw"),
    (["--params", "1e9", "--gpus", "8", "--ddp-bucket-mb", "-1"], "--ddp-bucket-mb"),
    (["--params", "1e9", "--gpus", "12", "--gpus-per-node", "8"], "not a whole number of nodes"),
    (["--params", "1e9", "--gpus", "8", "--layers", "4"], "the shape is incomplete"),
    (["--params", "1e9", "--gpus", "8", "--trainer-accounting"], "--trainer-accounting needs"),
    (["--params", "1e9", "--gpus", "8", "--micro-batch", "99999999999"], "--micro-batch"),
    (["--params", "0x10", "--gpus", "8"], "--params: '0x10' is not a decimal number"),
    (["--params", "inf", "--gpus", "8"], "--params: 'inf' is not a decimal number"),
    (["--params", "1e-300", "--gpus", "8"], "--params 1e-300: must be a number from 1 to 1e+16"),
    (["--params", "1e9", "--gpus", "0x10"], "--gpus: '0x10' is not a whole decimal number"),
    (["--params", "1e9", "--gpus", "8", "--gpu-memory", "1e10GB"], "--gpu-memory '1e10GB' is more than"),
    (["--params", "1e9", "--gpus", "8", "--gpu-memory", "1e308GiB"], "--gpu-memory '1e308GiB' is more than"),
    (["--params", "1e9", "--gpus", "8", "--gpu-tflops", "1e-300"], "--gpu-tflops 1e-300"),
    (["--model", "tiny", "--gpus", "2", "--pp-virtual", "2"], "--pp-virtual 2 interleaves the chunks of a pipeline"),
    (["--model", "tiny", "--gpus", "2", "--pp", "2", "--pp-virtual", "0"], "--pp-virtual 0"),
    (["--model", "tiny", "--gpus", "2", "--pp", "2", "--pp-virtual", "2", "--framework", "deepspeed"],
     "DeepSpeed's pipeline has no interleaved schedule"),
    ([*SHAPE4, "--pp", "2", "--pp-virtual", "4", "--global-batch", "4"], "--pp x --pp-virtual = 8 chunks"),
    ([*SHAPE4, "--pp", "2", "--pp-virtual", "2", "--global-batch", "3"], "a multiple of the pipeline stages (2)"),
]
# --pp-virtual: the interleaved layout itself, with its bubble over v*m and the trainer's flag.
report = plan_json(*SHAPE4, "--pp", "2", "--pp-virtual", "2", "--global-batch", "4")
best = report["strategies"][0]
h.check(best["pp"] == 2 and best["virtual_stages"] == 2 and "2 x 2 interleaved" in best["name"],
        f"--pp 2 --pp-virtual 2 plans the interleaved layout: {best['name']}")
text = plan(*SHAPE4, "--pp", "2", "--pp-virtual", "2", "--global-batch", "4").stdout
h.check("--pp 2 --pp-virtual 2" in text and "(p - 1)/(v*m + p - 1), v = 2" in text,
        "the text names the trainer's --pp-virtual 2 and the interleaved bubble")

for argv, needle in BAD:
    proc = plan(*argv, expect=2)
    h.check(needle in proc.stderr and proc.stdout == "",
            f"dtrain plan {' '.join(argv)}: refused naming {needle!r}: {proc.stderr.strip()!r}")

# Whole numbers are decimal: a leading zero is not C's octal.
report = plan_json("--params", "1e9", "--gpus", "016", "--gpus-per-node", "08")
h.check(report["request"]["gpus"] == 16 and report["request"]["gpus_per_node"] == 8,
        f"--gpus 016 --gpus-per-node 08 are 16 and 8: {report['request']}")

# --gpu: the preset's memory, rate and bandwidths, each overridable; times with only --model, --gpus and --gpu.
report = plan_json("--model", "llama2-70b", "--gpus", "64", "--gpu", "h100-sxm")
req = report["request"]
h.check(req["gpu"] == "h100-sxm" and req["gpu_memory_bytes"] == 80e9 and req["gpu_peak_flops"] == 989e12 and
        req["gpu_flops"] == 494.5e12 and req["intra_node_bw_bytes_per_s"] == 450e9 and
        req["inter_node_bw_bytes_per_s"] == 50e9, f"--gpu h100-sxm: {req}")
h.check(((report["recommendation"] or {}).get("strategy") or {}).get("scaling") is not None,
        f"--gpu alone gives times: {report['recommendation']}")
report = plan_json("--model", "llama2-70b", "--gpus", "64", "--gpu", "h100-sxm", "--gpu-memory", "94GB",
                   "--gpu-tflops", "400", "--inter-node-bw", "20")
req = report["request"]
h.check(req["gpu_memory_bytes"] == 94e9 and req["gpu_flops"] == 400e12 and req["inter_node_bw_bytes_per_s"] == 20e9
        and req["intra_node_bw_bytes_per_s"] == 450e9, f"flags override --gpu: {req}")
proc = plan("--params", "1e9", "--gpus", "8", "--gpu", "h300", expect=2)
h.check("--gpu h300" in proc.stderr and "h100-sxm" in proc.stderr, f"unknown --gpu refused: {proc.stderr!r}")

# --from RUN_DIR: the recorded data-starved job's advice, and --from with a model flag refused.
starved = os.path.join(os.path.dirname(__file__), "..", "fixtures", "runs", "ddp-data-starved")
proc = plan("--from", starved, "--json")
advice = json.loads(proc.stdout) if proc.returncode == 0 else {}
h.check(advice.get("bottleneck") == "data" and advice.get("stragglers") == [2] and
        "num_workers=" in " ".join((advice.get("remedies") or [{}])[0].get("lines", [])),
        f"--from the data-starved run: {proc.stdout[:400]} {proc.stderr}")
proc = plan("--from", starved, "--gpus", "8", expect=2)
h.check("--from reads the job's own" in proc.stderr and "--gpus" in proc.stderr, f"--from with --gpus: {proc.stderr!r}")

h.finish()
