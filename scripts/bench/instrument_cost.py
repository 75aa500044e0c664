"""What health.instrument: auto (the PyTorch bootstrap, worker/python/bootstrap/sitecustomize.py) costs a PyTorch
script: per wrapped call, and in steps/s of the quickstart model. Every part interleaves the two cases, so the noise
of this shared machine hits both alike, and reports medians.

1. Per call. Each case is a fresh /usr/bin/python3 (Debian's torch, 1 intra-op thread, a 1-rank gloo group, bound
   to one CPU, --cpu, the same for both cases: gloo hands each collective to a thread of its own, and unbound, where
   the kernel woke that thread changed all_reduce by up to 100 us per call from one interpreter to the next on this
   2-CPU machine). It times bursts on request: a burst is --calls calls of one kind in a plain Python loop, after
   --calls/10 warm-up calls, timed with time.perf_counter:
       step        opt.step() of torch.optim.SGD over one 1-element parameter with a gradient (no backward() ran,
                   so the step's report carries no loss)
       backward    (w * 2.0).sum().backward() on a 1-element leaf: the graph's building is in both cases alike
       next        next() of a DataLoader iterator (num_workers=0, batch_size=4) over an in-memory dataset of int64
                   rows of 8 token ids, so each batch is a 4 x 8 integer tensor the bootstrap counts as tokens
       all_reduce  dist.all_reduce (blocking) of a 1-element tensor on the 1-rank gloo group
       loop        one training step of all of them: next(), a Linear(8, 1) forward and loss, zero_grad(),
                   backward(), all_reduce() of a 1-element tensor, step() (whose report reads the loss)
   three cases, each a fresh interpreter:
   c        PYTHONPATH=<the build's share/dtrain/python/bootstrap, beside --dtrain>:worker/python,
            DTRAIN_HEALTH_SOCKET naming a datagram socket this script binds and drains, RANK=0, tokens,
            DTRAIN_HEALTH_INTERVAL_MS=100 (the shortest dtrain gives, so the reporter's thread sends most often): what a
            worker under `health.instrument: auto` gets, with the bootstrap's C wrappers (_dtrain_hooks, which the
            build puts there)
   python   the same with the source tree's worker/python/bootstrap, which holds sitecustomize.py alone: the
            bootstrap's Python wrappers, what an interpreter other than the one dtrain was built for gets
   unarmed  the same without a bootstrap directory on PYTHONPATH: what `health.instrument: off` gives
   --repeats sets of three interpreters; each set runs --bursts rounds of every kind, the three bursts of a kind back
   to back (which goes first rotates), so a burst of load from elsewhere on the machine lands on all or is an
   outlier the median drops. The loop, whose cost is the one that matters, runs --loop-pairs shorter bursts
   (--loop-calls steps) of each case in each round. Cost = the median over all bursts of (armed - unarmed) / calls,
   with its quartiles, in wall time and in CPU time of the whole interpreter (all its threads: gloo's and the
   reporter's; time.process_time, which other jobs taking turns on the CPU move less), and per wrapped call (the
   loop makes four); target: at most 2 us per wrapped call. An armed interpreter that armed the other wrappers (or
   none), that sent no report of a counted step, an unarmed one that sent any, or one whose stderr says the
   instrumentation turned itself off, stops the benchmark.

2. Steps/s of configs/ddp_toy.py (2-rank gloo DDP, AdamW), run unchanged under the real launcher:
       dtrain run -n 2 --instrument auto|off -- /usr/bin/python3 configs/ddp_toy.py --steps STEPS
   (its workers get the bootstrap and dtrain_health.py the build installed, build/share/dtrain/python: rebuild
   dtrain after changing worker/python),
   in --pairs pairs of runs, the order alternating (off, auto), (auto, off), ... Rank 0 prints a line at every 10th step
   and the last; this script stamps each line with time.perf_counter when it reads it from the launcher's output and
   takes three rates, all over the training loop alone (start-up: torch import, rendezvous, DDP's set-up, and
   teardown are outside them):
       span     steps per second: (last step - first step >= --warmup) / (time of the last line - time of that line)
       windows  steps per second: the median of the rates over consecutive --window-step spans of the same, which a
                burst of load from elsewhere on this shared machine moves less
       cpu      steps per CPU-second: the steps between the first and the last window mark over the user + system
                CPU time (/proc/PID/stat, all threads) both ranks used between them. What the instrumentation adds
                is CPU work, and CPU time is moved much less than wall time by other jobs taking turns on the CPUs:
                on this 2-CPU machine under load, steps/s varied by +-15% from run to run
   Any delay between a line's write and its read is paid by both ends of a span alike. Each auto run must end with
   both ranks reporting STEPS steps to dtrain status, each off run with none. Reports the medians of each case and
   the median of the per-pair ratios auto/off (target: at least 0.98).

3. The same loop with the instrumentation switched inside one run: a copy of configs/ddp_toy.py's model and loop
   under `dtrain run -n 2 --instrument auto` sets the bootstrap's switch (dtrain_health's reporter holds it after
   the first counted step) off and on in --block-pairs pairs of alternating --block-step blocks, both ranks at the
   same steps, and rank 0 times each block (wall, and its CPU time). Each pair's two blocks lie next to each other
   in time, so the machine's load changes little between them; off, each wrapper still tests its flag and calls
   through (about 0.1 us a call), so this measures the instrumentation's work, not the wrappers' calls. Reports the
   median and quartiles of the pairs' off/on ratio (steps/s on over off; target: at least 0.98).

    /usr/bin/python3 scripts/bench/instrument_cost.py --dtrain build/bin/dtrain [--calls 1000] [--bursts 20]
        [--loop-calls 200] [--loop-pairs 5] [--repeats 3] [--cpu N] [--pairs 5] [--steps 2000] [--warmup 100]
        [--window 100] [--block 50] [--block-pairs 200] [--only calls|steps|blocks]
or  scripts/bench/instrument_cost.sh [same options but --dtrain]
"""

import argparse
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
HELPER_DIR = os.path.join(ROOT, "worker", "python")
BOOTSTRAP_DIR = os.path.join(HELPER_DIR, "bootstrap")
TOY = os.path.join(ROOT, "configs", "ddp_toy.py")
PYTHON = "/usr/bin/python3"

KINDS = ("step", "backward", "next", "all_reduce", "loop")
# The bootstrap's wrapped calls in one call of each kind: the target, 2 us, is per wrapped call.
WRAPPED = {"step": 1, "backward": 1, "next": 1, "all_reduce": 1, "loop": 4}

CALLS = r"""
import json, os, sys, time
store, cpu = sys.argv[1], int(sys.argv[2])
os.sched_setaffinity(0, {cpu})   # before torch starts a thread: they all inherit it
import torch
import torch.distributed as dist
torch.set_num_threads(1)
dist.init_process_group("gloo", init_method="file://" + store, rank=0, world_size=1)

class Rows(torch.utils.data.Dataset):
    def __init__(self, n):
        self.n, self.row = n, torch.arange(8)
    def __len__(self):
        return self.n
    def __getitem__(self, i):
        return self.row

param = torch.zeros(1, requires_grad=True)
param.grad = torch.zeros(1)
sgd = torch.optim.SGD([param], lr=0.1)
leaf = torch.ones(1, requires_grad=True)
one = torch.ones(1)
model = torch.nn.Linear(8, 1)
loop_opt = torch.optim.SGD(model.parameters(), lr=1e-3)

def run_step(it):
    sgd.step()

def run_backward(it):
    (leaf * 2.0).sum().backward()

def run_next(it):
    next(it)

def run_all_reduce(it):
    dist.all_reduce(one)

def run_loop(it):
    batch = next(it)
    loss = model(batch.float()).pow(2).mean()
    loop_opt.zero_grad()
    loss.backward()
    dist.all_reduce(one)
    loop_opt.step()

kinds = {"step": run_step, "backward": run_backward, "next": run_next, "all_reduce": run_all_reduce,
         "loop": run_loop}
clock, cpu_clock = time.perf_counter, time.process_time
# Which wrappers armed: the C ones (_dtrain_hooks.Hook), the Python ones (function), or none.
print("ready", type(torch.Tensor.backward).__name__, flush=True)
for line in sys.stdin:   # "KIND CALLS": one burst, answered with its wall and CPU seconds; end of input: done
    name, calls = line.split()
    call, calls = kinds[name], int(calls)
    warmup = max(1, calls // 10)
    it = iter(torch.utils.data.DataLoader(Rows(4 * (warmup + calls)), batch_size=4, num_workers=0))
    for _ in range(warmup):
        call(it)
    cpu_began, began = cpu_clock(), clock()
    for _ in range(calls):
        call(it)
    took = clock() - began
    print(took, cpu_clock() - cpu_began, flush=True)
dist.destroy_process_group()
"""

# The longest one burst may take before its interpreter is taken for hung.
BURST_TIMEOUT_S = 120


class Sink:
    """A Unix datagram socket standing in for the agent's: drained by a thread; counts reports of counted steps."""

    def __init__(self, path):
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(path)
        self.sock.settimeout(0.1)
        self.reports = 0
        self.max_steps = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._drain, daemon=True)
        self.thread.start()

    def _take(self, data):
        self.reports += 1
        try:
            self.max_steps = max(self.max_steps, int(json.loads(data).get("steps_done", 0)))
        except (ValueError, TypeError, AttributeError):
            pass

    def _drain(self):
        while not self.stop.is_set():
            try:
                self._take(self.sock.recv(65536))
            except socket.timeout:
                pass

    def close(self):
        """Stops the thread, reads what is still queued (a process's last report at exit), and removes the socket."""
        self.stop.set()
        self.thread.join(timeout=5)
        self.sock.setblocking(False)
        while True:
            try:
                self._take(self.sock.recv(65536))
            except (BlockingIOError, InterruptedError):
                break
        self.sock.close()
        os.unlink(self.path)


def clean_env():
    drop = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT",
            "PYTHONPATH")
    return {k: v for k, v in os.environ.items() if not k.startswith("DTRAIN_") and k not in drop}


# Part 1's cases: each one's bootstrap directory (None: not armed), and the type torch.Tensor.backward then has.
CASES = ("unarmed", "python", "c")
BACKWARD_TYPE = {"unarmed": "function", "python": "function", "c": "Hook"}


def bootstrap_dirs(dtrain):
    """Part 1's bootstrap directory per case: the source tree's (sitecustomize.py alone: the Python wrappers) and the
    build's beside --dtrain (with _dtrain_hooks, the C wrappers, which the build makes there)."""
    built = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(dtrain))), "share", "dtrain", "python",
                         "bootstrap")
    return {"unarmed": None, "python": BOOTSTRAP_DIR, "c": built}


class Interpreter:
    """One fresh /usr/bin/python3 running CALLS in one of CASES, with its own report sink."""

    def __init__(self, work, case, bootstrap, index, cpu):
        self.armed = bootstrap is not None
        self.bootstrap = bootstrap
        self.tag = "%s-%d" % (case, index)
        self.sink = Sink(os.path.join(work, self.tag + ".sock"))
        path = [bootstrap, HELPER_DIR] if self.armed else [HELPER_DIR]
        env = dict(clean_env(), PYTHONPATH=os.pathsep.join(path), DTRAIN_HEALTH_SOCKET=self.sink.path, RANK="0",
                   DTRAIN_JOB_TOKEN="t", DTRAIN_REPORT_TOKEN="r", DTRAIN_HEALTH_INTERVAL_MS="100")
        self.stderr = open(os.path.join(work, self.tag + ".stderr"), "w+")
        self.proc = subprocess.Popen([PYTHON, "-c", CALLS, os.path.join(work, self.tag + ".store"), str(cpu)],
                                     env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr,
                                     text=True, bufsize=1)
        ready = self._answer("start-up").split()
        if ready[1:] != [BACKWARD_TYPE[case]]:
            self.proc.kill()
            raise RuntimeError("the %s timing interpreter armed the wrong wrappers: torch.Tensor.backward is a %s, not "
                               "a %s (the C ones are built into %s by the dtrain target)" % (
                                   self.tag, " ".join(ready[1:]), BACKWARD_TYPE[case], bootstrap))

    def _answer(self, what):
        watchdog = threading.Timer(BURST_TIMEOUT_S, self.proc.kill)
        watchdog.start()
        try:
            line = self.proc.stdout.readline()
        finally:
            watchdog.cancel()
        if not line:
            self.stderr.seek(0)
            raise RuntimeError("the %s timing interpreter ended during %s (exit %s; killed if it took over %d s):\n%s"
                               % (self.tag, what, self.proc.poll(), BURST_TIMEOUT_S, self.stderr.read()[-3000:]))
        return line

    def burst(self, kind, calls):
        """(wall seconds, CPU seconds of the whole process) for `calls` calls of `kind`."""
        self.proc.stdin.write("%s %d\n" % (kind, calls))
        wall, cpu = self._answer("a burst of " + kind).split()
        return float(wall), float(cpu)

    def close(self):
        """Ends the interpreter and checks that it was armed, or not, as meant."""
        self.proc.stdin.close()
        try:
            code = self.proc.wait(timeout=60)
        finally:
            self.sink.close()
        self.stderr.seek(0)
        err = self.stderr.read()
        self.stderr.close()
        if code != 0:
            raise RuntimeError("the %s timing interpreter exited %d:\n%s" % (self.tag, code, err[-3000:]))
        if "dtrain:" in err:
            raise RuntimeError("the %s timing interpreter: the instrumentation reported an error of its own, so the "
                               "armed numbers would time the turned-off path; fix that first:\n%s" % (
                                   self.tag, err[-3000:]))
        if self.armed and self.sink.max_steps == 0:
            raise RuntimeError("the %s timing interpreter sent no report of a counted step to %s (%d datagrams): the "
                               "bootstrap did not arm; check that %s/sitecustomize.py is importable" % (
                                   self.tag, self.sink.path, self.sink.reports, self.bootstrap))
        if not self.armed and self.sink.reports:
            raise RuntimeError("the %s timing interpreter sent %d reports without the bootstrap on PYTHONPATH: the "
                               "baseline is instrumented after all (a sitecustomize elsewhere on the path?)" % (
                                   self.tag, self.sink.reports))


def quartiles(values):
    """(lower quartile, median, upper quartile) of `values`."""
    q = statistics.quantiles(values, n=4, method="inclusive")
    return q[0], q[1], q[2]


def per_call(args, work):
    calls = {kind: args.loop_calls if kind == "loop" else args.calls for kind in KINDS}
    rounds = {kind: args.loop_pairs if kind == "loop" else 1 for kind in KINDS}
    dirs = bootstrap_dirs(args.dtrain)
    armed = [case for case in CASES if dirs[case] is not None]
    # Per kind and case, the bursts' seconds per call; per armed case and kind, its burst - the unarmed one next to it
    # in time, per call: in wall time, and in CPU time of the whole interpreter (all its threads: gloo's, the
    # reporter's), which another job taking turns on the CPU moves much less.
    seconds = {case: {kind: [] for kind in KINDS} for case in CASES}
    deltas = {case: {kind: [] for kind in KINDS} for case in armed}
    cpu_deltas = {case: {kind: [] for kind in KINDS} for case in armed}
    for index in range(args.repeats):
        interpreters = {case: Interpreter(work, case, dirs[case], index, args.cpu) for case in CASES}
        first = len(cpu_deltas["c"]["loop"])
        turn = 0
        for burst in range(args.bursts):
            for kind in KINDS:
                for _ in range(rounds[kind]):
                    # The three bursts back to back, in an order that rotates, so each case goes first as often.
                    order = CASES[turn % 3:] + CASES[:turn % 3]
                    turn += 1
                    took = {case: interpreters[case].burst(kind, calls[kind]) for case in order}
                    for case in order:
                        seconds[case][kind].append(took[case][0] / calls[kind])
                    for case in armed:
                        deltas[case][kind].append((took[case][0] - took["unarmed"][0]) / calls[kind])
                        cpu_deltas[case][kind].append((took[case][1] - took["unarmed"][1]) / calls[kind])
        for interpreter in interpreters.values():
            interpreter.close()
        print("interpreter set %d: %s" % (index + 1, ";  ".join(
            "%s: %s, loop in CPU time %+.2f us" % (case, "  ".join(
                "%s %+.2f us" % (kind, statistics.median(deltas[case][kind][-args.bursts * rounds[kind]:]) * 1e6)
                for kind in KINDS), statistics.median(cpu_deltas[case]["loop"][first:]) * 1e6) for case in armed)),
            flush=True)
    print()
    print("Per call: bursts of %d calls (the loop: %d steps, %d bursts per case per round), %d rounds of every kind in "
          "each of %d sets of three interpreters (unarmed; the Python wrappers; the C wrappers); medians, and the "
          "quartiles of the pairs' armed - unarmed" % (
              args.calls, args.loop_calls, args.loop_pairs, args.bursts, args.repeats))
    print("| call | wrappers | wrapped calls | unarmed (us) | armed (us) | cost (us) | cost quartiles (us) "
          "| cost, CPU time (us) | per wrapped call (us) | per wrapped call, CPU time (us) | target <= 2 us |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for kind in KINDS:
        for case in armed:
            off = statistics.median(seconds["unarmed"][kind]) * 1e6
            on = statistics.median(seconds[case][kind]) * 1e6
            low, cost, high = (q * 1e6 for q in quartiles(deltas[case][kind]))
            cpu_cost = statistics.median(cpu_deltas[case][kind]) * 1e6
            each, cpu_each = cost / WRAPPED[kind], cpu_cost / WRAPPED[kind]
            print("| %s | %s | %d | %.2f | %.2f | %.2f | %.2f to %.2f | %.2f | %.2f | %.2f | %s |" % (
                kind, "C" if case == "c" else "Python", WRAPPED[kind], off, on, cost, low, high, cpu_cost, each,
                cpu_each, "met" if max(each, cpu_each) <= 2.0 else "met in %s time" % (
                    "wall" if each <= 2.0 else "CPU") if min(each, cpu_each) <= 2.0 else "MISSED"))


STEP_LINE = re.compile(r"^\[0\] step\s+(\d+) ")


def toy_ranks(tag):
    """The pids of the ddp_toy.py ranks started with DTRAIN_BENCH_TAG=`tag` in their environment."""
    needle = ("DTRAIN_BENCH_TAG=" + tag).encode()
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/environ" % entry, "rb") as f:
                if needle not in f.read().split(b"\0"):
                    continue
            with open("/proc/%s/cmdline" % entry, "rb") as f:
                if f.read().split(b"\0")[:2] == [PYTHON.encode(), TOY.encode()]:   # not the launcher: its argv has both
                    pids.append(int(entry))
        except OSError:
            pass
    return pids


def cpu_seconds(pids):
    """User + system CPU seconds of `pids`, all threads; None when one of them is gone."""
    total = 0
    try:
        for pid in pids:
            with open("/proc/%d/stat" % pid) as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])   # utime, stime: fields 14 and 15 of proc(5)
    except (OSError, IndexError, ValueError):
        return None
    return total / os.sysconf("SC_CLK_TCK")


def toy_run(args, work, mode, index):
    """One `dtrain run` of configs/ddp_toy.py; returns its training loop's rates (see the docstring)."""
    logs = os.path.join(work, "runs-%s-%d" % (mode, index))
    cmd = [args.dtrain, "run", "-n", "2", "--logs-dir", logs, "--instrument", mode, "--", PYTHON, TOY,
           "--steps", str(args.steps)]
    tag = "%s-%d-%d" % (mode, index, os.getpid())
    proc = subprocess.Popen(cmd, env=dict(clean_env(), DTRAIN_BENCH_TAG=tag), cwd=work, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)
    watchdog = threading.Timer(600, proc.kill)
    watchdog.start()
    stamps, marks, tail, ranks = [], [], [], None
    try:
        for raw in proc.stdout:
            now = time.perf_counter()
            line = raw.decode(errors="replace")
            tail = (tail + [line])[-40:]
            match = STEP_LINE.match(line)
            if not match:
                continue
            step = int(match.group(1))
            stamps.append((step, now))
            if ranks is None:   # both ranks are in the loop by rank 0's first line
                ranks = toy_ranks(tag)
            if step >= args.warmup and (step - args.warmup) % args.window == 0:
                marks.append((step, now, cpu_seconds(ranks) if len(ranks) == 2 else None))
        code = proc.wait(timeout=30)
    finally:
        watchdog.cancel()
    if code != 0:
        raise RuntimeError("%s exited %d (killed after 600 s if -9):\n%s" % (" ".join(cmd), code, "".join(tail)))
    counted = [(step, t) for step, t in stamps if step >= args.warmup]
    if len(counted) < 2 or counted[-1][0] != args.steps - 1 or len(marks) < 3:
        raise RuntimeError("%s: expected rank 0's step lines from %d to %d in the output, got steps %s" % (
            " ".join(cmd), args.warmup, args.steps - 1, [step for step, _ in stamps]))
    if len(ranks) != 2 or None in (marks[0][2], marks[-1][2]):
        raise RuntimeError("%s: found %d ranks of %s with DTRAIN_BENCH_TAG=%s in /proc (pids %s) or could not read "
                           "their CPU time; the launcher must pass its environment to the workers" % (
                               " ".join(cmd), len(ranks), TOY, tag, ranks))
    runs = [entry for entry in os.listdir(logs) if os.path.isdir(os.path.join(logs, entry))]
    status = json.loads(subprocess.run([args.dtrain, "status", os.path.join(logs, runs[0]), "--json"],
                                       capture_output=True, text=True, check=True, timeout=60).stdout)
    steps = sorted(rank.get("step", 0) or 0 for rank in status["ranks"])
    expected = [args.steps] * 2 if mode == "auto" else [0, 0]
    if steps != expected:
        raise RuntimeError("%s: dtrain status shows ranks at steps %s, expected %s for instrument %s" % (
            " ".join(cmd), steps, expected, mode))
    (first, t_first), (last, t_last) = counted[0], counted[-1]
    windows = [(b[0] - a[0]) / (b[1] - a[1]) for a, b in zip(marks, marks[1:])]
    return {"span": (last - first) / (t_last - t_first), "windows": statistics.median(windows),
            "cpu": (marks[-1][0] - marks[0][0]) / (marks[-1][2] - marks[0][2])}


def steps_per_s(args, work):
    measures = {"span": "second (whole span)", "windows": "second (median of %d-step windows)" % args.window,
                "cpu": "CPU-second of the 2 ranks"}
    rates = {measure: {"off": [], "auto": []} for measure in measures}
    ratios = {measure: [] for measure in measures}
    for index in range(args.pairs):
        order = ("off", "auto") if index % 2 == 0 else ("auto", "off")
        pair = {mode: toy_run(args, work, mode, index) for mode in order}
        for measure in measures:
            for mode in order:
                rates[measure][mode].append(pair[mode][measure])
            ratios[measure].append(pair["auto"][measure] / pair["off"][measure])
        print("toy pair %d (%s first): %s" % (index + 1, order[0], "  ".join(
            "%s: off %.1f auto %.1f auto/off %.3f" % (measure, pair["off"][measure], pair["auto"][measure],
                                                      ratios[measure][-1]) for measure in measures)),
              flush=True)
    print()
    print("configs/ddp_toy.py under dtrain run -n 2, %d steps, steps/s of rank 0 from step %d to the last, %d pairs" %
          (args.steps, args.warmup, args.pairs))
    print("| steps per | off median | auto median | off min-max | auto min-max | median auto/off of the pairs | "
          "target >= 0.98 |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | --- |")
    for measure, what in measures.items():
        off, auto = rates[measure]["off"], rates[measure]["auto"]
        ratio = statistics.median(ratios[measure])
        print("| %s | %.1f | %.1f | %.1f-%.1f | %.1f-%.1f | %.3f (%s) | %s |" % (
            what, statistics.median(off), statistics.median(auto), min(off), max(off), min(auto), max(auto), ratio,
            " ".join("%.3f" % r for r in ratios[measure]), "met" if ratio >= 0.98 else "MISSED"))


# configs/ddp_toy.py's model and loop, with the instrumentation switched on and off in blocks of steps inside one run.
TOY_BLOCKS = r"""
import argparse, os, sys, time
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
import dtrain_health

parser = argparse.ArgumentParser()
parser.add_argument("--pairs", type=int)
parser.add_argument("--block", type=int)
parser.add_argument("--warmup", type=int)
args = parser.parse_args()
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = DDP(torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 1)))
opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
gen = torch.Generator().manual_seed(rank)

def train(steps):
    for _ in range(steps):
        x = torch.randn(16, 32, generator=gen)
        loss = torch.nn.functional.mse_loss(model(x), x.sum(dim=1, keepdim=True))
        opt.zero_grad()
        loss.backward()
        opt.step()

train(args.warmup)
# The bootstrap's measurements, registered with the reporter at the first step it counted.
state = getattr(dtrain_health._reporter, "auto", None)
if state is None or not state.on:
    sys.exit("toy blocks: the PyTorch instrumentation is not armed in rank %d (health.instrument must be auto)" % rank)
wall, cpu = time.perf_counter, time.process_time
for pair in range(args.pairs):
    took = {}
    for on in ((True, False) if pair % 2 == 0 else (False, True)):   # both ranks switch at the same steps
        state.on = on
        train(1)
        began, cpu_began = wall(), cpu()
        train(args.block)
        took[on] = (wall() - began, cpu() - cpu_began)
    if rank == 0:
        print("block pair %d %.9f %.9f %.9f %.9f" % (pair, took[False][0], took[True][0], took[False][1],
                                                      took[True][1]), flush=True)
state.on = True
# torch 1.13: DDP (and ZeroRedundancyOptimizer) keep the process group alive past destroy_process_group(), and
# gloo's threads left to the interpreter's teardown may abort the process ("terminate called without an active
# exception"): drop them first, so its threads end here.
del model
dist.destroy_process_group()
"""
BLOCK_LINE = re.compile(r"^\[0\] block pair (\d+) (\S+) (\S+) (\S+) (\S+)")


def toy_blocks(args, work):
    """configs/ddp_toy.py's loop under `dtrain run -n 2 --instrument auto`, the instrumentation switched off and on
    in alternating blocks of --block steps inside the one run (both ranks at the same steps): each pair of blocks
    is next to each other in time, so the load from elsewhere on this shared machine hits both alike. Off, the
    wrappers still run, each as one test of a flag and a call through (about 0.1 us a call), so this bounds what
    the instrumentation's work costs the quickstart model; the runs above compare against no wrappers at all."""
    script = os.path.join(work, "toy_blocks.py")
    with open(script, "w") as f:
        f.write(TOY_BLOCKS)
    logs = os.path.join(work, "runs-blocks")
    cmd = [args.dtrain, "run", "-n", "2", "--logs-dir", logs, "--instrument", "auto", "--", PYTHON, script,
           "--pairs", str(args.block_pairs), "--block", str(args.block), "--warmup", str(args.warmup)]
    done = subprocess.run(cmd, env=clean_env(), cwd=work, capture_output=True, text=True, timeout=1800)
    pairs = [tuple(float(v) for v in m.groups()[1:]) for m in map(BLOCK_LINE.match, done.stdout.splitlines()) if m]
    if done.returncode != 0 or len(pairs) != args.block_pairs:
        raise RuntimeError("%s exited %d with %d of %d block pairs:\n%s" % (
            " ".join(cmd), done.returncode, len(pairs), args.block_pairs, (done.stdout + done.stderr)[-3000:]))
    print()
    print("configs/ddp_toy.py's loop under dtrain run -n 2 --instrument auto, the instrumentation off and on in %d "
          "pairs of alternating %d-step blocks in one run (rank 0's times)" % (args.block_pairs, args.block))
    print("| measure | off (us/step) | on (us/step) | on - off (us/step), quartiles | median off/on of the pairs "
          "(steps/s on / off), quartiles | target >= 0.98 |")
    print("| --- | ---: | ---: | ---: | ---: | --- |")
    for what, off_at, on_at in (("wall time", 0, 1), ("CPU time of rank 0 (all its threads)", 2, 3)):
        off = [p[off_at] / args.block * 1e6 for p in pairs]
        on = [p[on_at] / args.block * 1e6 for p in pairs]
        low, mid, high = quartiles([b - a for a, b in zip(off, on)])
        r_low, ratio, r_high = quartiles([a / b for a, b in zip(off, on)])
        print("| %s | %.1f | %.1f | %.2f (%.2f to %.2f) | %.4f (%.4f to %.4f) | %s |" % (
            what, statistics.median(off), statistics.median(on), mid, low, high, ratio, r_low, r_high,
            "met" if ratio >= 0.98 else "MISSED"))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dtrain", default=os.path.join(ROOT, "build", "bin", "dtrain"))
    parser.add_argument("--calls", type=int, default=1000, help="calls per burst (part 1)")
    parser.add_argument("--bursts", type=int, default=20, help="rounds of bursts of each kind per interpreter (part 1)")
    parser.add_argument("--loop-calls", type=int, default=200, help="loop steps per burst (part 1)")
    parser.add_argument("--loop-pairs", type=int, default=5,
                        help="loop bursts of each case per round (part 1)")
    parser.add_argument("--repeats", type=int, default=3, help="sets of three interpreters (part 1)")
    parser.add_argument("--cpu", type=int, default=max(os.sched_getaffinity(0)),
                        help="the CPU both timing interpreters are bound to (part 1)")
    parser.add_argument("--pairs", type=int, default=5, help="auto/off pairs of dtrain runs (part 2)")
    parser.add_argument("--steps", type=int, default=2000, help="ddp_toy.py --steps (part 2)")
    parser.add_argument("--warmup", type=int, default=100, help="steps before the timed span (part 2)")
    parser.add_argument("--window", type=int, default=100, help="steps per window, a multiple of 10 (part 2)")
    parser.add_argument("--block", type=int, default=50, help="steps per block of the in-run switch (part 3)")
    parser.add_argument("--block-pairs", type=int, default=200, help="pairs of blocks, off and on (part 3)")
    parser.add_argument("--only", choices=("calls", "steps", "blocks"))
    args = parser.parse_args()
    if not os.access(args.dtrain, os.X_OK):
        sys.exit("instrument_cost: %s is not an executable dtrain; build it (scripts/build.sh) or pass --dtrain"
                 % args.dtrain)
    if args.window <= 0 or args.window % 10 or args.warmup % 10 or args.steps <= args.warmup + 2 * args.window:
        sys.exit("instrument_cost: --window and --warmup must be multiples of 10 (rank 0 prints every 10th step) and "
                 "--steps must exceed --warmup by two windows or more")
    work = tempfile.mkdtemp(prefix="dtrain-instrument-cost-")
    print("work directory %s; CPU: %s; load average %.2f %.2f %.2f" % ((work, cpu_model()) + os.getloadavg()),
          flush=True)
    if args.only in (None, "calls"):
        per_call(args, work)
        print()
    if args.only in (None, "steps"):
        steps_per_s(args, work)
    if args.only in (None, "blocks"):
        toy_blocks(args, work)
    print("load average at the end: %.2f %.2f %.2f" % os.getloadavg())
    shutil.rmtree(work, ignore_errors=True)   # (kept when a part failed: its logs are there)


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            names = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
        return "%s x %d" % (names[0], len(names))
    except (OSError, IndexError):
        return "unknown"


if __name__ == "__main__":
    main()
