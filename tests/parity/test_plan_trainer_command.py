"""The dtrain-trainer command `dtrain plan` emits for a tensor- and pipeline-parallel layout trains as emitted: for
T=2 x P=2 (sequence parallelism on, as the plan lays TP out by default; bf16) and P=2 x DP=2 (fp32), each on 4
ranks of one node, the plan is asked with the model's shape, --gpus 4 --gpus-per-node 4, --tp/--pp fixed and this
machine's numbers (a CPU's GEMM rate and bandwidths, so that it predicts times). Its recommendation's trainer_args
must carry the layout (--tp, --pp, --pp-schedule 1f1b, --sequence-parallel where the layout has it, --grad-accum =
global batch / (micro-batch x DP), --device cpu, a --zero the trainer runs with --pp) and a note that dtrain-trainer
runs it on CPUs only so far; its job spec must pass `dtrain validate`; and the arguments, with --data, --steps 3
and --threads 1 added, must train under `dtrain run -n 4`: exit 0, three finite losses, rank 0 naming the layout."""

import json
import math
import os
import subprocess

import trainer_harness as h

h.require_binaries(h.TRAINER, h.DTRAIN)
work = h.workdir()
shard = h.make_text_shard(work)
SHAPE = ["--layers", "4", "--hidden", "64", "--heads", "4", "--seq-len", "64", "--vocab", "256"]
# A CPU: 20 GFLOP/s per rank, 2 GB/s between ranks (busbw), 16 GB of memory.
MACHINE = ["--gpus", "4", "--gpus-per-node", "4", "--gpu-tflops", "0.02", "--intra-node-bw", "2", "--gpu-memory",
           "16GB"]

# label, tp, pp, precision, micro-batch, global batch
CASES = (("T=2 x P=2", 2, 2, "bf16", 2, 8),
         ("P=2 x DP=2", 1, 2, "fp32", 2, 8))


def flag(args, name):
    return args[args.index(name) + 1] if name in args else None


for label, tp, pp, precision, batch, global_batch in CASES:
    dp = 4 // (tp * pp)
    plan_args = [h.DTRAIN, "plan", *SHAPE, *MACHINE, "--tp", str(tp), "--pp", str(pp), "--precision", precision,
                 "--micro-batch", str(batch), "--global-batch", str(global_batch), "--json"]
    proc = subprocess.run(plan_args, capture_output=True, text=True, timeout=60)
    if not h.check(proc.returncode == 0, f"{label}: dtrain plan {' '.join(plan_args[2:])} exits 0 {proc.stderr}"):
        continue
    rec = json.loads(proc.stdout)["recommendation"]
    strategy, args = rec["strategy"], rec["trainer_args"]
    print(f"     {label}: {strategy['name']}: dtrain-trainer {' '.join(args)}")
    h.check(strategy["predicted"] is not None and strategy["predicted"]["step_s"] > 0,
            f"{label}: the plan predicts a step ({strategy['predicted']})")
    micro = global_batch // (batch * dp)
    h.check(flag(args, "--tp") == str(tp) and flag(args, "--pp") == str(pp) and
            flag(args, "--pp-schedule") == "1f1b" and flag(args, "--grad-accum") == str(micro) and
            flag(args, "--batch-size") == str(batch) and flag(args, "--device") == "cpu" and
            int(flag(args, "--zero")) <= 1,
            f"{label}: the command carries --tp {tp} --pp {pp} --pp-schedule 1f1b --batch-size {batch} "
            f"--grad-accum {micro} (= {global_batch} / ({batch} x {dp})), --zero 0 or 1 and --device cpu")
    h.check(("--sequence-parallel" in args) == strategy["sequence_parallel"],
            f"{label}: --sequence-parallel in the command as in the layout ({strategy['sequence_parallel']})")
    h.check(any("CPUs only so far" in note for note in rec["trainer_notes"]),
            f"{label}: a note says dtrain-trainer runs it on CPUs only so far: {rec['trainer_notes']}")
    spec = os.path.join(work, f"plan_{tp}x{pp}.yaml")
    with open(spec, "w") as f:
        f.write("\n".join(rec["job_spec"]) + "\n")
    valid = subprocess.run([h.DTRAIN, "validate", spec], capture_output=True, text=True, timeout=60)
    h.check(valid.returncode == 0, f"{label}: the job spec validates: {valid.stdout}{valid.stderr}")

    metrics = os.path.join(work, f"m_{tp}x{pp}.jsonl")
    run = h.launched(4, args + ["--data", shard, "--steps", "3", "--threads", "1", "--metrics", metrics], work,
                     timeout=120)
    if not h.check(run.code == 0, f"{label}: the emitted command trains under `dtrain run -n 4`"):
        continue
    steps = h.metrics(metrics)
    h.check(len(steps) == 3 and all(math.isfinite(s["loss"]) for s in steps),
            f"{label}: 3 steps with finite losses: {[s['loss'] for s in steps]}")
    said = f"tensor parallel {tp} x pipeline parallel {pp}"
    h.check(said in run.out + run.err, f"{label}: rank 0 says '{said}'")
h.finish()
