"""Shared helpers for dtrain's integration tests: run the real binary, find leaked processes, assert.

Every launch gets a unique DTRAIN_TEST_TAG in its environment. The launcher, its agents, the workers and anything
they start inherit it, so /proc/*/environ tells exactly which processes belong to a test run.
"""

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid

import scratch

DTRAIN = os.environ.get("DTRAIN_BIN") or os.path.join(
    os.environ.get("DTRAIN_BUILD_DIR", os.path.join(os.path.dirname(__file__), "..", "..", "build")), "bin", "dtrain")
BUILD_DIR = os.path.dirname(os.path.dirname(os.path.abspath(DTRAIN)))
SOURCE_DIR = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PYTHON = "/usr/bin/python3"
HELPER_DIR = os.path.join(SOURCE_DIR, "worker", "python")
# The PyTorch bootstrap's directories, by the wrappers they arm: the build's holds _dtrain_hooks (the C wrappers, what
# every worker of /usr/bin/python3 gets from its agent), the source tree's holds the Python files alone (sitecustomize.py and
# its _dtrain_*.py parts, no compiled module: the Python wrappers, what any other interpreter gets). WRAPPER_TYPE: what torch.Tensor.backward is once each has armed.
BOOTSTRAP_DIRS = {"C": os.path.join(BUILD_DIR, "share", "dtrain", "python", "bootstrap"),
                  "Python": os.path.join(HELPER_DIR, "bootstrap")}
WRAPPER_TYPE = {"C": "Hook", "Python": "function"}

failures = []


def check(condition, message):
    """Records a failed expectation (the test goes on, so one run reports everything) and prints it."""
    if not condition:
        failures.append(message)
        print("FAIL: " + message, flush=True)
    return condition


def health_env(socket_path, path, **extra):
    """The environment a worker's agent gives it for health reports, without an agent: this process's, less its
    DTRAIN_*, RANK and PYTHONPATH, with PYTHONPATH `path` (a list of directories), rank 0, tokens and the health
    socket `socket_path`; `extra` on top."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DTRAIN_") and k not in ("RANK", "PYTHONPATH")}
    env.update(PYTHONPATH=os.pathsep.join(path), DTRAIN_HEALTH_SOCKET=socket_path, RANK="0", DTRAIN_JOB_TOKEN="t",
               DTRAIN_REPORT_TOKEN="r", **extra)
    return env


def status_json(run, *args):
    """`dtrain status --json ARGS` in the run's directory, parsed ({} and a failed check when it is not JSON)."""
    done = subprocess.run([DTRAIN, "status"] + list(args) + ["--json"], cwd=run.dir, capture_output=True, text=True,
                          timeout=30)
    try:
        return json.loads(done.stdout)
    except ValueError:
        check(False, "dtrain status --json printed JSON: %r %r" % (done.stdout, done.stderr))
        return {}


def finish():
    """Exits non-zero if any check failed."""
    if failures:
        print("%d check(s) failed" % len(failures), flush=True)
        sys.exit(1)
    print("all checks passed", flush=True)
    scratch.passed()
    sys.exit(0)


def tagged_pids(tag):
    """Pids of live processes (not zombies) whose environment carries DTRAIN_TEST_TAG=tag."""
    needle = ("DTRAIN_TEST_TAG=" + tag).encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open("/proc/%s/environ" % entry, "rb") as f:
                env = f.read()
            with open("/proc/%s/stat" % entry) as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z" and needle in env.split(b"\0"):
            found.append(int(entry))
    return found


def argv_of(pid):
    """The command line of `pid` as a list of bytes; [] when it is gone."""
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return f.read().split(b"\0")
    except OSError:
        return []


def describe(pids):
    out = []
    for pid in pids:
        try:
            with open("/proc/%d/cmdline" % pid, "rb") as f:
                out.append("%d:%s" % (pid, f.read().replace(b"\0", b" ").decode(errors="replace").strip()))
        except OSError:
            pass
    return ", ".join(out)


def wait_no_leaks(tag, timeout):
    """Waits until no process of the run is left; returns the seconds it took, or None (and the leftovers)."""
    start = time.monotonic()
    while True:
        left = tagged_pids(tag)
        if not left:
            return time.monotonic() - start, []
        if time.monotonic() - start > timeout:
            return None, left
        time.sleep(0.02)


def wait_for(what, predicate, timeout, interval=0.2):
    """Polls `predicate` until it returns something true, and returns that; after `timeout` seconds records a failed
    check naming `what` and returns None."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    check(False, "timed out waiting for " + what)
    return None


def kill_tagged(tag):
    for pid in tagged_pids(tag):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


class Run:
    """One dtrain invocation in its own temp directory with a fresh tag."""

    def __init__(self, args, cwd=None, env=None, timeout=120):
        self.tag = uuid.uuid4().hex
        self.dir = cwd or tempfile.mkdtemp(prefix="dtrain-it-")
        self.env = dict(os.environ)
        self.env["DTRAIN_TEST_TAG"] = self.tag
        self.env.update(env or {})
        self.args = [DTRAIN] + list(args)
        self.timeout = timeout
        self.proc = None

    def start(self):
        self.proc = subprocess.Popen(self.args, cwd=self.dir, env=self.env, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, start_new_session=True)
        return self

    def wait(self):
        try:
            self.out, self.err = self.proc.communicate(timeout=self.timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.out, self.err = self.proc.communicate()
            kill_tagged(self.tag)
            check(False, "dtrain %s timed out after %d s" % (" ".join(self.args[1:3]), self.timeout))
        self.code = self.proc.returncode
        return self

    def run(self):
        return self.start().wait()

    def show(self):
        print("--- exit %s\n--- stdout\n%s--- stderr\n%s---" % (self.code, self.out, self.err), flush=True)

    def assert_no_leaks(self, timeout=5.0):
        took, left = wait_no_leaks(self.tag, timeout)
        check(took is not None, "processes left running after the launcher exited: " + describe(left))
        if left:
            kill_tagged(self.tag)
        return took

    def job_dirs(self, logs="runs"):
        base = os.path.join(self.dir, logs)
        return sorted(os.path.join(base, d) for d in os.listdir(base)) if os.path.isdir(base) else []


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    return path


TINY_TRAINER_SPEC = """
name: %s
nodes: {provider: local, count: 1}
workers_per_node: 2
shell: true
command: "exec %s --model tiny --data %s %s"
stop: {grace_s: 1}
logs: {dir: runs, console: none}
"""


def tiny_trainer_job(name, flags, env=None):
    """A 2-rank dtrain-trainer job (--model tiny, then `flags`) on a shard of a short text, launched and waited for:
    (the Run, its run directory, its status.json); the job's success and its one run directory are checked."""
    trainer = os.path.join(os.path.dirname(os.path.abspath(DTRAIN)), "dtrain-trainer")
    run = Run([], env=env, timeout=120)
    text = write(os.path.join(run.dir, "data.txt"), " ".join(["the model trains on bytes"] * 2000))
    shard = os.path.join(run.dir, "data.bin")
    subprocess.run([trainer, "prepare-text", text, shard], check=True, capture_output=True, timeout=60)
    run.args = [DTRAIN, "launch", write(os.path.join(run.dir, name + ".yaml"),
                                        TINY_TRAINER_SPEC % (name, trainer, shard, flags))]
    run.run()
    check(run.code == 0, "the trainer job succeeds, got %s: %s" % (run.code, run.err[-600:]))
    jobs = run.job_dirs()
    check(len(jobs) == 1, "one run directory: %s" % jobs)
    with open(os.path.join(jobs[0], "status.json")) as f:
        return run, jobs[0], json.load(f)


# A worker that sends health reports over gRPC as dtrain-trainer does, a step every 50 ms until the file argv[1]
# exists (or argv[2] seconds passed): per-step breakdown of a 100 ms step, each rank with its own tokens/s and RSS;
# rank 2's data loader is slow (38 ms of data wait where its peers have 3, while they wait for it in the gradient
# reduction), which makes it the straggler. With argv[3] == "jitter" the step times vary from step to step
# (100-132 ms), as a real job's do.
REPORTING_WORKER = r"""
import os, sys, time
import grpc
from dtrain.v1 import report_pb2, report_pb2_grpc

rank = int(os.environ["RANK"])
stub = report_pb2_grpc.WorkerReportsStub(grpc.insecure_channel(os.environ["DTRAIN_AGENT_ADDR"]))
token = [("dtrain-token", os.environ["DTRAIN_JOB_TOKEN"]), ("dtrain-report-token", os.environ["DTRAIN_REPORT_TOKEN"])]
data, comm = (38.0, 0.0) if rank == 2 else (3.0, 35.0)
stop, limit, jitter = sys.argv[1], float(sys.argv[2]), sys.argv[3:] == ["jitter"]
began = time.monotonic()
step = 0
while not os.path.exists(stop) and time.monotonic() - began < limit:
    step += 1
    extra = 8.0 * ((step * 7 + rank * 3) % 5) if jitter else 0.0
    stub.Report(report_pb2.WorkerReport(rank=rank, step=step, loss=2.0, tokens_per_s=1000.0 + rank, steps_done=step,
                                        rss_bytes=(100 + rank) << 20, step_ms=100.0 + extra, data_wait_ms=data,
                                        compute_ms=55.0 + extra, comm_exposed_ms=comm, optimizer_ms=7.0),
                metadata=token, timeout=10)
    time.sleep(0.05)
"""


# A real PyTorch DDP job (gloo) that reports through the Python health helper (worker/python/dtrain_health.py: timed, step,
# watch), argv[2] steps on every rank (200 if not given). argv[1] picks a straggler: "data" (rank 2's loader sleeps
# 60 ms per batch, the others wait for it inside DDP's allreduce) or "compute" (rank 1 spends 60 ms more inside each
# step).
STRAGGLER_TORCH_WORKER = r"""
import os, sys, time
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
import dtrain_health as health

rank, mode = int(os.environ["RANK"]), sys.argv[1]
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 200
torch.set_num_threads(1)
dist.init_process_group("gloo")
torch.manual_seed(0)
model = DDP(torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.Tanh(), torch.nn.Linear(128, 1)))
health.watch(model)
opt = torch.optim.SGD(model.parameters(), lr=0.01)

def batches():
    gen = torch.Generator().manual_seed(rank)
    while True:
        time.sleep(0.06 if mode == "data" and rank == 2 else 0.005)
        x = torch.randn(32, 64, generator=gen)
        yield x, x.sum(dim=1, keepdim=True)

for step, (x, y) in enumerate(health.timed(batches())):
    with health.step():
        loss = torch.nn.functional.mse_loss(model(x), y)
        if mode == "compute" and rank == 1:
            time.sleep(0.06)   # a slow device or CPU contention: inside the step, before the allreduce
        opt.zero_grad()
        loss.backward()
        opt.step()
        health.report(loss=loss, tokens=32)
    if step + 1 == steps:   # the same number of steps on every rank: each step's allreduce needs them all
        break
time.sleep(1.5)   # a heartbeat carries the last step
# torch 1.13: DDP (and ZeroRedundancyOptimizer) keep the process group alive past destroy_process_group(), and
# gloo's threads left to the interpreter's teardown may abort the process ("terminate called without an active
# exception"): drop them first, so its threads end here.
del model
dist.destroy_process_group()
"""
