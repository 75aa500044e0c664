"""Health reports from dtrain-trainer reach the launcher: 2 ranks under `dtrain run` (--zero 3 --precision fp16, so
every memory field and the loss scale are reported); rank 1 is SIGKILLed mid-run and the failure summary shows its
last report, which went trainer -> agent (gRPC WorkerReports, DTRAIN_AGENT_ADDR + DTRAIN_JOB_TOKEN) -> launcher:
step, loss and tokens/s, the phase rank 1 was in, where its last step's time went (the parts add up to no more than
the step), its loss scale and the sizes it reported (equal to the --metrics line of that step: ZeRO shards and ring
traffic are the same on both ranks). A hung job's summary shows the phase the hung rank is stuck in, which only
heartbeats carried, and what its agent last saw of it in /proc. And an agent that cannot be reached does not stop
training: the trainer warns once and finishes."""

import os
import re
import signal
import time

import trainer_harness as h

h.require_binaries(h.TRAINER, h.DTRAIN)
work = h.workdir()
shard = h.make_text_shard(work)
# What the trainer names its phases while it steps (trainer/train/loop.cpp), and while it waits for one collective
# (trainer/health/phase.h: ZeRO's units, fp16's overflow flags, the gradient norms).
PHASES = {"data", "forward", "backward", "reduce (waiting for the gradient reductions)", "reduce (the loss allreduce)",
          "optimizer", "allreduce (the fp16 overflow flags)", "all-gather (the gradient norms)"}
WAIT_PHASE = re.compile(r"(all-gather|reduce-scatter) unit \d+")
common = ["--model", "tiny", "--data", shard, "--batch-size", "2", "--seq-len", "64", "--threads", "1"]

HANG_SPEC = """
name: hang
nodes: {provider: local, count: 2}
workers_per_node: 1
command: [%s, --model, tiny, --data, %s, --batch-size, "2", --seq-len, "32", --threads, "1", --steps, "50",
          --debug-stall-step, "3"]
stop: {grace_s: 1}
health: {hang_timeout_s: 3}
logs: {dir: %s}
"""

metrics = os.path.join(work, "m.jsonl")
argv = [h.DTRAIN, "run", "-n", "2", "--grace-s", "2", "--logs-dir", os.path.join(work, "runs"), "--", h.TRAINER] + \
    common + ["--steps", "100000", "--metrics", metrics, "--zero", "3", "--precision", "fp16"]
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
    phase = re.search(r"last health report of rank 1: .*, last phase: ([^,\n]+)", result.err)
    h.check(phase is not None and (phase.group(1) in PHASES or WAIT_PHASE.fullmatch(phase.group(1))),
            "it carries a phase of the step (%s)" %
            (phase.group(1) if phase else None))
    times = re.search(r"its last step: ([0-9.e+]+) ms \(data wait ([0-9.e+-]+), compute ([0-9.e+-]+), "
                      r"comm exposed ([0-9.e+-]+), optimizer ([0-9.e+-]+)\)", result.err)
    if h.check(times is not None, "the summary shows where rank 1's last step went"):
        step_ms, data, compute, comm, optimizer = (float(v) for v in times.groups())
        h.check(step_ms > 0 and compute > 0 and optimizer > 0 and data >= 0 and comm >= 0,
                f"every part is measured (step {step_ms}, data {data}, compute {compute}, comm {comm}, "
                f"optimizer {optimizer} ms)")
        h.check(data + compute + comm + optimizer <= step_ms * 1.05 + 1, "and the parts add up to no more than the step")
    scale = re.search(r"its last step: .*, loss scale ([0-9.e+]+)\n", result.err)
    expected_scale = logged[step - 1].get("loss_scale") if len(logged) >= step else None
    h.check(scale is not None and expected_scale is not None and
            abs(float(scale.group(1)) - expected_scale) <= 1e-5 * expected_scale,
            f"it carries the step's loss scale ({scale.group(1) if scale else None}; the metrics line says "
            f"{expected_scale})")
    sizes = re.search(r"    bytes: (.*)\n", result.err)
    if h.check(sizes is not None, "the summary shows the sizes rank 1 reported"):
        reported = {name: int(value) for name, value in re.findall(r"([a-z ]+) (\d+)(?:, |$)", sizes.group(1))}
        line = logged[step - 1] if len(logged) >= step else {}
        for name, key in (("params", "mem_params_bytes"), ("grads", "mem_grads_bytes"), ("optim", "mem_optim_bytes"),
                          ("activations", "mem_activations_bytes"), ("gathered peak", "mem_gathered_peak_bytes"),
                          ("sent in the step", "comm_bytes")):
            h.check(key in line and reported.get(name) == line[key],
                    f"{name}: {reported.get(name)}, as the metrics line's {key} ({line.get(key)})")
        h.check(reported.get("rss", 0) > 1 << 20, f"and its resident set ({reported.get('rss')})")

# A job that hangs before step 3 (--debug-stall-step): only heartbeats leave the workers, and they carry the phase.
spec = os.path.join(work, "hang.yaml")
with open(spec, "w") as f:
    f.write(HANG_SPEC % (h.TRAINER, shard, os.path.join(work, "runs")))
hung = h.run([h.DTRAIN, "launch", spec], work, timeout=120)
h.check(hung.code == 124, f"the hung job fails its health check (exit {hung.code})")
if not h.check(re.search(r"last health report of rank \d: step 2, .*, last phase: stalled \(--debug-stall-step\)",
                         hung.err), "its summary shows the phase the hung rank is stuck in"):
    hung.show()
h.check(re.search(r"its agent's last look at rank \d \(/proc\): state S \(sleeping\), [0-9.e+-]+ s of CPU, \d+ threads",
                  hung.err), "and what its agent last saw of it in /proc: asleep (it sleeps in --debug-stall-step)")

unreachable = h.trainer(common + ["--steps", "3"], work,
                        env={"DTRAIN_AGENT_ADDR": "127.0.0.1:1", "DTRAIN_JOB_TOKEN": "t"})
h.check(unreachable.code == 0, "with no agent listening, training still finishes")
h.check((unreachable.out + unreachable.err).count("health report to the agent") == 1,
        "and the failed reports are logged once")
h.finish()
