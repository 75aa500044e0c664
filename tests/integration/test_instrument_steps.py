"""The PyTorch bootstrap's steps as its reports carry them, without a launcher: a real /usr/bin/python3 with Debian's
torch, a bootstrap directory and worker/python on PYTHONPATH as an agent gives them, and a datagram socket this test
binds where the agent's would be (every report it sends is kept). Every case runs twice: with the build's bootstrap
directory (share/dtrain/python/bootstrap, whose _dtrain_hooks gives the C wrappers, as every worker of this
interpreter gets them) and with the source tree's (sitecustomize.py alone: the Python wrappers, what another
interpreter gets); the script checks which ones armed. The training thread keeps running totals only; the
reporter's thread turns the last two steps' totals into a step's numbers when it sends, so these check that what it
sends is the last step's own, not a sum or a mean:
  steps     a loop of 12 optimizer steps (a DataLoader of 4 x 8 int64 token ids, a Linear, backward(), a blocking
            all_reduce on a 1-rank gloo group, SGD) whose step 12 waits 120 ms inside the DataLoader and 60 ms in
            all_reduces (the others 10 ms each): the last report is at step 12 with data wait and exposed
            communication of step 12 alone (not the 12 steps' sums), step time at least their sum, 32 tokens and
            4 samples per step time, the loss of step 12's backward(), and the phase "data" (the loop's last
            next(), which ended the DataLoader);
  first     the first step is sent at once (the start-up check waits for it): a report at step 1 comes while the
            script sleeps 0.5 s after its first step (the interval is 1 s, the whole script under it after that);
  by hand   once the script reports its own tokens (dtrain_health.report(tokens=100)) at each step, the bootstrap's
            steps carry them: the last report's tokens per step time are 100;
  exit      the last step's report arrives although the script exits right after it (the exit flush)."""

import json
import os
import socket
import subprocess
import tempfile
import threading
import time

from harness import BOOTSTRAP_DIRS, HELPER_DIR, PYTHON, WRAPPER_TYPE, check, finish, health_env

SCRIPT = r"""
import os, sys, time
import torch
import torch.distributed as dist

dist.init_process_group("gloo", init_method="file://" + sys.argv[1], rank=0, world_size=1)
torch.set_num_threads(1)
STEPS = 12


class Tokens(torch.utils.data.Dataset):
    # One sample per call; batches of 4: batch b's last sample sleeps (10 ms; 120 ms for the last batch).
    def __len__(self):
        return 4 * STEPS

    def __getitem__(self, i):
        if i % 4 == 3:
            time.sleep(0.12 if i == 4 * STEPS - 1 else 0.01)
        return torch.arange(8) + i


model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
one = torch.ones(1)


def all_reduce(step):
    # Blocking all_reduces for 10 ms (60 ms at the last step): what a slow peer makes of one.
    began = time.perf_counter()
    while time.perf_counter() - began < (0.06 if step == STEPS - 1 else 0.01):
        dist.all_reduce(one)


mode, wrappers, meant = sys.argv[2], sys.argv[3], sys.argv[4]
armed = type(torch.Tensor.backward).__name__
if armed != meant:
    sys.exit("the %s wrappers were meant to arm, but torch.Tensor.backward is a %s" % (wrappers, armed))
for step, batch in enumerate(torch.utils.data.DataLoader(Tokens(), batch_size=4)):
    loss = model(batch.float()).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    all_reduce(step)
    if mode == "by-hand":
        import dtrain_health
        dtrain_health.report(tokens=100)
    opt.step()
    if step == 0:
        time.sleep(0.5)   # the first step's report must come now, not at the next 1 s resend
print("loss %.9f" % float(loss), flush=True)
dist.destroy_process_group()   # the process group's gloo threads end here, not in the interpreter's teardown
"""


class Sink:
    """The agent's side of the health socket: keeps every report, with the time it came."""

    def __init__(self, path):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(path)
        self.sock.settimeout(0.1)
        self.reports = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._drain, daemon=True)
        self.thread.start()

    def _drain(self):
        while not self.stop.is_set():
            try:
                self.reports.append((time.monotonic(), json.loads(self.sock.recv(65536))))
            except socket.timeout:
                pass

    def close(self):
        time.sleep(0.3)
        self.stop.set()
        self.thread.join(timeout=5)
        self.sock.close()


def run(work, mode, wrappers):
    name = "%s-%s" % (wrappers, mode)
    sink = Sink(os.path.join(work, name + ".sock"))
    env = health_env(os.path.join(work, name + ".sock"), [BOOTSTRAP_DIRS[wrappers], HELPER_DIR],
                     DTRAIN_HEALTH_INTERVAL_MS="1000")
    began = time.monotonic()
    done = subprocess.run([PYTHON, "-c", SCRIPT, os.path.join(work, name + ".store"), mode, wrappers,
                           WRAPPER_TYPE[wrappers]], env=env, capture_output=True, text=True, timeout=120)
    sink.close()
    check(done.returncode == 0 and "dtrain:" not in done.stderr,
          "%s: the script ran with the instrumentation on: exit %d, %s" % (name, done.returncode, done.stderr[-2000:]))
    return began, sink.reports, done.stdout


def cases(work, wrappers):
    def expect(condition, message):
        return check(condition, "%s wrappers, %s" % (wrappers, message))

    # ---- steps, first, exit
    began, reports, out = run(work, "plain", wrappers)
    last = reports[-1][1] if reports else {}
    print("last report:", json.dumps(last, sort_keys=True), flush=True)
    expect(last.get("step") == 12 and last.get("steps_done") == 12 and last.get("exiting") is True,
          "exit: the last report is the exiting one at step 12: %s" % last)
    expect(110 <= last.get("data_wait_ms", 0) < 200,
          "steps: data wait is step 12's (120 ms in its DataLoader), not the 12 steps' sum (230 ms): %s" % last)
    expect(40 <= last.get("comm_exposed_ms", 0) < 110,
          "steps: exposed communication is step 12's (60 ms in all_reduce), not the 12 steps' sum (170 ms): %s" % last)
    expect(last.get("step_ms", 0) >= last.get("data_wait_ms", 0) + last.get("comm_exposed_ms", 0) and
          last.get("step_ms", 0) < 900, "steps: step 12's time holds its data wait and communication: %s" % last)
    step_s = last.get("step_ms", 0) / 1000
    expect(abs(last.get("tokens_per_s", 0) * step_s - 32) < 0.01 and abs(last.get("samples_per_s", 0) * step_s - 4) < 0.01,
          "steps: 4 x 8 token ids and 4 samples per step: %s" % last)
    loss = [line.split()[1] for line in out.splitlines() if line.startswith("loss ")]
    expect(loss and last.get("loss") is not None and abs(last["loss"] - float(loss[0])) < 1e-6,
          "steps: the loss is step 12's backward(): %s vs %s" % (last.get("loss"), loss))
    expect(last.get("phase") == "data",
          "steps: the phase is data (the loop's last next(), which ended the DataLoader): %s" % last.get("phase"))
    sent = [(round(at - began, 2), report.get("step"), report.get("exiting", False)) for at, report in reports]
    expect(any(step == 1 and not exiting for _, step, exiting in sent),
          "first: step 1 was sent at once (the script sleeps 0.5 s after it, the interval is 1 s): %s" % sent)

    # ---- by hand
    began, reports, out = run(work, "by-hand", wrappers)
    last = reports[-1][1] if reports else {}
    step_s = last.get("step_ms", 0) / 1000
    expect(last.get("step") == 12 and abs(last.get("tokens_per_s", 0) * step_s - 100) < 0.01,
          "by hand: the script's own 100 tokens per step win over the DataLoader's 32: %s" % last)


work = tempfile.mkdtemp(prefix="dtrain-it-steps-")
check(any(name.startswith("_dtrain_hooks.") for name in os.listdir(BOOTSTRAP_DIRS["C"])),
      "the build put the bootstrap's C wrappers (_dtrain_hooks) in %s (python3-dev missing?)" % BOOTSTRAP_DIRS["C"])
for wrappers in BOOTSTRAP_DIRS:
    print("---- the %s wrappers" % wrappers, flush=True)
    cases(work, wrappers)
finish()
