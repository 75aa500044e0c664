"""health.instrument: auto (worker/python/bootstrap/sitecustomize.py) on unmodified programs, real agents, real
PyTorch (Debian's 1.13 under /usr/bin/python3):
  auto      an ordinary gloo DDP script (2 ranks, a DataLoader: rank 0 single-process, rank 1 with two worker
            processes; ZeroRedundancyOptimizer over SGD; two micro-batches per optimizer step; a blocking all_reduce
            of the loss) that imports nothing of dtrain: `dtrain status --json` after the job shows each rank at
            exactly its 12 optimizer steps (ZeRO's inner step and the micro-batches not counted; the last step
            arrives although the script exits right after it), with data wait, step time, tokens/s from the
            batches of token ids (2 micro-batches of 8 x 4 tokens per step), samples/s (16 per step) and the loss of
            its last step's two backward()s (their sum);
            the user's own sitecustomize (on the spec's PYTHONPATH) still runs and is the program's
            `sitecustomize`, and the bootstrap directory comes before the user's;
  -m        the same script as `python3 -m module`: counted the same;
  off       `--set health.instrument=off`: no steps seen, no bootstrap on the worker's PYTHONPATH, the user's
            sitecustomize still runs;
  fault     an error inside the instrumentation (planted in the reporter it calls) is said once per rank on stderr,
            and the job trains to the same loss as with instrument off;
  reducer   a DDP script with no blocking collective of its own, whose rank 1 sleeps 60 ms before each forward:
            rank 0's exposed communication is its wait in DDP's gradient reduction (over half its step time in
            `dtrain status`, rank 1's under a fifth; a step starts at its first batch, DDP forward or backward(), not
            at import torch); each rank's own communication hook (rank 1 registers it before the first forward, rank 0
            after) runs once per bucket, as without dtrain;
  sigterm   ranks 0 (unmodified) and 1 (dtrain_health's step()) step every 2 ms until rank 2 fails the job, and the
            launcher stops them with SIGTERM: each one's last step (which it writes to a file) reaches
            `dtrain status`, where the once-a-second resend would have left it up to hundreds of steps behind;
  hang      with health.hang_timeout_s 3, a rank blocked in an all_reduce its peer never joins fails the job (124),
            and its last report names the collective as its phase;
  lacking   a torch without the DataLoader's iterator or DDP (a stand-in module armed directly): one line on rank 0
            names what is not measured (nothing on rank 1), and the rest is still armed;
  phases    with health.hang_timeout_s 3, two independent ranks (rank 1 starts once rank 0 does) step 3 times, then
            rank 0 blocks inside its DataLoader (`stuck_in_dataset`) and rank 1 inside backward()
            (`stuck_in_backward`, a custom autograd Function): the job fails with 124, their last reports name the
            phases data and backward, and the summary shows the hung rank's Python frames from the dump the agent
            asked for;
  no torch  a Python program that never imports torch runs unchanged (its output, no torch imported, the user's
            sitecustomize ran), and a program that is not Python (/bin/sh) gets no bootstrap on its PYTHONPATH;
  dtrain run  `--instrument off` sees no steps where the default (auto) sees them all; `--instrument sometimes` is
            refused with exit 2.

Run with no argument, every case but reducer (integration.instrument_torch, beside other tests); with `--only reducer`,
that case alone (integration.instrument_reducer, with nothing else running: it compares parts of a step's time).
The cases' jobs run in four lanes side by side (each job its own launcher, agents, directory and tag; none of these
cases checks a time), each lane's jobs one after another: hang, then `dtrain run` (auto); phases, then `dtrain run
--instrument off`; auto, -m and sigterm; off, fault, lacking and no torch. Each job is checked for leftover processes
as its launcher exits, and every case is checked, in the order listed above, once all have run."""

import json
import os
import re
import subprocess
import sys
import threading

from harness import PYTHON, SOURCE_DIR, Run, check, finish, status_json, write

LACKING = r"""
import importlib.util, sys, types
import torch
spec = importlib.util.spec_from_file_location("bootstrap", sys.argv[1])
bootstrap = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bootstrap)
stand_in = types.SimpleNamespace(__version__="0.0-stand-in", optim=torch.optim, Tensor=torch.Tensor, cuda=torch.cuda,
                                 distributed=torch.distributed, utils=types.SimpleNamespace(),
                                 nn=types.SimpleNamespace(parallel=types.SimpleNamespace()))
bootstrap._arm(stand_in)
print("armed", bootstrap._state.on, getattr(torch.optim.Optimizer.__init__, "__wrapped__", None) is not None)
"""

STEPS = 12

DDP = r"""
import json, os, sys, time
import sitecustomize
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.utils.data import DataLoader, Dataset

STEPS, MICRO, BATCH, SEQUENCE = %d, 2, 8, 4
rank = int(os.environ["RANK"])
print("rank %%d sitecustomize %%s user %%s path %%s" %% (rank, sitecustomize.__file__,
      getattr(sitecustomize, "USER_SITECUSTOMIZE", False), json.dumps(os.environ.get("PYTHONPATH", ""))), flush=True)
dist.init_process_group("gloo")
torch.manual_seed(0)

class Batches(Dataset):
    def __len__(self):
        return STEPS * MICRO * BATCH
    def __getitem__(self, i):
        time.sleep(0.002)
        tokens = torch.randint(0, 100, (SEQUENCE,), generator=torch.Generator().manual_seed(i))
        return tokens, tokens.float().mean(dim=0, keepdim=True) / 100

model = DDP(torch.nn.Sequential(torch.nn.Embedding(100, 16), torch.nn.Flatten(), torch.nn.Linear(16 * SEQUENCE, 1)))
opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.SGD, lr=0.01)
loader = DataLoader(Batches(), batch_size=BATCH, num_workers=2 if rank == 1 else 0)
for i, (x, y) in enumerate(loader):
    if i %% MICRO < MICRO - 1:
        with model.no_sync():
            earlier = torch.nn.functional.mse_loss(model(x), y)
            earlier.backward()
        continue
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad()
    mean = loss.detach().clone()
    dist.all_reduce(mean)
print("rank %%d trained %%d steps, loss %%.6f, own last loss %%.6f" %% (rank, (i + 1) // MICRO,
      float(mean) / dist.get_world_size(), float(earlier) + float(loss)), flush=True)
# torch 1.13: DDP (and ZeroRedundancyOptimizer) keep the process group alive past destroy_process_group(), and
# gloo's threads left to the interpreter's teardown may abort the process ("terminate called without an active
# exception"): drop them first, so its threads end here.
del model, opt
dist.destroy_process_group()
""" % STEPS

USER_SITECUSTOMIZE = r"""
import os
USER_SITECUSTOMIZE = True
print("user sitecustomize ran in rank", os.environ.get("RANK"), flush=True)
"""

# The same script with a fault planted in the instrumentation's path (dtrain_health's reporter, which the bootstrap
# calls at every step): the instrumentation must turn itself off and the training go on as if it were not there.
FAULT = r"""
import dtrain_health
def planted_fault(*args):
    raise RuntimeError("planted fault")
dtrain_health._Reporter.automatic_step = planted_fault
""" + DDP

# Three steps, then rank 1 blocks in an all_reduce that rank 0 never joins.
HANG = r"""
import os, time
import torch
import torch.distributed as dist
rank = int(os.environ["RANK"])
dist.init_process_group("gloo")
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    model(torch.randn(2, 4)).sum().backward()
    opt.step()
    dist.barrier()
print("rank %d hangs" % rank, flush=True)
if rank == 1:
    dist.all_reduce(torch.ones(1))
time.sleep(300)
"""

# Rank 1 is slow before its forward: rank 0 waits for its gradients inside DDP's reduction, in backward().
REDUCER = r"""
import os, time
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
rank = int(os.environ["RANK"])
dist.init_process_group("gloo")
calls = []
def own_hook(state, bucket):
    calls.append(1)
    return default_hooks.allreduce_hook(state, bucket)
model = DDP(torch.nn.Linear(64, 64))
if rank == 1:
    model.register_comm_hook(None, own_hook)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(10):
    if rank == 1:
        time.sleep(0.06)
    model(torch.randn(8, 64)).sum().backward()
    opt.step()
    opt.zero_grad()
    if step == 0 and rank == 0:
        model.register_comm_hook(None, own_hook)
print("rank %d own hook calls %d" % (rank, len(calls)), flush=True)
# torch 1.13 may abort at exit ("terminate called without an active exception") when a Python communication hook's
# process group is left to the interpreter's teardown, with or without dtrain: tear it down first.
del model, opt
dist.destroy_process_group()
"""

# Ranks 0 and 1 step until rank 2 fails the job; each writes its step count after every step. Rank 2, which only
# watches their counts, does not import torch.
SIGTERM = r"""
import os, sys, time
rank = int(os.environ["RANK"])
here = os.path.dirname(os.path.abspath(__file__))
def count(r):
    try:
        with open(os.path.join(here, "steps-%d" % r)) as f:
            return int(f.read())
    except (OSError, ValueError):
        return 0
if rank == 2:
    while count(0) < 150 or count(1) < 150:
        time.sleep(0.02)
    sys.exit(3)
import torch
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
if rank == 1:
    import dtrain_health
steps = 0
while True:
    if rank == 0:
        model(torch.randn(2, 4)).sum().backward()
        opt.step()
        time.sleep(0.002)
    else:
        with dtrain_health.step():
            time.sleep(0.002)
    steps += 1
    with open(os.path.join(here, "steps-%d.new" % rank), "w") as f:
        f.write(str(steps))
    os.replace(os.path.join(here, "steps-%d.new" % rank), os.path.join(here, "steps-%d" % rank))
"""

# Three steps each, then rank 0 blocks in its DataLoader and rank 1 in backward(); no process group. Rank 1 takes its
# first step once rank 0 is about to (the file rank-0-stepping): started side by side with other jobs, rank 0's
# start-up (its torch import) lagged rank 1's by more than hang_timeout_s, and the hang was caught before rank 0's
# first step.
PHASES = r"""
import os, time
import torch
rank = int(os.environ["RANK"])
stepping = os.path.join(os.path.dirname(os.path.abspath(__file__)), "rank-0-stepping")

def stuck_in_dataset():
    time.sleep(300)

class Items(torch.utils.data.Dataset):
    def __len__(self):
        return 100
    def __getitem__(self, i):
        if rank == 0 and i >= 3:
            stuck_in_dataset()
        return torch.randn(4)

def stuck_in_backward():
    time.sleep(300)

class Stuck(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.clone()
    @staticmethod
    def backward(ctx, grad):
        stuck_in_backward()
        return grad

model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
if rank == 0:
    open(stepping, "w").close()
while not os.path.exists(stepping):
    time.sleep(0.02)
for step, x in enumerate(torch.utils.data.DataLoader(Items(), batch_size=1)):
    out = model(x).sum()
    if rank == 1 and step == 3:
        out = Stuck.apply(out)
    out.backward()
    opt.step()
    opt.zero_grad()
"""

NO_TORCH = r"""
import sys, sitecustomize
print("no torch: %s, sitecustomize %s, sum %d" % ("torch" not in sys.modules,
      getattr(sitecustomize, "USER_SITECUSTOMIZE", False), sum(range(10))), flush=True)
"""

SPEC = """
name: %s
nodes: {provider: local, count: %d}
workers_per_node: 1
command: %s
env: {PYTHONPATH: %s}
stop: {grace_s: 1}
health: {startup_timeout_s: 120}
logs: {dir: runs, console: all}
"""


def ranks_of(run):
    return {r["rank"]: r for r in status_json(run).get("ranks", [])}


def launch(name, nodes, command, overrides=(), wait=True):
    """`dtrain launch` of a job whose workers run `command` (a function of the run's directory), with a user
    sitecustomize in the directory the spec puts on PYTHONPATH; with wait=False, started and not waited for."""
    run = Run([], timeout=240)
    user_path = os.path.join(run.dir, "user-modules")
    write(os.path.join(user_path, "sitecustomize.py"), USER_SITECUSTOMIZE)
    write(os.path.join(user_path, "ddp_job.py"), DDP)
    spec = write(os.path.join(run.dir, "job.yaml"), SPEC % (name, nodes, command(run.dir), user_path))
    run.args += ["launch", spec]
    for override in overrides:
        run.args += ["--set", override]
    run.user_path = user_path
    if not wait:
        return run.start()
    run.run()
    run.show()
    return run


def check_counted(run, what):
    check(run.code == 0, "%s: the job succeeds, got %s" % (what, run.code))
    check(len(re.findall(r"user sitecustomize ran in rank \d", run.out)) == 2,
          "%s: the user's sitecustomize ran in both ranks" % what)
    for rank, path in re.findall(r"rank (\d) sitecustomize \S+ user True path (\".*\")", run.out):
        parts = json.loads(path).split(":")
        check(len(parts) == 3 and parts[1].endswith("share/dtrain/python/bootstrap") and parts[2] == run.user_path,
              "%s: rank %s's PYTHONPATH is the helper's, the bootstrap's, then the user's: %s" % (what, rank, parts))
    check(len(re.findall(r"rank \d sitecustomize \S+ user True", run.out)) == 2,
          "%s: the program's sitecustomize is the user's in both ranks" % what)
    ranks = ranks_of(run)
    check(sorted(ranks) == [0, 1], "%s: status shows both ranks: %s" % (what, sorted(ranks)))
    for rank, row in sorted(ranks.items()):
        check(row["step"] == STEPS, "%s: rank %d is at step %d (one per optimizer step, ZeRO's inner step and the "
              "micro-batches not counted; the last arrives at exit), got %s" % (what, rank, STEPS, row["step"]))
        check(row["step_ms"] > 0, "%s: rank %d has a step time: %s" % (what, rank, row))
        check(row["data_wait_ratio"] > 0, "%s: rank %d's DataLoader waits are data wait: %s" % (what, rank, row))
        check(abs(row["tokens_per_s"] * row["step_ms"] / 1000 - 64) < 0.5,
              "%s: rank %d's tokens/s is 64 tokens per step: %s" % (what, rank, row))
        check(abs(row.get("samples_per_s", 0) * row["step_ms"] / 1000 - 16) < 0.2,
              "%s: rank %d's samples/s is 16 samples per step: %s" % (what, rank, row))
        own = re.search(r"rank %d trained \d+ steps, loss \S+, own last loss (\S+)" % rank, run.out)
        check(own is not None and row["loss"] is not None and abs(row["loss"] - float(own.group(1))) < 1e-5,
              "%s: rank %d's loss is the sum of the losses its last step's backward()s ran from: %s vs %s" %
              (what, rank, row["loss"], own and own.group(1)))


if sys.argv[1:] not in ([], ["--only", "reducer"]):
    sys.exit("usage: test_instrument_torch.py [--only reducer]")
ONLY_REDUCER = sys.argv[1:] == ["--only", "reducer"]


def reducer_case():
    """DDP's gradient reduction is exposed communication; the script's own hooks still run."""
    run = launch("instrument-reducer", 2,
                 lambda d: "[%s, %s]" % (PYTHON, write(os.path.join(d, "reducer.py"), REDUCER)))
    check(run.code == 0, "reducer: the job succeeds, got %s" % run.code)
    check("rank 0 own hook calls 9" in run.out and "rank 1 own hook calls 10" in run.out,
          "reducer: each rank's own hook ran once per bucket from its registration (rank 0: 9, rank 1: 10)")
    ranks = ranks_of(run)
    waited, fast = ranks.get(0, {}), ranks.get(1, {})
    check(waited.get("step") == 10 and waited.get("comm_exposed_ratio", 0) >= 0.5,
          "reducer: rank 0 waited over half its steps in DDP's reduction: %s" % waited)
    check(fast.get("comm_exposed_ratio", 1) < 0.2,
          "reducer: rank 1 (the slow one) waited little: %s" % fast)
    run.assert_no_leaks()


if ONLY_REDUCER:
    reducer_case()
    finish()


def ended(run):
    """Waits for the started `run` and checks at once that its launcher left no process behind."""
    run.wait()
    run.assert_no_leaks()
    return run


def job(name, nodes, command, overrides=(), leaks=True):
    """A lane's step: `launch` of the job, waited for (and its leftovers checked, unless not leaks)."""
    def step():
        run = launch(name, nodes, command, overrides, wait=False)
        return ended(run) if leaks else run.wait()
    return step


def lacking():
    """The stand-in torch armed directly, as rank 0 and as rank 1 (two processes side by side)."""
    bootstrap = os.path.join(SOURCE_DIR, "worker", "python", "bootstrap", "sitecustomize.py")
    procs = {rank: subprocess.Popen([PYTHON, "-c", LACKING, bootstrap], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    text=True, env=dict(os.environ, RANK=rank)) for rank in ("0", "1")}
    ran = {}
    for rank, proc in procs.items():
        try:
            out, err = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            err += "\n(killed after 120 s)"
        ran[rank] = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    return ran


def dtrain_run(flag):
    """`dtrain run -n 2` of the DDP script with the instrument flag `flag` (a list)."""
    def step():
        run = Run([], timeout=240)
        script = write(os.path.join(run.dir, "ddp_job.py"), DDP)
        run.args += ["run", "-n", "2", "--console", "all"] + flag + ["--", PYTHON, script]
        return ended(run.start())
    return step


def script(name, text):
    return lambda d: "[%s, %s]" % (PYTHON, write(os.path.join(d, name), text))


done = {}


def lane(*steps):
    """Runs the (key, step) pairs one after another in a thread of its own; each result goes to done[key]."""
    def run_steps():
        for key, step in steps:
            done[key] = step()
    thread = threading.Thread(target=run_steps)
    thread.start()
    return thread


lanes = [lane(("hang", job("instrument-hang", 2, script("hang.py", HANG), ["health.hang_timeout_s=3"])),
              ("run auto", dtrain_run([]))),
         lane(("phases", job("instrument-phases", 2, script("phases.py", PHASES), ["health.hang_timeout_s=3"])),
              ("run off", dtrain_run(["--instrument", "off"]))),
         lane(("auto", job("instrument-auto", 2, script("ddp_job.py", DDP))),
              ("module", job("instrument-module", 2, lambda d: "[%s, -m, ddp_job]" % PYTHON)),
              ("sigterm", job("instrument-sigterm", 3, script("sigterm.py", SIGTERM)))),
         lane(("off", job("instrument-off", 2, script("ddp_job.py", DDP), ["health.instrument=off"])),
              ("fault", job("instrument-fault", 2, script("fault_job.py", FAULT))),
              ("lacking", lacking),
              ("no torch", job("no-torch", 1, script("plain.py", NO_TORCH))),
              ("not python", job("not-python", 1, lambda d: "[/bin/sh, -c, 'echo \"path=$PYTHONPATH\"']",
                                 leaks=False)))]
for thread in lanes:
    thread.join()

# ---- auto: the script as a path, and as -m module
run = done["auto"]
run.show()
check_counted(run, "script")
run = done["module"]
run.show()
check_counted(run, "-m module")

# ---- off
run = done["off"]
run.show()
check(run.code == 0, "off: the job succeeds, got %s" % run.code)
losses = re.findall(r"rank \d trained %d steps, loss ([\d.]+)" % STEPS, run.out)
check(len(losses) == 2, "off: both ranks trained")
check(len(re.findall(r"rank \d sitecustomize \S+ user True", run.out)) == 2,
      "off: the user's sitecustomize still runs")
check("bootstrap" not in run.out, "off: no bootstrap on any PYTHONPATH")
ranks = ranks_of(run)
check(sorted(ranks) == [0, 1] and all(r["step"] == 0 for r in ranks.values()),
      "off: no steps seen: %s" % [(r["rank"], r["step"]) for r in ranks.values()])

# ---- fault: the same training result as with instrument off
run = done["fault"]
run.show()
check(run.code == 0, "fault: the job succeeds, got %s" % run.code)
said = re.findall(r"dtrain: the PyTorch instrumentation \(health.instrument: auto\) is off in this process after an "
                  r"error of its own: RuntimeError: planted fault", run.out + run.err)
check(len(said) == 2, "fault: said once per rank (%d times)" % len(said))
faulted = re.findall(r"rank \d trained %d steps, loss ([\d.]+)" % STEPS, run.out)
check(sorted(faulted) == sorted(losses) and len(losses) == 2,
      "fault: the same losses as with instrument off: %s vs %s" % (faulted, losses))

# ---- sigterm: the last step is sent when the launcher stops a rank
run = done["sigterm"]
run.show()
check(run.code == 3, "sigterm: rank 2's exit code is the job's, got %s" % run.code)
ranks = ranks_of(run)
for rank in (0, 1):
    with open(os.path.join(run.dir, "steps-%d" % rank)) as f:
        written = int(f.read())
    reported = ranks.get(rank, {}).get("step", -1)
    check(written <= reported <= written + 1,
          "sigterm: rank %d's last report (step %d) is its last step (%d written)" % (rank, reported, written))

# ---- hang: the collective a rank is blocked in
run = done["hang"]
run.show()
check(run.code == 124, "hang: the job fails with 124, got %s" % run.code)
row = ranks_of(run).get(1, {})
check(row.get("step") == 3 and row.get("phase") == "torch.distributed.all_reduce",
      "hang: rank 1's last report is at step 3 in torch.distributed.all_reduce: %s" % row)

# ---- lacking: a torch without some of the hooks
for rank, ran in sorted(done["lacking"].items()):
    said = [line for line in ran.stderr.splitlines() if "lacks what the PyTorch instrumentation hooks into" in line]
    check(ran.returncode == 0 and "armed True True" in ran.stdout,
          "lacking: rank %s is still armed for the rest: %s %s" % (rank, ran.stdout, ran.stderr[-2000:]))
    if rank == "0":
        check(len(said) == 1 and "torch 0.0-stand-in" in said[0] and "data wait, tokens/s and samples/s" in said[0]
              and "DDP's gradient reduction" in said[0] and "steps" not in said[0].split("not measured:")[1],
              "lacking: one line on rank 0 names what is not measured: %s" % said)
    else:
        check(not said, "lacking: nothing said on rank 1: %s" % said)

# ---- phases: where a hung rank stopped, and its Python frames
run = done["phases"]
run.show()
check(run.code == 124, "phases: the job fails with 124, got %s" % run.code)
ranks = ranks_of(run)
check(ranks.get(0, {}).get("phase") == "data" and ranks.get(0, {}).get("step") == 3,
      "phases: rank 0's last report is at step 3 in data: %s" % ranks.get(0))
check(ranks.get(1, {}).get("phase") == "backward" and ranks.get(1, {}).get("step") == 3,
      "phases: rank 1's last report is at step 3 in backward: %s" % ranks.get(1))
check(re.search(r"File \"\S+phases\.py\", line \d+ in stuck_in_(dataset|backward)", run.err) is not None,
      "phases: the summary shows the hung rank's Python frames: %s" % run.err[-3000:])

# ---- a Python program without torch; a program that is not Python
run = done["no torch"]
run.show()
check(run.code == 0 and "no torch: True, sitecustomize True, sum 45" in run.out,
      "a program without torch runs as it would without dtrain: %s" % run.code)
check("user sitecustomize ran in rank 0" in run.out, "its user sitecustomize ran")
check("dtrain: the PyTorch instrumentation" not in run.err, "nothing said about the instrumentation")
run = done["not python"]
run.show()
path = re.search(r"path=(\S*)", run.out)
check(run.code == 0 and path is not None and "bootstrap" not in path.group(1) and run.user_path in path.group(1),
      "a program that is not Python gets no bootstrap on its PYTHONPATH: %s" % (path and path.group(1)))

# ---- dtrain run --instrument
for key, flag, expected in (("run auto", [], STEPS), ("run off", ["--instrument", "off"], 0)):
    run = done[key]
    run.show()
    steps = sorted((r["rank"], r["step"]) for r in ranks_of(run).values())
    check(run.code == 0 and steps == [(0, expected), (1, expected)],
          "dtrain run %s: each rank at step %d: %s" % (" ".join(flag) or "(auto)", expected, steps))
run = Run(["run", "-n", "1", "--instrument", "sometimes", "--", PYTHON, "-c", "pass"]).run()
check(run.code == 2 and "--instrument must be auto or off (got 'sometimes')" in run.err,
      "dtrain run --instrument sometimes is refused: %s %s" % (run.code, run.err))

finish()
