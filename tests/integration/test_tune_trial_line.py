"""A tune trial's worker side (cli/tune/trial.h: DTRAIN_TUNE_TRIAL and the one "dtrain-trial: {json}" line each rank
writes on stderr) in the PyTorch bootstrap (worker/python/bootstrap/_dtrain_tune.py), on an unmodified DDP script
(real launcher, real agents, Debian's torch 1.13 over gloo, 2 ranks, DTRAIN_TUNE_TRIAL={"warmup":3,"steps":5,
"losses":4} in the launcher's environment, which its workers inherit). The script trains over a DataLoader (batch 4,
200 items, a DistributedSampler) and prints each step's loss before its optimizer step:
  complete  it would make 20 steps: each rank's log holds exactly one trial line, written right after step 8 (the
            script's print after its loop never comes: the rank exited 0 there), with steps 8, complete true, 5
            step_s, the first 4 losses the script printed, samples 5 x 4, the DataLoader's num_workers and DDP's
            default bucket_cap_mb (25); the job exits 0 and leaves nothing running;
  returned  it makes 2 steps and returns: complete false, steps 2, no measured step, its 2 losses; the job exits 0;
  raised    it raises after 2 steps: the same line, and the job fails as it would have;
  overlay   with `--tune` setting the DataLoader's num_workers to 1: the trial runs with the overlay, whose effective
            num_workers (1, not the script's 0) the line reports;
  python    the bootstrap's Python wrappers (the source tree's directory, no _dtrain_hooks) under the same trial, one
            process with a datagram socket standing in for the agent's: the same numbers."""

import json
import os
import socket
import subprocess
import tempfile
import time

from harness import BOOTSTRAP_DIRS, HELPER_DIR, PYTHON, Run, check, finish, health_env, write

TRIAL = '{"warmup":3,"steps":5,"losses":4}'
PREFIX = "dtrain-trial: "

WORKER = r"""
import sys
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

steps, end = int(sys.argv[1]), sys.argv[2]
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
data = torch.utils.data.TensorDataset(torch.randn(200, 4), torch.randn(200, 1))
sampler = torch.utils.data.distributed.DistributedSampler(data, shuffle=False)
loader = torch.utils.data.DataLoader(data, batch_size=4, sampler=sampler, num_workers=0)
model = DDP(torch.nn.Linear(4, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
step = 0
while step < steps:
    for x, y in loader:
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        step += 1
        print("loss %d %r" % (step, loss.item()), flush=True)
        opt.step()
        if step == steps:
            break
print("the loop ended", flush=True)
if end == "raise":
    raise RuntimeError("the script's own error")
del model, opt
dist.destroy_process_group()
"""


def trial_lines(text):
    return [json.loads(line[len(PREFIX):]) for line in text.splitlines() if line.startswith(PREFIX)]


def printed_losses(text):
    return [float(line.split()[2]) for line in text.splitlines() if line.startswith("loss ")]


def close(a, b):
    return a is not None and abs(a - b) <= 1e-6 * max(abs(a), abs(b), 1e-12)


def expect_line(case, rank, text, steps, complete, measured, losses):
    """The one trial line of a rank's output `text`, checked against what the script printed; returns it."""
    lines = trial_lines(text)
    if not check(len(lines) == 1, "%s: rank %d wrote exactly one trial line: %s" % (case, rank, lines)):
        return None
    line = lines[0]
    check(line["rank"] == rank and line["steps"] == steps and line["complete"] is complete,
          "%s: rank %d: rank, steps %d, complete %s: %s" % (case, rank, steps, complete, line))
    check(len(line["step_s"]) == measured and all(s > 0 for s in line["step_s"]),
          "%s: rank %d: %d measured step times: %s" % (case, rank, measured, line["step_s"]))
    printed = printed_losses(text)
    check(len(line["losses"]) == losses and all(close(a, b) for a, b in zip(line["losses"], printed)),
          "%s: rank %d: the first %d losses are the script's %s: %s" % (case, rank, losses, printed, line["losses"]))
    check(line["samples"] == (measured * 4 or None) and line["tokens"] is None,
          "%s: rank %d: samples %s, no tokens: %s" % (case, rank, measured * 4 or None, line))
    check(line["device"] == "cpu" and line["device_peak_bytes"] == 0 and line["rss_bytes"] > 0 and
          line["cpus"] >= 1 and line["threads"] >= 1 and line["trainer"] is None and
          line["data_wait_s"] >= 0 and line["comm_s"] >= 0, "%s: rank %d: the process's numbers: %s" %
          (case, rank, line))
    check(line["ddp"] == {"bucket_cap_mb": 25, "gradient_as_bucket_view": False},
          "%s: rank %d: DDP's defaults: %s" % (case, rank, line["ddp"]))
    return line


def run_trial(case, steps, end, extra=(), code=0):
    """A 2-rank `dtrain run` of WORKER under the trial; each rank's log, by rank."""
    run = Run([], timeout=60, env={"DTRAIN_PYTHON": PYTHON, "DTRAIN_TUNE_TRIAL": TRIAL})
    script = write(run.dir + "/worker.py", WORKER)
    write(run.dir + "/tune.yaml", "tune:\n  dataloader: {num_workers: 1}\n")
    run.args += ["run", "--standalone", "--nproc_per_node=2", "--console", "none"] + list(extra) + \
        [script, str(steps), end]
    began = time.monotonic()
    run.run()
    print("--- %s: exit %s in %.1f s\n%s" % (case, run.code, time.monotonic() - began, run.err[-2000:]), flush=True)
    check(run.code == code if code == 0 else run.code != 0, "%s: the job exits %s, got %s" % (
        case, "0" if code == 0 else "non-zero", run.code))
    run.assert_no_leaks()
    jobs = run.job_dirs()
    logs = {}
    for rank in (0, 1):
        path = os.path.join(jobs[-1], "attempt_0", "rank_%d.log" % rank) if jobs else ""
        if check(os.path.isfile(path), "%s: rank %d's log %s" % (case, rank, path)):
            with open(path, errors="replace") as f:
                logs[rank] = f.read()
    return logs


for rank, text in sorted(run_trial("complete", 20, "return").items()):
    line = expect_line("complete", rank, text, steps=8, complete=True, measured=5, losses=4)
    check(line is None or line["loader"] == {"num_workers": 0, "pin_memory": False, "prefetch_factor": None,
                                             "persistent_workers": False},
          "complete: rank %d: the script's DataLoader: %s" % (rank, line and line["loader"]))
    check(len(printed_losses(text)) == 8 and "the loop ended" not in text,
          "complete: rank %d stopped right after step 8:\n%s" % (rank, text[-1500:]))

for case, end in (("returned", "return"), ("raised", "raise")):
    for rank, text in sorted(run_trial(case, 2, end, code=0 if end == "return" else 1).items()):
        expect_line(case, rank, text, steps=2, complete=False, measured=0, losses=2)
        check("the loop ended" in text, "%s: rank %d ran to its end" % (case, rank))
        check(end == "return" or "the script's own error" in text, "raised: rank %d's traceback is kept" % rank)

for rank, text in sorted(run_trial("overlay", 20, "return", extra=["--tune", "tune.yaml"]).items()):
    line = expect_line("overlay", rank, text, steps=8, complete=True, measured=5, losses=4)
    check(line is None or (line["loader"]["num_workers"] == 1 and line["loader"]["prefetch_factor"] == 2),
          "overlay: rank %d: the overlay's effective DataLoader arguments: %s" % (rank, line and line["loader"]))

# The Python wrappers, one rank of its own (WORLD_SIZE 1), without an agent.
work = tempfile.mkdtemp(prefix="dtrain-it-trial-")
sink = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
sink.bind(os.path.join(work, "health.sock"))
probe = socket.socket()
probe.bind(("127.0.0.1", 0))
port = probe.getsockname()[1]
probe.close()
env = health_env(os.path.join(work, "health.sock"), [BOOTSTRAP_DIRS["Python"], HELPER_DIR], WORLD_SIZE="1",
                 MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), DTRAIN_TUNE_TRIAL=TRIAL)
done = subprocess.run([PYTHON, write(work + "/worker.py", WORKER), "20", "return"], env=env, capture_output=True,
                      text=True, timeout=60)
sink.close()
print("--- python: exit %d\n%s" % (done.returncode, done.stderr[-2000:]), flush=True)
check(done.returncode == 0, "python: the worker exits 0, got %d" % done.returncode)
expect_line("python", 0, done.stdout + done.stderr, steps=8, complete=True, measured=5, losses=4)
check("the loop ended" not in done.stdout, "python: the worker stopped right after step 8")
finish()
