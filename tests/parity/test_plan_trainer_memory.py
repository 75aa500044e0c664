"""`dtrain plan --trainer-accounting` against what dtrain-trainer reports for tensor- and pipeline-parallel layouts:
for each layout below, a 4-layer model (C=64, 4 heads, vocabulary 256, T=64) trains 10 steps under
`dtrain run -n N -- dtrain-trainer --tp T --pp P ...`, and every rank's mem_params/grads/optim/activations_bytes
must be within 5% of the plan's numbers for that rank's pipeline stage (`trainer.stages[s]` of
`dtrain plan ... --trainer-accounting --json` for the same shape and layout; stage s = rank / (T x DP), the grid's
rank order). Rank 0 reports through its --metrics file (every step); the other ranks through their health reports,
the last of which the launcher writes to the run directory's events.jsonl (a run of 10 steps is long enough for them
to reach it; a run of 3 is not). Layouts (the pipeline's micro-batches are --grad-accum's, 1F1B):
  T=2                       2 ranks, no recomputation
  P=2, selective            2 ranks, attention's probabilities recomputed: stage 0 keeps 2 micro-batches, stage 1 one
  T=2 x P=2, full           4 ranks, only the blocks' inputs kept
  P=4                       4 ranks, 6 micro-batches: the stages keep 4, 3, 2 and 1 of them
  P=2 x DP=2, ZeRO-1        4 ranks, AdamW's state sharded over each stage's data-parallel pair (in fp32: with --pp,
                            16-bit ZeRO-1 stops at start-up in the trainer, whose ZeroEngine::memory asks
                            Gpt::fp32_tensors for the other stages' layers)
  T=2 x DP=2, ZeRO-1, bf16  4 ranks, mixed precision: the widened fp32 tensors of each tensor-parallel slice
  T=2 x P=2, bf16           4 ranks, the 16-bit working copy beside the fp32 parameters
  T=2 x P=2, SP             4 ranks, sequence parallelism: the residual stream on half the tokens
  T=2 x DP=2, ZeRO-3        4 ranks, parameters, gradients and optimizer state sharded (one stage: the trainer runs
                            ZeRO-2/3 with --tp, not with --pp)
  P=2, V=2                  2 ranks, interleaved 1F1B with 2 chunks a stage (`--pp-virtual 2` to both): stage 0
                            keeps 5 chunk-sets of one layer, stage 1 three
The worst difference of each layout is printed."""

import json
import os
import subprocess

import trainer_harness as h

h.require_binaries(h.TRAINER, h.DTRAIN)
work = h.workdir()
shard = h.make_text_shard(work)
MODEL = ["--layers", "4", "--channels", "64", "--heads", "4", "--max-seq-len", "64", "--vocab", "256"]
SHAPE = ["--layers", "4", "--hidden", "64", "--heads", "4", "--seq-len", "64", "--vocab", "256"]
FIELDS = ("params", "grads", "optim", "activations")
STEPS = 10
TOLERANCE = 0.05

# label, tp, pp, dp, zero, recompute, precision, batch, micro-batches, sequence parallelism, chunks a stage
CASES = (("T=2", 2, 1, 1, 0, "none", "fp32", 2, 2, False, 1),
         ("P=2, selective", 1, 2, 1, 0, "selective", "fp32", 2, 4, False, 1),
         ("T=2 x P=2, full", 2, 2, 1, 0, "full", "fp32", 2, 4, False, 1),
         ("P=4", 1, 4, 1, 0, "none", "fp32", 1, 6, False, 1),
         ("P=2 x DP=2, ZeRO-1", 1, 2, 2, 1, "none", "fp32", 2, 2, False, 1),
         ("T=2 x DP=2, ZeRO-1, bf16", 2, 1, 2, 1, "selective", "bf16", 2, 2, False, 1),
         ("T=2 x P=2, bf16", 2, 2, 1, 0, "none", "bf16", 1, 4, False, 1),
         ("T=2 x P=2, SP", 2, 2, 1, 0, "none", "fp32", 2, 4, True, 1),
         ("T=2 x DP=2, ZeRO-3", 2, 1, 2, 3, "none", "fp32", 2, 2, False, 1),
         ("P=2, V=2", 1, 2, 1, 0, "none", "fp32", 1, 4, False, 2))


def plan_stages(tp, pp, dp, zero, recompute, precision, batch, micro, sp, virtual):
    """The plan's per-stage accounting of the layout, or None (the check says why)."""
    ranks = tp * pp * dp
    args = [h.DTRAIN, "plan", *SHAPE, "--gpus", str(ranks), "--gpus-per-node", str(ranks), "--tp", str(tp),
            "--pp", str(pp), "--sequence-parallel", "on" if sp else "off", "--zero", str(zero),
            "--recompute", recompute,
            "--precision", precision, "--micro-batch", str(batch), "--global-batch", str(batch * dp * micro),
            "--trainer-accounting", "--json"] + (["--pp-virtual", str(virtual)] if virtual > 1 else [])
    proc = subprocess.run(args, capture_output=True, text=True, timeout=60)
    if not h.check(proc.returncode == 0, f"dtrain plan {' '.join(args[2:])} exits 0: {proc.stderr.strip()}"):
        return None
    strategy = json.loads(proc.stdout)["strategies"][0]
    stages = (strategy.get("trainer") or {}).get("stages")
    h.check(stages is not None and len(stages) == pp and strategy["accumulation"]["micro_steps"] == micro,
            f"the plan gives {pp} stage(s) of dtrain-trainer's accounting over {micro} micro-batches: "
            f"{strategy.get('trainer')}")
    return stages


def last_health(run_dir):
    """Each rank's last health values as the launcher recorded them ({rank: dict})."""
    last = {}
    with open(os.path.join(run_dir, "events.jsonl")) as f:
        for line in f:
            event = json.loads(line)
            if event.get("event") == "health":
                last = {r["rank"]: r for r in event["ranks"]}
    return last


def measure(label, tp, pp, dp, zero, recompute, precision, batch, micro, sp, virtual):
    """Every rank's reported memory ({rank: [dict per report]}), or None when the run failed."""
    ranks = tp * pp * dp
    tag = "".join(c for c in label if c.isalnum())
    metrics = os.path.join(work, tag + ".jsonl")
    logs = os.path.join(work, "runs-" + tag)
    args = MODEL + ["--data", shard, "--threads", "1", "--seq-len", "64", "--steps", str(STEPS), "--tp", str(tp),
                    "--pp", str(pp), "--zero", str(zero), "--recompute", recompute, "--precision", precision,
                    "--batch-size", str(batch), "--grad-accum", str(micro), "--metrics", metrics]
    if sp:
        args.append("--sequence-parallel")
    if virtual > 1:
        args += ["--pp-virtual", str(virtual)]
    run = h.run([h.DTRAIN, "run", "-n", str(ranks), "--grace-s", "2", "--logs-dir", logs, "--", h.TRAINER, *args],
                work, timeout=120)
    if not h.check(run.code == 0, f"{label}: `dtrain run -n {ranks}` exits 0"):
        return None
    reports = {0: h.metrics(metrics)}
    [run_dir] = [os.path.join(logs, d) for d in os.listdir(logs)]
    for rank, values in last_health(run_dir).items():
        if rank != 0:
            reports[rank] = [values]
    return reports


for case in CASES:
    label, tp, pp, dp = case[:4]
    stages = plan_stages(*case[1:])
    reports = measure(*case)
    if stages is None or reports is None:
        continue
    worst = 0.0
    for rank in range(tp * pp * dp):
        stage = stages[rank // (tp * dp)]
        got = reports.get(rank) or [{}]
        have = all(r.get(f"mem_{k}_bytes", 0) > 0 for r in got for k in FIELDS)
        if not h.check(have, f"{label}: rank {rank} reported its memory ({got[-1].get('step')} steps seen)"):
            continue
        for report in got:
            for k in FIELDS:
                measured, predicted = report[f"mem_{k}_bytes"], stage[f"{k}_bytes"]
                difference = abs(predicted - measured) / measured
                worst = max(worst, difference)
                if difference > TOLERANCE:
                    h.check(False, f"{label}: rank {rank} (stage {stage['stage']}) mem_{k}_bytes {measured}, "
                                   f"the plan {predicted}")
    h.check(worst <= TOLERANCE, f"{label}: every rank's memory within {TOLERANCE:.0%} of the plan's for its stage "
                                f"(worst {worst:.2%})")
h.finish()
