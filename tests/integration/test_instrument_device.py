"""The PyTorch bootstrap's device paths, with a stand-in for torch.cuda: this machine has no GPU and Debian's torch
no CUDA, so what runs here is the bookkeeping around CUDA events (which events are read, when, and what they add to
a step), not CUDA itself. A real /usr/bin/python3 with Debian's torch patches torch.version.cuda and torch.cuda
(Event, memory, device queries; synchronize() and an event's synchronize() are recorded, never expected), marks
tensors as on the device with a Tensor subclass whose is_cuda, is_cpu, device and get_device() say so, arms the
bootstrap directly (as it would arm at `import torch`), and runs 6 optimizer steps of a Linear on a 1-rank gloo
group, each with one blocking all_reduce of a device tensor. The stand-in's clock moves 5 ms at each record(), so
each collective's event pair spans 5 ms; its events pass only when the script says so. After each step the script
builds dtrain_health's report as its sender would and keeps it. Run with the C wrappers (the build's bootstrap
directory) and the Python ones (the source tree's), neither on PYTHONPATH (site would arm it before the stand-in):
  events    steps 1-3 run with no event passed: their reports carry no communication (nothing is waited for); at
            step 4 all have passed: its report carries the 4 collectives' 20 ms, and steps 5 and 6 5 ms each;
  loss      with DTRAIN_HEALTH_LOSS_EVERY=2, the loss is captured at steps 1, 3 and 5 only, and read only once its
            event passed: no loss is reported before step 4, and step 5's after it;
  memory    every report carries the stand-in's memory_reserved, max_memory_allocated and total memory;
  no sync   nothing called synchronize(), and the instrumentation never turned itself off."""

import json
import os
import subprocess
import tempfile

from harness import BOOTSTRAP_DIRS, HELPER_DIR, PYTHON, WRAPPER_TYPE, check, finish, health_env

SCRIPT = r"""
import importlib.util, json, sys, types
import torch
import torch.distributed as dist

class Clock:
    ms = 0.0          # the device's time, moved 5 ms at each record()
    passed = False    # whether every recorded event has passed
    syncs = 0         # synchronize() calls: none expected

class Event:
    def __init__(self, enable_timing=False, **kwargs):
        self.at = None
    def record(self, stream=None):
        Clock.ms += 5.0
        self.at = Clock.ms
    def query(self):
        return Clock.passed
    def elapsed_time(self, end):
        assert Clock.passed, "elapsed_time() of an event that has not passed"
        return end.at - self.at
    def synchronize(self):
        Clock.syncs += 1

def synchronize(device=None):
    Clock.syncs += 1

RESERVED, PEAK, TOTAL = 3 << 30, 2 << 30, 80 << 30
fake = types.SimpleNamespace(Event=Event, synchronize=synchronize, _initialized=True, is_initialized=lambda: True,
                             current_device=lambda: 0, memory_reserved=lambda index=None: RESERVED,
                             max_memory_allocated=lambda index=None: PEAK,
                             get_device_properties=lambda index: types.SimpleNamespace(total_memory=TOTAL))
torch.version.cuda = "12.1"
torch.cuda = fake

class OnDevice(torch.Tensor):
    # A CPU tensor that says it is on device 0; what torch computes from it stays one (__torch_function__).
    @property
    def is_cuda(self):
        return True
    @property
    def is_cpu(self):
        return False
    @property
    def device(self):
        return types.SimpleNamespace(type="cuda", index=0)
    def get_device(self):
        return 0

# The bootstrap's directory is not on PYTHONPATH (site would arm it at `import torch`, before the stand-in): armed
# here, where its _dtrain_hooks can be imported.
sys.path.insert(0, sys.argv[2])
spec = importlib.util.spec_from_file_location("bootstrap", sys.argv[2] + "/sitecustomize.py")
bootstrap = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bootstrap)
bootstrap._arm(torch)
import dtrain_health

dist.init_process_group("gloo", init_method="file://" + sys.argv[1], rank=0, world_size=1)
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
x = torch.ones(4, 8).as_subclass(OnDevice)
reports, losses = [], []
for step in range(1, 7):
    Clock.passed = step >= 4
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    dist.all_reduce(torch.ones(1).as_subclass(OnDevice))
    opt.step()
    losses.append(float(loss.detach().as_subclass(torch.Tensor)))
    reports.append(json.loads(dtrain_health._reporter.message()))
print(json.dumps({"wrappers": type(torch.Tensor.backward).__name__, "reports": reports, "losses": losses,
                  "syncs": Clock.syncs, "on": bootstrap._state.on, "cuda_seen": bootstrap._state.cuda is fake}))
dist.destroy_process_group()
"""

work = tempfile.mkdtemp(prefix="dtrain-it-device-")
for kind, bootstrap in BOOTSTRAP_DIRS.items():
    env = health_env(os.path.join(work, kind + ".sock"), [HELPER_DIR], DTRAIN_HEALTH_LOSS_EVERY="2",
                     DTRAIN_HEALTH_INTERVAL_MS="60000")
    done = subprocess.run([PYTHON, "-c", SCRIPT, os.path.join(work, kind + ".store"), bootstrap], env=env,
                          capture_output=True, text=True, timeout=120)
    print("--- %s: exit %d\n%s%s" % (kind, done.returncode, done.stdout[-4000:], done.stderr[-3000:]), flush=True)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if not check(done.returncode == 0 and lines, "%s: the script ran" % kind):
        continue
    result = json.loads(lines[-1])
    reports, losses = result["reports"], result["losses"]

    def expect(condition, message):
        return check(condition, "%s wrappers, %s" % (kind, message))

    expect(result["wrappers"] == WRAPPER_TYPE[kind], "armed: torch.Tensor.backward is a %s" % result["wrappers"])
    expect(result["cuda_seen"] and result["on"] and "dtrain:" not in done.stderr,
           "the stand-in torch.cuda was taken and the instrumentation stayed on: %s" % done.stderr[-2000:])
    expect(result["syncs"] == 0, "nothing called synchronize(): %d calls" % result["syncs"])
    expect(len(reports) == 6 and [r.get("step") for r in reports] == [1, 2, 3, 4, 5, 6],
           "a report after each of the 6 steps: %s" % [r.get("step") for r in reports])
    if len(reports) != 6:
        continue
    comm = [round(r.get("comm_exposed_ms", -1), 3) for r in reports]
    expect(comm[:3] == [0.0, 0.0, 0.0], "events: no communication before any event passed: %s" % comm)
    expect(comm[3] == 20.0 and comm[4:] == [5.0, 5.0],
           "events: step 4 carries the 4 collectives' 20 ms once they passed, steps 5 and 6 5 ms each: %s" % comm)
    reported = [r.get("loss") for r in reports]
    expect(reported[:3] == [None, None, None], "loss: none read before its event passed: %s" % reported)
    # Captured at steps 1, 3, 5 (every 2): step 4's report reads step 3's (step 1's was replaced, unread), step 5's
    # its own, and step 6 captures none, so it reports step 5's.
    want = [None, None, None, losses[2], losses[4], losses[4]]
    expect(all(a is None and b is None or a is not None and b is not None and abs(a - b) < 1e-6
               for a, b in zip(reported, want)),
           "loss: the losses of steps 3, 5, 5 at steps 4-6 (captured every 2 steps, read once passed): %s vs %s"
           % (reported, want))
    memory = [(r.get("device_mem_used_bytes"), r.get("device_mem_peak_bytes"), r.get("device_mem_total_bytes"))
              for r in reports]
    expect(all(m == (3 << 30, 2 << 30, 80 << 30) for m in memory), "memory: every report carries it: %s" % memory)
finish()
