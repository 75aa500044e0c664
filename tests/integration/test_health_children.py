"""Only the worker process the agent started speaks for its rank (DTRAIN_WORKER_PID, its pid): the Python processes
that inherit its environment (PYTHONPATH with dtrain_health and the bootstrap, DTRAIN_HEALTH_SOCKET, the tokens) send
nothing, with real agents, real PyTorch (Debian's 1.13) and one rank. Each child says what it sees: no reporter
(dtrain_health not enabled, or not loaded) and, where the bootstrap would arm, torch unwrapped. And the jobs end as
they would without the children: each job's health.exit_timeout_s is 2, so a child's last report (`exiting`), taken
for the rank's, would fail it as stuck in teardown, as the worker goes on over 2 s past the child's exit; and a child's
reports, alternating with the worker's, would look like progress (the agent, which drops reports from processes other
than the worker, guards these too). Each script sets DTRAIN_WORKER_PID to its own pid when its agent did not (one that
predates the variable), as the agent does.
  spawn     a script that imports dtrain_health and counts its steps with timed() and step(), over a DataLoader with
            multiprocessing_context="spawn" and 2 workers, for 2 epochs of 4 batches: each epoch's workers import
            the script (and so dtrain_health) and exit at the epoch's end (the script then sleeps 2.5 s). The job
            succeeds (exit 0) and `dtrain status` shows the rank at its 8 steps; each spawned worker has no reporter
            and no reporter's thread. In a child forked from the worker, dtrain_health is enabled() no more and
            step() and timed() do nothing;
  subprocess  an unmodified script (no dtrain import: the bootstrap counts its optimizer steps) steps twice, runs
            `subprocess.run([sys.executable, "child.py"])` whose child steps an optimizer 3 times and exits, then
            steps 3 more times over 2.4 s: the job succeeds, the rank is at its 5 steps, and the child ran with torch
            unwrapped and no dtrain_health loaded;
  hang      health.hang_timeout_s 2: an unmodified script starts a child that steps an optimizer every 50 ms for
            20 s (unarmed, as above), steps 3 times once the child does, and then sleeps: the job fails (124) as
            `rank 0 made no step progress` at step 3, within about the timeout (the child's steps are not the rank's
            progress)."""

import os
import re
import time

from harness import PYTHON, Run, check, finish, status_json, write

# The agent's DTRAIN_WORKER_PID, until every agent sets it: this process is the worker.
WORKER_PID = """import os
os.environ.setdefault("DTRAIN_WORKER_PID", str(os.getpid()))
"""

SPAWN = WORKER_PID + r"""
import threading, time
import torch
import dtrain_health as health


class Items(torch.utils.data.Dataset):
    def __len__(self):
        return 16

    def __getitem__(self, i):
        return torch.full((4,), float(i))


def say_silent(worker):
    # In each spawned worker: no reporter here, nor its thread.
    threads = [t.name for t in threading.enumerate() if t.name.startswith("dtrain-health")]
    print("spawned worker %d: dtrain_health enabled %s, its threads %s" % (worker, health.enabled(), threads),
          flush=True)


def forked_child_is_silent():
    # A child forked from the worker: every call does nothing, as outside dtrain.
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        with health.step():
            pass
        items = [1, 2]
        silent = not health.enabled() and health.timed(items) is items and health.step() is health._NOTHING
        os.write(write_end, b"1" if silent else b"0")
        os._exit(0)
    os.close(write_end)
    answer = os.read(read_end, 1)
    os.waitpid(pid, 0)
    return answer == b"1"


def main():
    torch.set_num_threads(1)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = torch.utils.data.DataLoader(Items(), batch_size=4, num_workers=2, multiprocessing_context="spawn",
                                         worker_init_fn=say_silent)
    steps = 0
    for epoch in range(2):
        for x in health.timed(loader):
            with health.step():
                loss = model(x).sum()
                opt.zero_grad()
                loss.backward()
                opt.step()
            steps += 1
    print("trained %d steps; forked child silent: %s" % (steps, forked_child_is_silent()), flush=True)
    time.sleep(2.5)   # past health.exit_timeout_s after the last workers exited


if __name__ == "__main__":
    main()
"""

# What a child Python shows of the bootstrap: whether it armed (torch.Tensor.backward wrapped) and started reporting
# (dtrain_health loaded).
ARMED = r"""
def armed():
    import sys, torch
    wrappers = type(torch.Tensor.backward).__name__
    return "wrappers %s, dtrain_health loaded %s" % (wrappers, "dtrain_health" in sys.modules)
"""

CHILD = ARMED + r"""
import torch
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for _ in range(3):
    model(torch.randn(2, 4)).sum().backward()
    opt.step()
print("child stepped 3 times: %s" % armed(), flush=True)
"""

SUBPROCESS = WORKER_PID + r"""
import subprocess, sys, time
import torch
here = os.path.dirname(os.path.abspath(__file__))
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)

def step():
    model(torch.randn(2, 4)).sum().backward()
    opt.step()
    opt.zero_grad()

step()
step()
subprocess.run([sys.executable, os.path.join(here, "child.py")], check=True)
for _ in range(3):
    time.sleep(0.8)
    step()
print("parent stepped 5 times", flush=True)
"""

STEPPING_CHILD = ARMED + r"""
import sys, time
import torch
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
began = time.monotonic()
steps = 0
while time.monotonic() - began < 20:
    model(torch.randn(2, 4)).sum().backward()
    opt.step()
    steps += 1
    if steps == 1:
        print("the child steps: %s" % armed(), flush=True)
        open(sys.argv[1], "w").close()
    time.sleep(0.05)
"""

# The child steps first, so that every report of its own would fall between the worker's. The worker starts it before
# it imports torch itself, so that the two imports run side by side.
HANG = WORKER_PID + r"""
import subprocess, sys, time
here = os.path.dirname(os.path.abspath(__file__))
stepping = os.path.join(here, "child-stepping")
child = subprocess.Popen([sys.executable, os.path.join(here, "stepping_child.py"), stepping])
import torch
while not os.path.exists(stepping):
    time.sleep(0.02)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for _ in range(3):
    model(torch.randn(2, 4)).sum().backward()
    opt.step()
print("rank 0 hangs at step 3 while its child steps", flush=True)
time.sleep(300)
"""

SPEC = """
name: %s
nodes: {provider: local, count: 1}
workers_per_node: 1
command: [%s, %s]
stop: {grace_s: 1}
health: {exit_timeout_s: 2%s}
logs: {dir: runs, console: all}
"""


def launch(name, script, files=(), health=""):
    """`dtrain launch` of one rank running `script`, with `files` ((name, text) pairs) beside it."""
    run = Run([], timeout=120)
    for file_name, text in files:
        write(os.path.join(run.dir, file_name), text)
    path = write(os.path.join(run.dir, name + ".py"), script)
    run.args += ["launch", write(os.path.join(run.dir, "job.yaml"), SPEC % (name, PYTHON, path, health))]
    began = time.monotonic()
    run.run()
    run.took = time.monotonic() - began
    run.show()
    print("%s: the job took %.1f s" % (name, run.took), flush=True)
    return run


def rank0(run):
    return {r["rank"]: r for r in status_json(run).get("ranks", [])}.get(0, {})


# ---- spawn: a DataLoader's spawned workers import the script and dtrain_health
run = launch("children-spawn", SPAWN)
check(run.code == 0, "spawn: the job succeeds (no worker's exit taken for the rank's), got %s" % run.code)
check("stuck in teardown" not in run.err, "spawn: no rank reported stuck in teardown")
check("trained 8 steps; forked child silent: True" in run.out,
      "spawn: 8 steps, and in a forked child dtrain_health does nothing")
silent = re.findall(r"spawned worker \d: dtrain_health enabled False, its threads \[\]", run.out)
check(len(silent) == 4, "spawn: each epoch's 2 spawned workers have no reporter (%d of 4 said so)" % len(silent))
row = rank0(run)
check(row.get("step") == 8, "spawn: status shows the rank at its 8 steps: %s" % row)
run.assert_no_leaks()

# ---- subprocess: a child Python that steps an optimizer (the bootstrap on its PYTHONPATH)
run = launch("children-subprocess", SUBPROCESS, [("child.py", CHILD)])
check(run.code == 0, "subprocess: the job succeeds, got %s" % run.code)
check("parent stepped 5 times" in run.out, "subprocess: the parent ran to the end")
check("child stepped 3 times: wrappers function, dtrain_health loaded False" in run.out,
      "subprocess: the child ran with the bootstrap unarmed and no reporter")
check("stuck in teardown" not in run.err, "subprocess: no rank reported stuck in teardown")
row = rank0(run)
check(row.get("step") == 5, "subprocess: status shows the rank at its own 5 steps, not its child's: %s" % row)
run.assert_no_leaks()

# ---- hang: a child's steps do not hide the worker's hang
run = launch("children-hang", HANG, [("stepping_child.py", STEPPING_CHILD)], ", hang_timeout_s: 2")
check(run.code == 124, "hang: the job fails as a health check (124), got %s" % run.code)
check("the child steps: wrappers function, dtrain_health loaded False" in run.out,
      "hang: the stepping child runs with the bootstrap unarmed and no reporter")
check(re.search(r"rank 0 made no step progress for 2\.\d s \(stuck at step 3", run.err),
      "hang: the hang check names rank 0 at step 3")
# Start-up (two torch imports, side by side), the 2 s timeout, the stacks (at most 5 s) and the stop (grace 1 s); the
# child's 20 s of steps, taken for progress, would keep it going past 20 s.
check(run.took < 17, "hang: caught within about the timeout (the job took %.1f s)" % run.took)
run.assert_no_leaks()

finish()
