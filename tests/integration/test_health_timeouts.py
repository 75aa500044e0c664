"""The launcher's health checks on real workers, agents and gRPC reports:
  heartbeat  a worker that reported and then SIGSTOPs itself fails after health.heartbeat_timeout_s (2 s);
  hang       dtrain-trainer stalled before step 3 (--debug-stall-step) keeps heartbeating but makes no progress:
             it fails after health.hang_timeout_s (3 s), every rank's stacks are written before the stop
             (attempt_<n>/stacks/rank_<r>.txt) and the summary shows the hung rank's frames; with
             restart.max_restarts 1 the hang is restarted like any failure;
  startup    a worker that reports but never reaches a first step fails after health.startup_timeout_s (2 s);
  one rank   dtrain-trainer with only rank 1 stalled (--debug-stall-rank 1): rank 0 waits for it inside the step's
             first allreduce; both dump their phase and collective trace on the agent's signal, and the summary
             says which collective the job waits in, that rank 1 never entered it and that rank 0 is waiting in it.
Each exits 124 (a health check failed) and names the rank and the check."""

import glob
import os
import re
import subprocess
import time

from harness import BUILD_DIR, PYTHON, Run, check, finish, write

TRAINER = os.path.join(BUILD_DIR, "bin", "dtrain-trainer")

# Reports as dtrain-trainer's HealthReporter does: a start-up report, then a heartbeat every
# DTRAIN_HEALTH_INTERVAL_MS; never a step. With "stop", rank 1 reports a step and SIGSTOPs itself.
WORKER = r"""
import os, signal, sys, time
import grpc
from dtrain.v1 import report_pb2, report_pb2_grpc

rank = int(os.environ["RANK"])
stub = report_pb2_grpc.WorkerReportsStub(grpc.insecure_channel(os.environ["DTRAIN_AGENT_ADDR"]))
token = [("dtrain-token", os.environ["DTRAIN_JOB_TOKEN"]), ("dtrain-report-token", os.environ["DTRAIN_REPORT_TOKEN"])]
def report(step, done):
    stub.Report(report_pb2.WorkerReport(rank=rank, step=step, loss=2.0, tokens_per_s=10.0, steps_done=done),
                metadata=token, timeout=10)
report(0, 0)
mode = sys.argv[1]
if mode == "stop" and rank == 1:
    report(1, 1)
    print("rank 1 reported step 1 and stops itself", flush=True)
    os.kill(os.getpid(), signal.SIGSTOP)
interval = int(os.environ["DTRAIN_HEALTH_INTERVAL_MS"]) / 1000.0
while True:   # heartbeats, never a step
    time.sleep(interval)
    report(0, 0)
"""

SPEC = """
name: %s
nodes: {provider: local, count: 2}
workers_per_node: 1
command: %s
shell: %s
restart: {max_restarts: %d, backoff_s: 0.2}
stop: {grace_s: 1}
health: {%s}
logs: {dir: runs, console: all}
"""


def launch(name, command, health, shell=False, max_restarts=0):
    run = Run([], env={"PYTHONPATH": os.path.join(BUILD_DIR, "python")}, timeout=120)
    spec = write(os.path.join(run.dir, "job.yaml"),
                 SPEC % (name, command(run.dir), "true" if shell else "false", max_restarts, health))
    run.args += ["launch", spec]
    began = time.monotonic()
    run.run()
    run.took = time.monotonic() - began
    run.show()
    return run


def worker(mode):
    return lambda directory: "[%s, %s, %s]" % (PYTHON, write(os.path.join(directory, "worker.py"), WORKER), mode)


def stacks(run, attempt):
    # rank_<r>.txt (the agent's evidence), not rank_<r>.dump.txt (the worker's own dump, copied into it)
    return sorted(glob.glob(os.path.join(run.dir, "runs", "*", "attempt_%d" % attempt, "stacks", "rank_[0-9].txt")))


# ---- heartbeat
run = launch("heartbeat", worker("stop"), "heartbeat_timeout_s: 2, startup_timeout_s: 0")
check(run.code == 124, "a worker that stopped reporting -> exit 124, got %s" % run.code)
check(re.search(r"rank 1 stopped reporting health 2\.\d s ago \(health\.heartbeat_timeout_s: 2\)", run.err),
      "the launcher names the rank and the heartbeat timeout")
check("root cause: rank 1 on node 1" in run.err, "the stopped rank is the root cause")
check(any(p.endswith("rank_1.txt") for p in stacks(run, 0)), "the stopped rank's stacks file was written")
run.assert_no_leaks()

# ---- hang, restarted once
stall = "exec %s --model tiny --data %s --batch-size 2 --seq-len 32 --threads 1 --steps 50 --debug-stall-step 3"


def trainer(directory, extra=""):
    text = write(os.path.join(directory, "data.txt"), " ".join(["the model trains on bytes"] * 4000))
    shard = os.path.join(directory, "data.bin")
    prepared = subprocess.run([TRAINER, "prepare-text", text, shard], capture_output=True, text=True, timeout=60)
    check(prepared.returncode == 0, "prepare-text makes the shard: " + prepared.stdout + prepared.stderr)
    return '"%s%s"' % (stall % (TRAINER, shard), extra)


run = launch("hang", trainer, "hang_timeout_s: 3", shell=True, max_restarts=1)
check(run.code == 124, "a hung worker -> exit 124, got %s" % run.code)
check(re.search(r"attempt 0 failed: rank \d made no step progress for 3\.0 s \(stuck at step 2; "
                r"health\.hang_timeout_s: 3\).*; restarting", run.err), "the hang is restarted like any failure")
check("failed after 2 attempts" in run.err, "and the second attempt hangs too")
for attempt in (0, 1):
    found = [os.path.basename(p) for p in stacks(run, attempt)]
    check(found == ["rank_0.txt", "rank_1.txt"], "attempt %d: every rank's stacks were written (%s)" % (attempt, found))
# gdb's frames; on a loaded machine gdb may not finish within the bound: it is killed, and the threads' states show.
frames = re.search(r"where rank \d is \(first frames of its main thread\):\n\s+(#0 |thread \d+ \(.*\): state |"
                   r"dtrain-trainer pid \d+: phase \"stalled)", run.err)
check(frames is not None, "the summary shows the hung rank's first frames")
# (Ended either way: "was told to detach (SIGHUP)" when it detached, "was killed" when it did not.)
killed = "gdb did not finish in time and was " in run.err
check(re.search(r"full stacks: \S+/attempt_1/stacks/rank_\d\.txt", run.err), "and where its full stacks are")
text = ""
for path in stacks(run, 1):
    with open(path) as f:
        text += f.read()
check("state" in text and "wchan" in text and ("#0" in text or killed),
      "a stacks file has thread states and gdb's frames (or the summary says gdb ran out of time)")
# Two attempts: each start-up (~1-2 s), the 3 s hang, the evidence bound (5 s), the stop (grace 1 s), plus a margin.
check(run.took < 2 * (2 + 3 + 5 + 1) + 10, "each hang is caught within hang_timeout_s + the evidence bound (took "
      "%.1f s)" % run.took)
# Every rank stalled before the step: each finished every collective it issued, and the summary says so.
check("the hang is outside communication" in run.err, "the collective traces show the hang is outside communication")
run.assert_no_leaks()

# ---- one rank stalled: the collective trace names it
run = launch("one-rank", lambda d: trainer(d, " --debug-stall-rank 1"), "hang_timeout_s: 3", shell=True)
check(run.code == 124, "one stalled rank -> exit 124, got %s" % run.code)
check(re.search(r"collectives: collective #\d+ \(allreduce of \d+ floats.*\): rank 1 never entered it; rank 0 is "
                r"waiting in it", run.err), "the summary names the collective, the rank that never entered it and "
      "the rank waiting in it")
dumps = sorted(glob.glob(os.path.join(run.dir, "runs", "*", "attempt_0", "stacks", "rank_*.dump.txt")))
text = "".join(open(p).read() for p in dumps)
check(len(dumps) == 2 and len(re.findall(r"collectives of \w+ communicator: issued ", text)) == 2 and
      'phase "stalled (--debug-stall-step)"' in text, "both ranks dumped their phase and collective trace (%s)" % dumps)
run.assert_no_leaks()

# ---- startup
run = launch("startup", worker("startup"), "startup_timeout_s: 2")
check(run.code == 124, "no first step -> exit 124, got %s" % run.code)
check(re.search(r"rank \d made no first step 2\.\d s after it started \(health\.startup_timeout_s: 2\)", run.err),
      "the launcher names start-up")
run.assert_no_leaks()

finish()
