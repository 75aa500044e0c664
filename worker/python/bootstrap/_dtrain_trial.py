"""A trial of `dtrain tune` (cli/tune/trial.h, the protocol) in an unmodified PyTorch script: the worker side.

`dtrain tune` gives every worker of a trial DTRAIN_TUNE_TRIAL={"warmup":W,"steps":N,"losses":K}. The bootstrap
(sitecustomize.py) then calls trial() once, when it arms at `import torch`, in the worker process only, after the tune
overlay's apply() (_dtrain_tune.py: a trial runs with the overlay it measures), whether or not the measuring armed
(`state`: the process's _Instrumentation, _dtrain_instrumentation.py, or None). Nothing here runs without that
variable. It wraps, outside the measuring's wrappers and the overlay's (so that it sees their work done):
    steps       torch.optim.Optimizer.__init__, after the measuring wrapped it: each optimizer class's step is wrapped
                when its first instance is made, around the measuring's counted one; a step inside another (a
                wrapper's inner optimizer's) is counted once. Before steps 1 .. K it reads the step's loss
                (float(state.loss): the trial's only device sync, and only then); after each, the clock and the
                step's numbers: the measuring's own account where it counted the step (its `done`, with what only
                its reporter adds: CUDA-timed communication, watch()'s), else the running totals' change (data wait,
                exposed communication, samples and tokens as step_counts picks them). A step's time runs from the
                end of the one before (the first's, without warm-up, from its first batch, forward or backward());
    loader      DataLoader.__init__ (outside the overlay's): the first DataLoader's effective arguments, read from
                the instance once built (prefetch_factor null where num_workers is 0: it does not apply);
    ddp         DistributedDataParallel.__init__ the same way: its bucket size (bucket_bytes_cap, in MB) and
                gradient_as_bucket_view.
Right after step W + N returns, the worker writes its trial line on fd 2 (sys.stdout and sys.stderr flushed first)
and exits 0 at once (os._exit: the rest of the script is not the trial's), terminating its daemonic multiprocessing
children first as a normal exit would (its DataLoader's workers, which would otherwise outlive it until torch's
watchdog noticed). One that ends before (it returned, raised or called exit) writes the line with "complete":false
from an atexit handler and exits as it would have. Only the process that started the trial does any of this (a
forked child, a DataLoader's worker, only calls through). An error of the trial's own is said once and turns it off
in this process: the wrappers call through and no line is written (the trial fails by its missing line, never by a
wrong one).
"""

import atexit
import functools
import json
import math
import os
import resource
import signal
import sys
import time


def _say(text):
    _quietly(lambda: sys.stderr.write("dtrain: %s\n" % text), None)


def trial_settings(text):
    """DTRAIN_TUNE_TRIAL's (warmup, steps, losses); ValueError saying what is wrong with it."""
    settings = json.loads(text)
    if not isinstance(settings, dict):
        raise ValueError("not a JSON object")
    values = []
    for name, least in (("warmup", 0), ("steps", 1), ("losses", 0)):
        value = settings.get(name)
        if type(value) is not int or value < least:
            raise ValueError("%s must be a whole number >= %d, got %r" % (name, least, value))
        values.append(value)
    if values[2] > values[0] + values[1]:
        raise ValueError("losses must be at most warmup + steps")
    return tuple(values)


def _totals(state):
    """The measuring's running totals (data wait, comm wait, tokens, samples, forward samples, forward tokens)."""
    return (state.data_wait, state.comm_wait, state.tokens, state.samples, state.forward_samples,
            state.forward_tokens)


def _finite(value):
    """A number JSON can hold (the line's parser refuses NaN and infinities): None for the others."""
    return value if value is not None and math.isfinite(value) else None


class _Trial:
    """One trial in the worker process (see the module's docstring)."""

    def __init__(self, torch, settings, state):
        self.torch = torch
        self.warmup, self.steps, self.keep = settings
        self.state = state
        self.pid = os.getpid()
        self.armed = time.perf_counter()
        self.on = True
        self.in_step = False
        self.count = 0
        self.ended = None                # when the last step returned
        self.totals = _totals(state) if state is not None else None
        self.done = getattr(state, "done", None)
        self.step_s, self.losses = [], []
        self.data = self.comm = 0.0
        self.tokens = self.samples = None
        self.loader = self.ddp = None

    def fail(self, error):
        if self.on:
            self.on = False
            _say("the tune trial (DTRAIN_TUNE_TRIAL) is off in this process after an error of its own: %s: %s. "
                 "The program goes on; this rank writes no trial line." % (type(error).__name__, error))

    def active(self):
        return self.on and os.getpid() == self.pid

    def loss(self):
        """The loss of the step about to run, for steps 1 .. K (None: not known)."""
        state = self.state
        if self.count >= self.keep or state is None or not state.on:   # (off: a loss it no longer drops)
            return None
        loss = state.loss
        return None if loss is None else _finite(float(loss))

    def step_numbers(self):
        """The step just made: (data wait s, comm s, tokens, samples); see the module's docstring."""
        state = self.state
        if state is None:
            return 0.0, 0.0, None, None
        before, self.totals = self.totals, _totals(state)
        done, seen = state.done, self.done
        self.done = done
        if done is not None and done is not seen and done[9] is not None:
            return done[9][1:]
        after = self.totals
        tokens, samples = state.step_counts(after[2:], before[2:])
        return after[0] - before[0], after[1] - before[1], tokens, samples

    def stepped(self, loss):
        """Step count + 1 returned: its time and numbers, and the line once it was the last."""
        now = time.perf_counter()
        self.count += 1
        if self.count <= self.keep:
            self.losses.append(loss)
        data, comm, tokens, samples = self.step_numbers()
        if self.count > self.warmup:
            began = self.ended
            if began is None:   # (no warm-up: the first step from its first batch, forward or backward)
                began = getattr(self.state, "first_start", None) or self.armed
            self.step_s.append(now - began)
            self.data += data
            self.comm += comm
            self.tokens = self.tokens if tokens is None else (self.tokens or 0) + tokens
            self.samples = self.samples if samples is None else (self.samples or 0) + samples
        self.ended = now
        if self.count == self.warmup + self.steps:
            self.write(True)
            _exit_now()

    def write(self, complete):
        """The trial line on fd 2 (sys.stdout and sys.stderr flushed first, so that it follows what they hold)."""
        line = "dtrain-trial: " + json.dumps(self.fields(complete), separators=(",", ":"), allow_nan=False) + "\n"
        for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
            try:
                stream.flush()
            except Exception:
                pass
        data = line.encode()
        while data:
            data = data[os.write(2, data):]
        self.on = False

    def fields(self, complete):
        torch = self.torch
        cuda = getattr(torch, "cuda", None)
        on_cuda = _quietly(lambda: bool(cuda.is_initialized()), False)
        return {"rank": _quietly(lambda: int(os.environ.get("RANK", "0")), 0), "steps": self.count,
                "complete": complete, "device": "cuda" if on_cuda else "cpu",
                "step_s": [round(s, 6) for s in self.step_s], "data_wait_s": round(_finite(self.data) or 0.0, 6),
                "comm_s": round(_finite(self.comm) or 0.0, 6), "samples": self.samples or None,
                "tokens": self.tokens or None, "losses": self.losses,
                "rss_bytes": _quietly(lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, 0),
                "device_peak_bytes": _quietly(lambda: int(cuda.max_memory_allocated()), 0) if on_cuda else 0,
                "cpus": _quietly(lambda: len(os.sched_getaffinity(0)), os.cpu_count() or 0),
                "threads": _quietly(torch.get_num_threads, 0),
                "loader": self.loader, "ddp": self.ddp, "trainer": None}

    def at_exit(self):
        """The process ends before the last step: the line with what it made ("complete":false)."""
        try:
            if self.active():
                self.write(False)
        except Exception as error:
            self.fail(error)


def _exit_now():
    """os._exit(0), after what a normal exit does to the daemonic multiprocessing children (multiprocessing's atexit
    terminates them): a DataLoader's workers end with the rank. torch's SIGCHLD handler, which would take their end
    for a worker's failure and raise it here, is put back to the default first."""
    try:
        children = sys.modules.get("multiprocessing")
        children = [child for child in children.active_children() if child.daemon] if children is not None else []
        if children:
            _quietly(lambda: signal.signal(signal.SIGCHLD, signal.SIG_DFL), None)
            for child in children:
                _quietly(child.terminate, None)
    finally:
        os._exit(0)


def _quietly(read, fallback):
    """read(), or `fallback` where it fails: one number the line cannot have never costs the others."""
    try:
        return read()
    except Exception:
        return fallback


def _wrap_step(trial, step):
    """`step` (an optimizer class's step, the measuring's counted one where it armed), counted for the trial."""

    def trial_step(*args, **kwargs):
        if trial.in_step or not trial.active():
            return step(*args, **kwargs)
        try:
            loss = trial.loss()
        except Exception as error:
            trial.fail(error)
            return step(*args, **kwargs)
        trial.in_step = True
        try:
            result = step(*args, **kwargs)
        finally:
            trial.in_step = False
        try:
            trial.stepped(loss)
        except Exception as error:
            trial.fail(error)
        return result

    functools.update_wrapper(trial_step, step)
    trial_step._dtrain_trial = True
    return trial_step


def _after_init(trial, cls, seen):
    """cls.__init__, after which seen(trial, instance) runs (errors of its own go to trial.fail)."""
    init = cls.__init__

    @functools.wraps(init)
    def noting_init(self, *args, **kwargs):
        init(self, *args, **kwargs)
        if trial.active():
            try:
                seen(trial, self)
            except Exception as error:
                trial.fail(error)

    cls.__init__ = noting_init


def _optimizer_made(trial, optimizer):
    cls = type(optimizer)
    if not getattr(cls.step, "_dtrain_trial", False):
        cls.step = _wrap_step(trial, cls.step)


def _loader_made(trial, loader):
    if trial.loader is None:
        workers = int(loader.num_workers)
        prefetch = getattr(loader, "prefetch_factor", None)
        trial.loader = {"num_workers": workers, "pin_memory": bool(loader.pin_memory),
                        "prefetch_factor": int(prefetch) if workers > 0 and prefetch is not None else None,
                        "persistent_workers": bool(getattr(loader, "persistent_workers", False))}


def _ddp_made(trial, model):
    if trial.ddp is None:
        megabytes = model.bucket_bytes_cap / float(1 << 20)
        trial.ddp = {"bucket_cap_mb": int(megabytes) if megabytes == int(megabytes) else megabytes,
                     "gradient_as_bucket_view": bool(model.gradient_as_bucket_view)}


def trial(torch, text, state):
    """Starts the trial DTRAIN_TUNE_TRIAL (`text`) asks for, in this process (the worker); `state` the measuring's
    _Instrumentation, None where it did not arm. A bad value is said and starts nothing."""
    try:
        settings = trial_settings(text)
    except ValueError as error:
        _say("DTRAIN_TUNE_TRIAL=%r is not a trial's settings ({\"warmup\":W,\"steps\":N,\"losses\":K}): %s. "
             "No trial in this process." % (text, error))
        return None
    if state is None:
        _say("the tune trial counts this rank's steps, but the PyTorch instrumentation did not arm: its line has "
             "no data wait, communication, samples, tokens or losses.")
    run = _Trial(torch, settings, state)
    try:
        _after_init(run, torch.optim.Optimizer, _optimizer_made)
        _after_init(run, torch.utils.data.DataLoader, _loader_made)
        ddp = getattr(getattr(getattr(torch, "nn", None), "parallel", None), "DistributedDataParallel", None)
        if ddp is not None:
            _after_init(run, ddp, _ddp_made)
        atexit.register(run.at_exit)
    except Exception as error:   # (what was wrapped then only calls through)
        run.fail(error)
    return run
