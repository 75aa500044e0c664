"""The PyTorch bootstrap keeps no loss graph alive: an unmodified script (real agents, Debian's torch 1.13, one rank)
runs 3 optimizer steps whose loss comes from a graph that holds 64 MiB (exp of a 16 Mi-element parameter: autograd
saves its output), each with loss.backward(retain_graph=True), so every loss keeps its graph for as long as something
holds the loss. After `del loss` and gc the script reads its RSS, and its peak (VmHWM), against its RSS before the
steps: with the instrumentation (auto, the C wrappers armed) both must be what they are with `dtrain run --instrument
off`, within 32 MiB (half of one graph): a bootstrap that held the last losses themselves (the state's, the last
step's and the one before, the reporter's) kept two graphs, 128 MiB, after `del loss`, and its peak was as much
higher. The auto run also shows its 3 steps in `dtrain status` (the instrumentation was on)."""

import os
import re

from harness import PYTHON, Run, check, finish, status_json, write

SCRIPT = r"""
import gc, os
import torch
torch.set_num_threads(1)
MIB = 1 << 20


def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))


weight = torch.zeros(16 * MIB, requires_grad=True)   # 64 MiB; exp's output, as large, is what the graph saves
opt = torch.optim.SGD([weight], lr=1e-9)
base = rss()
for step in range(3):
    loss = weight.exp().mean()
    loss.backward(retain_graph=True)
    opt.step()
    opt.zero_grad()
del loss
gc.collect()
print("kept %.1f MiB, peak %.1f MiB over the start of the steps; wrappers: %s" % (
    (rss() - base) / MIB, (peak() - base) / MIB, type(torch.Tensor.backward).__name__), flush=True)
"""

BOUND_MIB = 32

measured = {}
for instrument in ("auto", "off"):
    run = Run([], timeout=120)
    script = write(os.path.join(run.dir, "retain_graph.py"), SCRIPT)
    run.args += ["run", "-n", "1", "--instrument", instrument, "--", PYTHON, script]
    run.run()
    run.show()
    found = re.search(r"kept (-?[\d.]+) MiB, peak ([\d.]+) MiB over the start of the steps; wrappers: (\w+)", run.out)
    if not check(run.code == 0 and found, "%s: the script ran (exit %s)" % (instrument, run.code)):
        continue
    measured[instrument] = (float(found.group(1)), float(found.group(2)))
    steps = [r.get("step") for r in status_json(run).get("ranks", [])]
    if instrument == "auto":
        check(found.group(3) == "Hook" and steps == [3],
              "auto: the C wrappers armed and counted the 3 steps: %s, %s" % (found.group(3), steps))
    run.assert_no_leaks()

if len(measured) == 2:
    (kept_on, peak_on), (kept_off, peak_off) = measured["auto"], measured["off"]
    print("after del loss: %.1f MiB instrumented, %.1f off; peak: %.1f and %.1f" % (kept_on, kept_off, peak_on,
                                                                                    peak_off), flush=True)
    check(kept_on - kept_off < BOUND_MIB, "no loss graph kept after `del loss`: %.1f MiB instrumented against %.1f off"
          % (kept_on, kept_off))
    check(peak_on - peak_off < BOUND_MIB, "no loss graph kept across steps: a peak of %.1f MiB instrumented against "
          "%.1f off" % (peak_on, peak_off))
finish()
