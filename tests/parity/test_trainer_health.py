"""Health reports from dtrain-trainer reach the launcher: 2 ranks under `dtrain run`; rank 1 is SIGKILLed mid-run
and the failure summary shows its last report (step, loss, tokens/s) that went trainer -> agent (gRPC WorkerReports,
DTRAIN_AGENT_ADDR + DTRAIN_JOB_TOKEN) -> launcher. And an agent that cannot be reached does not stop training: the
trainer warns once and finishes."""

import os
import re
import signal
import time

import trainer_harness as h

h.require_binaries(h.TRAINER, h.DTRAIN)
work = h.workdir()
shard = h.make_text_shard(work)
common = ["--model", "tiny", "--data", shard, "--batch-size", "2", "--seq-len", "64", "--threads", "1"]

metrics = os.path.join(work, "m.jsonl")
argv = [h.DTRAIN, "run", "-n", "2", "--grace-s", "2", "--logs-dir", os.path.join(work, "runs"), "--", h.TRAINER] + \
    common + ["--steps", "100000", "--metrics", metrics]
bg = h.Background(argv, work)
deadline = time.monotonic() + 60
while time.monotonic() < deadline and (not os.path.exists(metrics) or len(h.metrics(metrics)) < 5):
    time.sleep(0.05)
time.sleep(0.3)
victims = bg.trainer_pids(rank=1)
h.check(len(victims) == 1, f"one rank-1 trainer is running ({victims})")
for pid in victims:
    os.kill(pid, signal.SIGKILL)
result = bg.wait(timeout=60)
h.check(result.code == 128 + signal.SIGKILL, f"the launcher exits 128+9 after rank 1 is killed (got {result.code})")
found = re.search(r"last health report of rank 1: step (\d+), loss ([0-9.]+), ([0-9.e+]+) tokens/s", result.err)
if not h.check(found is not None, "the failure summary shows rank 1's last health report"):
    result.show()
else:
    step, loss = int(found.group(1)), float(found.group(2))
    h.check(step >= 5, f"it is from a step the trainer reached ({step})")
    logged = h.metrics(metrics)
    expected = logged[step - 1]["loss"] if len(logged) >= step else None
    h.check(expected is not None and abs(loss - expected) <= 1e-5 * expected,
            f"it carries the loss of that step ({loss}; the metrics file says {expected})")
    h.check(float(found.group(3)) > 0, "it carries the throughput")

unreachable = h.trainer(common + ["--steps", "3"], work,
                        env={"DTRAIN_AGENT_ADDR": "127.0.0.1:1", "DTRAIN_JOB_TOKEN": "t"})
h.check(unreachable.code == 0, "with no agent listening, training still finishes")
h.check((unreachable.out + unreachable.err).count("health report to the agent") == 1,
        "and the failed reports are logged once")
h.finish()
