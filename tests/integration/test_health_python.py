"""The Python health helper (worker/python/dtrain_health.py) in real PyTorch workers, real agents, a real datagram socket:
  ddp       a gloo DDP job (2 nodes x 1 worker) imports the helper from the PYTHONPATH the agent gives it (before the
            PyTorch bootstrap's directory, health.instrument being auto, and the spec's own PYTHONPATH), uses
            timed/step/report/phase/watch; rank 1 fails on purpose after 5 steps and the summary shows its last
            report, sent by the helper, at step 5: the bootstrap, armed too, did not count its optimizer steps again; the step's times add up and the allreduces were timed;
  hostile   before training, rank 1 sends datagrams that are not JSON, over 4 KiB, with another rank's or a forged
            token, with a NaN or an infinite loss, a step of 2^64-1: none of them reaches the summary, the agent
            goes on taking good reports;
  hang      with health.hang_timeout_s 3, rank 1 blocks in a Python function `stuck_in_data_loader`: the job fails
            (124) and the summary shows that function from the faulthandler dump the agent asked for; rank 0, which
            handles SIGUSR2 itself and never announced a dump signal, is not signalled;
  outside   outside dtrain every call of the helper does nothing;
  loss every with DTRAIN_HEALTH_LOSS_EVERY=3, a loss on a device (a stand-in tensor whose device is not the CPU) is
            captured at steps 0, 3, 6 and 9 of 10 only, each read once its value exists (its item() is never called
            inside a step); a CPU loss is read by the sender, never at step(); a malformed
            DTRAIN_HEALTH_LOSS_EVERY or DTRAIN_HEALTH_INTERVAL_MS is said once on stderr and the default used;
  in torch  a process exits while the helper's sender thread is inside torch code that released the GIL (a loss whose
            read runs a matmul): 3 times, it exits 0 (not SIGABRT, "terminate called without an active exception",
            which it did before the sender's thread was stopped at exit) and its last report, exiting, has the loss."""

import glob
import json
import os
import re
import socket
import subprocess
import tempfile

from harness import PYTHON, SOURCE_DIR, Run, check, finish, write

DDP = r"""
import json, os, socket, sys, time
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
import dtrain_health as health

rank = int(os.environ["RANK"])
print("rank", rank, "path", json.dumps(sys.path[:4]), "helper", health.__file__, flush=True)
if rank == 1:
    # Hostile datagrams, straight to the agent's socket; each must be dropped.
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    path = os.environ["DTRAIN_HEALTH_SOCKET"]
    good = {"rank": 1, "token": os.environ["DTRAIN_JOB_TOKEN"], "report_token": os.environ["DTRAIN_REPORT_TOKEN"]}
    def forged(**fields):
        body = dict(good, step=99, steps_done=99, loss=99.0)
        body.update(fields)
        return json.dumps(body).encode()
    for bad in [b"{not json", b"[1]", b"{" * 5000, forged(report_token="0" * 32), forged(token="forged"),
                forged(rank=0), forged(loss=float("nan")), forged().replace(b"99.0", b"1e999"),
                forged(step=2**64 - 1), forged(tokens_per_s=-5.0)]:
        s.sendto(bad, path)
dist.init_process_group("gloo")
torch.manual_seed(0)
model = DDP(torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.Tanh(), torch.nn.Linear(256, 1)),
            bucket_cap_mb=0.05)
health.watch(model)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
def batches():
    gen = torch.Generator().manual_seed(rank)
    while True:
        time.sleep(0.02)   # a slow loader: data wait
        x = torch.randn(32, 64, generator=gen)
        yield x, x.sum(dim=1, keepdim=True)
for step, (x, y) in enumerate(health.timed(batches())):
    with health.step():
        health.phase("forward")
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        health.report(loss=loss, tokens=32)
    last = health._reporter.last
    print("rank %d step %d %s" % (rank, step + 1, json.dumps(last, sort_keys=True)), flush=True)
    if step + 1 == 5:
        break
health.phase("done training")
time.sleep(1.5)   # a heartbeat carries the last step
if rank == 1:
    print("rank 1 fails on purpose, loss %.6f" % float(loss), flush=True)
    # torch 1.13: DDP (and ZeroRedundancyOptimizer) keep the process group alive past destroy_process_group(), and
    # gloo's threads left to the interpreter's teardown may abort the process ("terminate called without an active
    # exception"): drop them first, so its threads end here.
    del model, opt
    dist.destroy_process_group()
    sys.exit(3)
time.sleep(300)
"""

HANG = r"""
import os, signal, sys, threading, time
rank = int(os.environ["RANK"])
if rank == 0:
    # No helper: handles SIGUSR2 itself and never announced it; the agent must not send it.
    signal.signal(signal.SIGUSR2, lambda *_: open(sys.argv[1], "w").write("signalled"))
    time.sleep(300)
import dtrain_health as health

def stuck_in_data_loader():
    threading.Event().wait()

def batches():
    for i in range(1000):
        if i == 2:
            stuck_in_data_loader()
        yield i

for batch in health.timed(batches()):
    with health.step():
        time.sleep(0.05)
"""

SPEC = """
name: %s
nodes: {provider: local, count: 2}
workers_per_node: 1
command: [%s, %s, %s]
env: {PYTHONPATH: %s}
stop: {grace_s: 1}
health: {%s}
logs: {dir: runs, console: all}
"""


def launch(name, script, arg, health):
    run = Run([], timeout=240)
    user_path = os.path.join(run.dir, "user-modules")
    spec = write(os.path.join(run.dir, "job.yaml"),
                 SPEC % (name, PYTHON, write(os.path.join(run.dir, name + ".py"), script), arg, user_path, health))
    run.args += ["launch", spec]
    run.run()
    run.show()
    run.user_path = user_path
    return run


# ---- ddp + hostile
run = launch("pyhealth", DDP, "-", "startup_timeout_s: 120")
check(run.code == 3, "rank 1 exits 3 -> launcher exits 3, got %s" % run.code)
paths = re.findall(r'rank \d path \["[^"]*", "([^"]*)", "([^"]*)", "([^"]*)"\] helper (\S+)', run.out)
check(len(paths) == 2, "both ranks imported the helper: %s" % paths)
for helper_dir, bootstrap_dir, user_dir, helper in paths:
    check(helper_dir.endswith("share/dtrain/python") and helper.startswith(helper_dir),
          "the helper comes from the agent's share/dtrain/python (%s)" % helper)
    check(bootstrap_dir == helper_dir + "/bootstrap", "the bootstrap's directory follows it (%s)" % bootstrap_dir)
    check(user_dir == run.user_path, "the spec's PYTHONPATH follows it (%s)" % user_dir)
loss = re.search(r"rank 1 fails on purpose, loss (\S+)", run.out)
summary = re.search(r"last health report of rank 1: step (\d+), loss (\S+), (\S+) tokens/s, last phase: ([^,\n]*)", run.err)
check(summary is not None, "the summary shows rank 1's last report")
if summary and loss:
    check(summary.group(1) == "5", "its step is the 5th (the hostile step 99 never got through, the bootstrap "
          "counted nothing on top): " + summary.group(1))
    check(abs(float(summary.group(2)) - float(loss.group(1))) < 1e-4, "its loss is the last step's: %s vs %s" %
          (summary.group(2), loss.group(1)))
    check(float(summary.group(3)) > 0, "tokens/s from report(tokens=...)")
    check(summary.group(4) == "done training", "its phase is the last one set: " + summary.group(4))
steps = [json.loads(m) for m in re.findall(r"rank \d step \d+ (\{.*\})", run.out)]
check(len(steps) == 10, "both ranks ran 5 steps (%d)" % len(steps))
for t in steps:
    check(t["data_wait_ms"] >= 15, "the loader's 20 ms sleep is data wait: %s" % t)
    check(abs(t["step_ms"] - t["data_wait_ms"] - t["comm_exposed_ms"] - t["compute_ms"]) < 0.01,
          "step = data wait + exposed comm + compute: %s" % t)
check(any(t["comm_exposed_ms"] > 0 for t in steps), "watch() timed the allreduces")
run.assert_no_leaks()

# ---- hang: the Python function a rank is blocked in
marker = os.path.join(tempfile.mkdtemp(prefix="dtrain-it-"), "rank0-signalled")
run = launch("pyhang", HANG, marker, "hang_timeout_s: 3")
check(run.code == 124, "a hung Python rank -> exit 124, got %s" % run.code)
check(re.search(r"rank 1 made no step progress for 3\.\d s", run.err), "the hang check names rank 1")
frames = re.search(r"where rank 1 is \(first frames of its main thread\):\n( +File .*\n)*? +File \"\S+pyhang\.py\", "
                   r"line \d+ in stuck_in_data_loader\n", run.err)
check(frames is not None, "the summary shows the Python function rank 1 is blocked in")
dumps = glob.glob(os.path.join(run.dir, "runs", "*", "attempt_0", "stacks", "rank_1.dump.txt"))
check(len(dumps) == 1 and "stuck_in_data_loader" in open(dumps[0]).read(), "faulthandler wrote rank 1's dump")
stacks = glob.glob(os.path.join(run.dir, "runs", "*", "attempt_0", "stacks", "rank_1.txt"))
check(len(stacks) == 1 and "the worker's own dump (signal" in open(stacks[0]).read(),
      "rank 1's stacks file holds the Python stacks too")
check(not os.path.exists(marker), "rank 0, which announced no dump signal, was not signalled")
run.assert_no_leaks()

# ---- outside dtrain: no-ops
OUTSIDE = r"""
import signal, threading
import dtrain_health as health
items = [1, 2]
assert not health.enabled()
assert health.timed(items) is items
assert health.step() is health.step()
with health.step():
    pass
assert health.report(loss=1.0, tokens=3) is None and health.phase("x") is None and health.watch(object()) is None
assert threading.active_count() == 1, threading.enumerate()
assert signal.getsignal(signal.SIGUSR2) == signal.SIG_DFL
print("no-op")
"""
env = {k: v for k, v in os.environ.items() if not k.startswith("DTRAIN_")}
env["PYTHONPATH"] = os.path.join(SOURCE_DIR, "worker", "python")
done = subprocess.run([PYTHON, "-c", OUTSIDE], env=env, capture_output=True, text=True, timeout=60)
check(done.returncode == 0 and "no-op" in done.stdout, "outside dtrain the helper does nothing: " + done.stderr)

# ---- loss every: a device loss is captured every DTRAIN_HEALTH_LOSS_EVERY steps; malformed variables
LOSS_EVERY = r"""
import os, socket, tempfile, threading
path = os.path.join(tempfile.mkdtemp(), "health.sock")
sink = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
sink.bind(path)
os.environ["DTRAIN_HEALTH_SOCKET"] = path
import dtrain_health as health

class Device:
    type = "xla"

class Loss:
    device = Device()
    requires_grad = False
    def __init__(self, step):
        self.step = step
    def detach(self):
        return self
    def item(self):
        assert not stepping, "item() on the training thread while it steps"
        return float(self.step)

captured = []
stepping = True
for step in range(10):
    with health.step():
        health.report(loss=Loss(step))
        pending = health._reporter.pending_loss
        if pending is not None and pending[0].step == step:
            captured.append(step)
stepping = False
health._reporter.pending_loss = None
health.report(loss=0.5)
cpu = type("CpuLoss", (Loss,), {"device": type("D", (), {"type": "cpu"})()})(7)
health.report(loss=cpu)
print("captured", captured, "every", health._reporter.loss_every, "interval", health._reporter.interval,
      "cpu pending", health._reporter.pending_loss[0].step)
"""
# (TMPDIR: the script's socket directory goes with this test's scratch directory.)
env = dict(env, DTRAIN_HEALTH_LOSS_EVERY="3", TMPDIR=tempfile.gettempdir())
done = subprocess.run([PYTHON, "-c", LOSS_EVERY], env=env, capture_output=True, text=True, timeout=60)
check(done.returncode == 0 and "captured [0, 3, 6, 9] every 3 interval 1.0 cpu pending 7" in done.stdout,
      "a device loss is captured every 3 steps, a CPU loss left to the sender: %s %s" % (done.stdout, done.stderr))
env = dict(env, DTRAIN_HEALTH_LOSS_EVERY="ten", DTRAIN_HEALTH_INTERVAL_MS="-5")
done = subprocess.run([PYTHON, "-c", LOSS_EVERY], env=env, capture_output=True, text=True, timeout=60)
check(done.returncode == 0 and "every 10 interval 1.0" in done.stdout and
      done.stderr.count("DTRAIN_HEALTH_LOSS_EVERY='ten' is not a positive integer; using 10") == 1 and
      done.stderr.count("DTRAIN_HEALTH_INTERVAL_MS='-5' is not a positive integer; using 1000") == 1,
      "malformed variables are said once and the defaults used: %s %s" % (done.stdout, done.stderr))

# ---- exit while the sender runs torch code: the process exits 0 and its last report goes out
# At exit the interpreter ends daemon threads where they next take the GIL; one inside torch code that released it
# (a loss's item()) unwinds through C++ and aborts ("terminate called without an active exception"). The helper's
# sender thread must be stopped before that.
IN_TORCH = r"""
import threading
import torch
import dtrain_health as health
big = torch.ones(2000, 2000)
started = threading.Event()
class SlowLoss:   # a CPU loss whose read runs torch code without the GIL, as a tensor's item() does, only longer
    device = type("D", (), {"type": "cpu"})()
    requires_grad = False
    def detach(self):
        return self
    def item(self):
        started.set()
        torch.mm(big, big)
        return 2.5
with health.step():
    health.report(loss=SlowLoss())
health._reporter.wake.set()
assert started.wait(30), "the sender never read the loss"
print("exiting while the sender is in torch", flush=True)
"""
with tempfile.TemporaryDirectory() as scratch:
    path = os.path.join(scratch, "health.sock")
    sink = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sink.bind(path)
    sink.setblocking(False)
    # (A long interval: the few datagrams sent fit the socket's queue, which this test reads only at the end.)
    in_torch_env = {k: v for k, v in env.items() if k != "DTRAIN_HEALTH_LOSS_EVERY"}
    in_torch_env.update(DTRAIN_HEALTH_SOCKET=path, DTRAIN_HEALTH_INTERVAL_MS="60000")
    results = []
    for attempt in range(3):
        done = subprocess.run([PYTHON, "-c", IN_TORCH], env=in_torch_env, capture_output=True, text=True, timeout=120)
        reports = []
        while True:
            try:
                reports.append(json.loads(sink.recv(8192)))
            except BlockingIOError:
                break
        results.append((done.returncode, done.stderr.strip()[-300:], reports[-1] if reports else None))
    sink.close()
for code, err, last in results:
    check(code == 0 and last is not None and last.get("exiting") is True and last.get("loss") == 2.5,
          "exiting while the sender runs torch code: exit 0 and a last report with the loss: %s %s %s"
          % (code, err, last))

finish()
