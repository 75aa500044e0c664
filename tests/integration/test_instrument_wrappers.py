"""The PyTorch bootstrap's two sets of wrappers, the C ones (_dtrain_hooks, from the build's bootstrap directory) and
the Python ones (the source tree's, sitecustomize.py alone), count the same things from the same script. A real
/usr/bin/python3 with Debian's torch runs it once with each, a datagram socket standing in for the agent's; the
script reads the instrumentation's running totals through dtrain_health and prints them:
  batches   a DataLoader whose collate_fn hands out, in turn, a tensor of token ids, a tuple and a list that begin
            with one, a dict with input_ids, a dict without (its first value), a dict subclass, a float tensor (samples,
            no tokens), a 3-D integer tensor (samples, no tokens), an empty tuple and a string (neither): the samples
            and tokens each adds;
  steps     optimizer steps, an exception raised inside a step (it reaches the script unchanged and the step is not
            counted), and a step inside a step (counted once);
  async     all_reduce(async_op=True), by keyword and by position, is not a wait; a blocking one is, and restores the
            phase it found;
  phases    the phase after next(), after backward() and after a step;
  loss      the last backward()'s loss is held detached: its value, not its autograd graph;
  bound     the wrapped step is a bound method with __self__ and __func__ (torch's LR schedulers wrap it so), and a
            StepLR over the optimizer runs.
Both must print the expected totals, and the same ones; neither may say it turned itself off."""

import json
import os
import socket
import subprocess
import tempfile

from harness import BOOTSTRAP_DIRS, HELPER_DIR, PYTHON, WRAPPER_TYPE, check, finish, health_env

SCRIPT = r"""
import gc, json, sys
import torch
import torch.distributed as dist
import dtrain_health

dist.init_process_group("gloo", init_method="file://" + sys.argv[1], rank=0, world_size=1)
wrappers = type(torch.Tensor.backward).__name__

class Batch(dict):
    pass

ids = torch.zeros(4, 8, dtype=torch.int64)
batches = [ids, (ids, 1), [ids, 2], {"mask": ids[:2], "input_ids": ids}, {"x": ids[:3]}, Batch(input_ids=ids[:1]),
           torch.zeros(5, 8), torch.zeros(6, 2, 2, dtype=torch.int32), (), "text"]
loader = torch.utils.data.DataLoader(range(len(batches)), batch_size=1, collate_fn=lambda items: batches[items[0]])
# The bootstrap's running totals, whichever wrappers armed.
auto, = [o for o in gc.get_objects() if type(o).__name__ == "_Instrumentation"]
seen = []
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
sched = torch.optim.lr_scheduler.StepLR(opt, 2)   # (wraps opt.step through its __self__ and __func__)
for batch in loader:
    seen.append(auto.phase)
loss = model(torch.ones(2, 8)).sum()
loss.backward()
opt.step()
sched.step()
counts = {"tokens": auto.tokens, "samples": auto.samples, "steps": auto.done[0], "after_step": auto.phase}

class Boom(Exception):
    pass

class Failing(torch.optim.SGD):
    def step(self, closure=None):
        raise Boom("the optimizer's own error")

failing = Failing(model.parameters(), lr=0.1)
try:
    failing.step()
    counts["boom"] = "not raised"
except Boom as error:
    counts["boom"] = str(error)
counts["steps_after_boom"] = auto.done[0]

class Outer(torch.optim.SGD):
    def step(self, closure=None):
        return opt.step()

Outer(model.parameters(), lr=0.1).step()
counts["steps_after_nested"] = auto.done[0]

one = torch.ones(1)
wait = auto.comm_wait
work = dist.all_reduce(one, async_op=True)
work.wait()
work = dist.all_reduce(one, dist.ReduceOp.SUM, None, True)
work.wait()
counts["async_wait"] = auto.comm_wait - wait
auto.phase = "mine"
dist.all_reduce(one)
counts["blocking_wait"] = auto.comm_wait - wait > 0
counts["phase_after_collective"] = auto.phase

loss = model(torch.ones(2, 8)).sum()
loss.backward()
counts["after_backward"] = auto.phase
counts["loss_is_last"] = auto.loss is not loss and auto.loss.grad_fn is None and auto.loss.item() == loss.item()
fresh = torch.optim.SGD(model.parameters(), lr=0.1)
bound = fresh.step
counts["bound"] = [getattr(bound, "__self__", None) is fresh, hasattr(bound, "__func__")]
counts["on"] = auto.on
counts["phases_after_next"] = seen
print(json.dumps({"wrappers": wrappers, "counts": counts}), flush=True)
dist.destroy_process_group()
"""

# ids 4 x 8 = 32 tokens and 4 samples, in the tensor, the tuple, the list and the dict with input_ids; the dict
# without: 3 x 8; the dict subclass (its get): 1 x 8; the float tensor: 5 samples; the 3-D tensor: 6 samples.
EXPECTED = {"tokens": 4 * 32 + 24 + 8, "samples": 4 * 4 + 3 + 1 + 5 + 6, "steps": 1, "after_step": "forward",
            "boom": "the optimizer's own error", "steps_after_boom": 1, "steps_after_nested": 2, "async_wait": 0.0,
            "blocking_wait": True, "phase_after_collective": "mine", "after_backward": "backward",
            "loss_is_last": True, "bound": [True, True], "on": True, "phases_after_next": ["forward"] * 10}

work = tempfile.mkdtemp(prefix="dtrain-it-wrappers-")
results = {}
for kind, bootstrap in BOOTSTRAP_DIRS.items():
    sink = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sink.bind(os.path.join(work, kind + ".sock"))
    env = health_env(os.path.join(work, kind + ".sock"), [bootstrap, HELPER_DIR])
    done = subprocess.run([PYTHON, "-c", SCRIPT, os.path.join(work, kind + ".store")], env=env, capture_output=True,
                          text=True, timeout=120)
    sink.close()
    print("--- %s: exit %d\n%s%s" % (kind, done.returncode, done.stdout, done.stderr[-3000:]), flush=True)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if not check(done.returncode == 0 and lines, "%s: the script ran" % kind):
        continue
    result = json.loads(lines[-1])
    check(result["wrappers"] == WRAPPER_TYPE[kind], "the %s wrappers armed: torch.Tensor.backward is a %s" % (
        kind, result["wrappers"]))
    check("dtrain:" not in done.stderr, "%s: the instrumentation did not turn itself off: %s" % (kind, done.stderr))
    results[kind] = result["counts"]
    for name, value in EXPECTED.items():
        check(results[kind].get(name) == value, "%s wrappers, %s: %r, expected %r" % (
            kind, name, results[kind].get(name), value))
if len(results) == 2:
    check(results["C"] == results["Python"], "the C and the Python wrappers count the same: %s vs %s" % (
        results["C"], results["Python"]))
finish()
