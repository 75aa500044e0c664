"""The pipeline's bubble and each stage's place, seen wherever a user looks: a 2-rank `dtrain run` of dtrain-trainer
with --pp 2 (a small model on a shard of a short text, well under a second a step) and one micro-batch per step, so
that the ideal bubble, (P-1)/(m+P-1) of the step, is half of it:
  metrics line  every line of --metrics (rank 0, stage 0) has pp_bubble_ms, above 0 and below the step's step_ms;
  status        status.json gives each rank its stage (pp_stage 0 and 1 of pp_size 2) and a bubble ratio above 0,
                and `dtrain status` shows them in its stage and bubble% columns;
  report page   report.html's "Where the step went" has the pipeline bubble as a part of its own, and its rows name
                their stage (data-pp-stage);
  diagnosis     the launcher diagnoses the bubble (pipeline_bubble), naming the stage, with --grad-accum in its fix,
                in its summary, status.json and the page; the bubble is not taken for time that no phase accounts for
                (no sync diagnosis).
The run directory, the shard and the metrics file are made in the test's scratch directory (harness.py's Run), which
finish() removes when every check passed (and keeps, with its path printed, for a look when one failed)."""

import glob
import json
import os
import re
import subprocess

from harness import BUILD_DIR, DTRAIN, Run, check, finish, write

TRAINER = os.path.join(BUILD_DIR, "bin", "dtrain-trainer")
# The stage naming of the diagnosis: "pipeline bubble is 48% of the step on stage 1 of 2 (rank 1 on node 0 (host))".
BUBBLE = re.compile(r"pipeline bubble is (\d+)% of the step on stage ([01]) of 2 \(rank ([01]) on node 0")

run = Run([], timeout=60)
text = write(os.path.join(run.dir, "data.txt"), " ".join(["the stages pass activations on"] * 2000))
shard = os.path.join(run.dir, "data.bin")
prepared = subprocess.run([TRAINER, "prepare-text", text, shard], capture_output=True, text=True, timeout=60)
check(prepared.returncode == 0, "prepare-text makes the shard: " + prepared.stdout + prepared.stderr)
metrics = os.path.join(run.dir, "m.jsonl")
run.args += ["run", "-n", "2", "--", TRAINER, "--layers", "4", "--channels", "64", "--heads", "4", "--max-seq-len",
             "64", "--vocab", "256", "--seq-len", "64", "--pp", "2", "--grad-accum", "1", "--steps", "8",
             "--threads", "1", "--metrics", metrics, "--data", shard]
run.run()
if not check(run.code == 0, "the pipelined job succeeds (exit %s)" % run.code):
    run.show()
run.assert_no_leaks()

# ---- metrics line
with open(metrics) as f:
    lines = [json.loads(line) for line in f if line.strip()]
check(len(lines) == 8, "a metrics line per step (%d)" % len(lines))
for m in lines:
    bubble = m.get("pp_bubble_ms")
    check(bubble is not None and 0 < bubble < m["step_ms"],
          "step %d: 0 < pp_bubble_ms (%s) < step_ms (%s)" % (m["step"], bubble, m["step_ms"]))

# ---- status
jobs = run.job_dirs()
check(len(jobs) == 1, "one run directory: %s" % jobs)
job = jobs[0] if jobs else run.dir
with open(os.path.join(job, "status.json")) as f:
    status = json.load(f)
ranks = {r["rank"]: r for r in status.get("ranks", [])}
for rank in (0, 1):
    row = ranks.get(rank, {})
    check(row.get("pp_stage") == rank and row.get("pp_size") == 2 and row.get("tp_size") == 1,
          "rank %d is stage %d of 2 in status.json: %s" % (rank, rank, {k: row.get(k) for k in (
              "tp_rank", "tp_size", "pp_stage", "pp_size")}))
    ratio = row.get("pipeline_bubble_ratio")
    check(ratio is not None and 0 < ratio < 1, "rank %d: a bubble ratio between 0 and 1 (%s)" % (rank, ratio))
shown = subprocess.run([DTRAIN, "status", job], capture_output=True, text=True, timeout=30)
check(re.search(r"^\s*rank stage .* comm% bubble% ", shown.stdout, re.M),
      "dtrain status has the stage and bubble% columns:\n" + shown.stdout)
check(re.search(r"^\s+1\s+1/2 ", shown.stdout, re.M), "dtrain status shows rank 1 as stage 1/2:\n" + shown.stdout)

# ---- report page
page = os.path.join(job, "report.html")
html = open(page).read() if os.path.exists(page) else ""
breakdown = re.search(r'<section id="breakdown">(.*?)</section>', html, re.S)
check(breakdown and ">pipeline bubble</text>" in breakdown.group(1),
      "report.html's where-the-step-went has the pipeline bubble as a part")
check(breakdown and 'data-rank="1" data-pp-stage="1"' in breakdown.group(1)
      and "rank 1 (pipeline stage 1 of 2)" in breakdown.group(1), "its rows name their stage")

# ---- diagnosis
found = [d for d in status.get("diagnoses", []) if d.get("kind") == "pipeline_bubble"]
named = BUBBLE.search(found[0].get("message", "")) if found else None
check(named and int(named.group(1)) > 25 and named.group(2) == named.group(3),
      "the pipeline_bubble diagnosis names the stage and its rank: %s" % found)
check(found and "--grad-accum" in found[0].get("fix", ""), "its fix is more micro-batches (--grad-accum)")
check(BUBBLE.search(run.err) and "diagnosis (pipeline_bubble)" in run.err, "the launcher's summary has it:\n" + run.err)
check(re.search(r'data-kind="pipeline_bubble".*pipeline bubble is \d+% of the step on stage', html),
      "report.html has it")
check(not [d for d in status.get("diagnoses", []) if d.get("kind") == "sync"],
      "the bubble is not time that no phase accounts for: %s" % status.get("diagnoses"))
finish()
