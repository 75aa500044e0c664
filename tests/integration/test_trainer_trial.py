"""dtrain-trainer as a trial of `dtrain tune` (trainer/train/trial.h, the protocol in cli/tune/trial.h): a 2-rank job of
`--steps 3 --save-every 1` with DTRAIN_TUNE_TRIAL={"warmup":2,"steps":4,"losses":3} runs 6 steps and writes no
checkpoint (rank 0 says --save-every is ignored), and each rank's log has one "dtrain-trial: {json}" line: its rank,
6 steps, complete, 4 step times (rank 0's each at least its step_ms in --metrics: a step time is the loop's whole
iteration), the losses of steps 1..3 as --metrics and the console print them, 8 samples and 256 tokens (batch 2 x
accum 1 x 4 steps, x seq 32), and the trainer's knobs: the DDP bucket size and the communication backend rank 0's log
states. A DTRAIN_TUNE_TRIAL that is not a trial stops the trainer with exit 2 and a message naming it."""

import json
import os
import re
import shutil
import subprocess
import tempfile

from harness import DTRAIN, check, finish, tiny_trainer_job

PREFIX = "dtrain-trial: "
TRIAL = '{"warmup":2,"steps":4,"losses":3}'
WARMUP, STEPS, LOSSES = 2, 4, 3
BATCH, SEQ_LEN = 2, 32

scratch_dir = tempfile.mkdtemp(prefix="dtrain-it-trial-")
metrics_file = os.path.join(scratch_dir, "metrics.jsonl")
checkpoints = os.path.join(scratch_dir, "checkpoints")
flags = "--batch-size %d --seq-len %d --threads 1 --steps 3 --save-every 1 --checkpoint-dir %s --metrics %s" % (
    BATCH, SEQ_LEN, checkpoints, metrics_file)
run, job, status = tiny_trainer_job("trial", flags, env={"DTRAIN_TUNE_TRIAL": TRIAL})


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def trial_lines(text):
    """The JSON objects of the trial lines in a log (whose lines may carry a prefix before the trial's)."""
    found = []
    for line in text.splitlines():
        at = line.find(PREFIX)
        if at >= 0:
            try:
                found.append(json.loads(line[at + len(PREFIX):]))
            except ValueError:
                check(False, "a trial line that is not JSON: %r" % line)
    return found


def close(a, b, relative=1e-6):
    return a is not None and b is not None and abs(a - b) <= relative * max(abs(a), abs(b))


metrics = [json.loads(line) for line in read(metrics_file).splitlines() if line.strip()]
check([m["step"] for m in metrics] == list(range(1, WARMUP + STEPS + 1)),
      "the job ran W + N = 6 steps whatever --steps says: %s" % [m["step"] for m in metrics])
check(not os.path.exists(checkpoints), "a trial writes no checkpoint: %s" % (
    os.listdir(checkpoints) if os.path.isdir(checkpoints) else ""))
rank0_log = read(os.path.join(job, "attempt_0", "rank_0.log"))
check(rank0_log.count("ignoring --save-every 1") == 1, "rank 0 says once that --save-every is ignored")
console = {int(s): float(l) for s, l in re.findall(r"step (\d+)/6 \| loss ([0-9.]+)", rank0_log)}
check(sorted(console) == list(range(1, 7)), "rank 0's console shows steps 1..6 of 6: %s" % sorted(console))
backend = re.search(r"tokens per step, .* comm (\w+)", rank0_log)
bucket = re.search(r"DDP: .* then ([0-9.]+) MiB each", rank0_log)
check(backend is not None and bucket is not None, "rank 0's log states the backend and the DDP bucket size")

for rank in range(2):
    log = read(os.path.join(job, "attempt_0", "rank_%d.log" % rank))
    lines = trial_lines(log)
    if not check(len(lines) == 1, "rank %d's log has one trial line: %d" % (rank, len(lines))):
        continue
    t = lines[0]
    check(list(t) == ["rank", "steps", "complete", "device", "step_s", "data_wait_s", "comm_s", "samples", "tokens",
                      "losses", "rss_bytes", "device_peak_bytes", "cpus", "threads", "loader", "ddp", "trainer"],
          "rank %d: the line has cli/tune/trial.h's fields in order: %s" % (rank, list(t)))
    check(t["rank"] == rank and t["steps"] == WARMUP + STEPS and t["complete"] is True and t["device"] == "cpu",
          "rank %d: rank, 6 steps, complete, cpu: %s" % (rank, t))
    step_s = t["step_s"]
    check(len(step_s) == STEPS and all(s > 0 for s in step_s), "rank %d: 4 step times: %s" % (rank, step_s))
    if rank == 0 and len(step_s) == STEPS and len(metrics) == WARMUP + STEPS:
        for s, m in zip(step_s, metrics[WARMUP:]):
            check(s >= m["step_ms"] / 1000 * 0.999, "rank 0: step time %s s covers the step's %s ms" % (
                s, m["step_ms"]))
    check(0 <= t["data_wait_s"] < sum(step_s), "rank %d: data wait %s within the steps" % (rank, t["data_wait_s"]))
    check(0 < t["comm_s"] < sum(step_s), "rank %d: exposed communication %s within the steps" % (rank, t["comm_s"]))
    check(t["samples"] == BATCH * STEPS and t["tokens"] == BATCH * STEPS * SEQ_LEN,
          "rank %d: 8 samples, 256 tokens: %s %s" % (rank, t["samples"], t["tokens"]))
    losses = t["losses"]
    check(len(losses) == LOSSES, "rank %d: 3 losses: %s" % (rank, losses))
    for step, loss in enumerate(losses, 1):
        check(step <= len(metrics) and close(loss, metrics[step - 1]["loss"]),
              "rank %d: step %d's loss %s is --metrics' %s" % (rank, step, loss, metrics[step - 1]["loss"]))
        check(abs(loss - console.get(step, float("inf"))) <= 5.01e-7,
              "rank %d: step %d's loss %s is the console's %s" % (rank, step, loss, console.get(step)))
    check(t["rss_bytes"] > 1 << 20 and t["device_peak_bytes"] == 0, "rank %d: peak RSS %s, no device" % (
        rank, t["rss_bytes"]))
    check(t["cpus"] >= 1 and t["threads"] == 1, "rank %d: cpus %s, threads %s (--threads 1)" % (
        rank, t["cpus"], t["threads"]))
    check(t["loader"] is None and t["ddp"] is None, "rank %d: no script's loader or DDP" % rank)
    knobs = t["trainer"] or {}
    check(backend is not None and knobs.get("backend") == backend.group(1),
          "rank %d: backend %s as the log's" % (rank, knobs.get("backend")))
    check(bucket is not None and abs(knobs.get("ddp_bucket_mb", -1) - float(bucket.group(1))) < 0.006,
          "rank %d: DDP bucket %s MiB as the log's" % (rank, knobs.get("ddp_bucket_mb")))

# A value that is not a trial: exit 2, the variable and what is wrong, no trial line.
trainer = os.path.join(os.path.dirname(os.path.abspath(DTRAIN)), "dtrain-trainer")
env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
env["DTRAIN_TUNE_TRIAL"] = '{"warmup":2,"steps":0,"losses":0}'
bad = subprocess.run([trainer, "--model", "tiny", "--data", os.path.join(run.dir, "data.bin"), "--steps", "3"],
                     cwd=scratch_dir, env=env, capture_output=True, text=True, timeout=60)
check(bad.returncode == 2, "a bad DTRAIN_TUNE_TRIAL: exit 2, got %s" % bad.returncode)
check("DTRAIN_TUNE_TRIAL='{\"warmup\":2,\"steps\":0,\"losses\":0}' is not a trial: \"steps\" is below 1" in bad.stderr,
      "the message names the variable and what is wrong: %r" % bad.stderr[-400:])
check(PREFIX not in bad.stderr, "no trial line for a value that is not a trial")

shutil.rmtree(scratch_dir, ignore_errors=True)
finish()
