"""dtrain's PyTorch bootstrap (health.instrument: auto): an unmodified PyTorch script reports its steps to dtrain.

The agent puts this directory on the PYTHONPATH of workers whose command runs Python (agent/job/python_command.h),
after dtrain_health.py's and before everything of the user's, so Python's site module imports this file as
`sitecustomize`. It then runs the sitecustomize that would have been imported without it (the next one on sys.path:
the user's, or the distribution's such as Debian's /etc/python3.X/sitecustomize.py), which takes its place in
sys.modules, so nothing of theirs is lost.

It arms only when the program imports torch: a finder at the head of sys.meta_path waits for that one import, lets
it run, and then instruments torch and leaves sys.meta_path. A program that never imports torch pays one name
comparison per module it imports, and is not otherwise touched.

Armed, it measures, per optimizer step:
    steps       one step is one call of an optimizer's step() (any torch.optim.Optimizer subclass: each class's
                step is wrapped once, when its first instance is made; a wrapper such as ZeroRedundancyOptimizer,
                whose step calls its inner optimizer's, is counted once). The wrapper is used on every torch
                version, also where torch has global step hooks (2.x): those cannot tell an inner optimizer's step
                from its wrapper's. Gradient-accumulation micro-steps call no step() and are not steps.
    data wait   wall time inside DataLoader iterators' __next__ (single- and multi-process loaders alike);
    loss        the last 0-dim tensor whose backward() ran before the step (read as dtrain_health's report(loss=)
                does: at once on the CPU, on a device only once its value exists, at most once per report interval);
    tokens      when a batch is, or begins with (a tuple, a list, a dict's input_ids or first value), an integer
                tensor of token ids (batch x sequence): its elements, for tokens/s;
    comm wait   wall time inside blocking torch.distributed collectives (async_op=True ones return at once and are
                not counted; a collective made of others is counted once).
    phase       while a blocking collective runs, "torch.distributed.<name>" (the previous phase after it): a rank
                hung in one is reported with it. Set only once reports run, and never over a script's own phases.
and reports them through dtrain_health (its reporter, socket and thread; see that module for the fields). The
reporter starts at the first optimizer step, so a torch program that never steps an optimizer sends nothing and is
never judged by the launcher's start-up or heartbeat checks. A script that uses dtrain_health's step() or timed()
itself is counted by those alone (explicit use wins).

An exception inside the instrumentation never reaches the program: it is reported once on stderr and the
instrumentation turns itself off in this process (the wrappers then only call through).
"""

import os
import sys
import threading
import time


def _load_theirs():
    """Runs the sitecustomize that comes after this directory on sys.path, as `sitecustomize`."""
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    rest = []
    seen_here = False
    for entry in sys.path:
        if seen_here:
            rest.append(entry)
        elif os.path.abspath(entry or os.curdir) == here:
            seen_here = True
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest if seen_here else
                                                    [e for e in sys.path if os.path.abspath(e or os.curdir) != here])
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    # Theirs is `sitecustomize` from now on: the import machinery keeps whatever sys.modules holds under the name
    # once this file has run, and their code may import itself by that name.
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


class _Instrumentation:
    """What one armed process measures between two optimizer steps, and the switch that turns it all off."""

    def __init__(self):
        self.on = True
        self.clock = time.perf_counter
        self.local = threading.local()   # in_step, in_collective: re-entry guards, per thread
        self.armed_at = self.clock()
        self.last_end = None             # when the previous step ended
        self.first_data = None           # when the first DataLoader wait before the first step began
        self.data_wait = 0.0             # seconds since the previous step
        self.comm_wait = 0.0
        self.tokens = 0                  # token ids the DataLoader handed out since the previous step
        self.loss = None                 # the last 0-dim tensor backward() ran from, detached
        self.health = None               # the dtrain_health module, once the first step is counted

    def fail(self, error):
        """Turns the instrumentation off in this process and says so, once."""
        if not self.on:
            return
        self.on = False
        try:
            sys.stderr.write("dtrain: the PyTorch instrumentation (health.instrument: auto) is off in this process "
                             "after an error of its own: %s: %s. The program goes on; set health.instrument: off to "
                             "silence this, or report it with this line.\n" % (type(error).__name__, error))
        except Exception:
            pass

    def enter_phase(self, name):
        """Makes `name` the reported phase; returns the one to restore (None: nothing was changed)."""
        reporter = self.health._reporter if self.health is not None else None
        if reporter is None or reporter.explicit_steps:
            return None
        previous = reporter.phase
        reporter.phase = name
        return previous

    def step_done(self):
        now = self.clock()
        began = self.last_end if self.last_end is not None else \
            self.first_data if self.first_data is not None else self.armed_at
        data, comm, tokens, loss = self.data_wait, self.comm_wait, self.tokens, self.loss
        self.last_end = now
        self.data_wait = self.comm_wait = 0.0
        self.tokens = 0
        self.loss = None
        if self.health is None:
            import dtrain_health
            self.health = dtrain_health
        reporter = self.health._reporter
        if reporter is None:   # no health socket: nothing to report to
            self.on = False
            return
        if tokens and reporter.tokens is None:   # a count the script reported itself wins
            reporter.tokens = tokens
        if loss is not None and not reporter.explicit_steps:
            reporter.take_loss(loss)
        reporter.automatic_step(now - began, data, comm)


_state = None


def _wrap_step(step):
    state = _state

    def counted_step(*args, **kwargs):
        local = state.local
        if not state.on or getattr(local, "in_step", False):
            return step(*args, **kwargs)
        local.in_step = True
        try:
            result = step(*args, **kwargs)
        finally:
            local.in_step = False
        try:
            state.step_done()
        except Exception as error:
            state.fail(error)
        return result

    for name in ("__module__", "__name__", "__qualname__", "__doc__"):
        try:
            setattr(counted_step, name, getattr(step, name))
        except AttributeError:
            pass
    counted_step.__dict__.update(getattr(step, "__dict__", {}))
    counted_step.__wrapped__ = step
    counted_step._dtrain_counted = True
    return counted_step


def _instrument_optimizers(torch):
    optimizer = torch.optim.Optimizer
    init = optimizer.__init__

    def counting_init(self, *args, **kwargs):
        init(self, *args, **kwargs)
        if not _state.on:
            return
        try:
            cls = type(self)
            if not getattr(cls.step, "_dtrain_counted", False):
                cls.step = _wrap_step(cls.step)
        except Exception as error:
            _state.fail(error)

    counting_init.__wrapped__ = init
    optimizer.__init__ = counting_init


def _token_count(torch, batch):
    """The token ids in `batch` when it is, or begins with, an integer tensor of batch x sequence; else 0."""
    if isinstance(batch, dict):
        batch = batch.get("input_ids", next(iter(batch.values()), None))
    elif isinstance(batch, (tuple, list)):
        batch = batch[0] if batch else None
    if isinstance(batch, torch.Tensor) and batch.dim() == 2 and not batch.is_floating_point() and \
            not batch.is_complex() and batch.dtype != torch.bool:
        return batch.numel()
    return 0


def _instrument_backward(torch):
    tensor = torch.Tensor
    backward = tensor.backward
    state = _state

    def noting_backward(self, *args, **kwargs):
        if state.on:
            try:
                if self.dim() == 0:
                    state.loss = self.detach()
            except Exception as error:
                state.fail(error)
        return backward(self, *args, **kwargs)

    noting_backward.__wrapped__ = backward
    for name in ("__module__", "__name__", "__qualname__", "__doc__"):
        setattr(noting_backward, name, getattr(backward, name, None))
    tensor.backward = noting_backward


def _instrument_data_loaders(torch):
    from torch.utils.data import dataloader
    iterator = dataloader._BaseDataLoaderIter
    next_item = iterator.__next__
    state = _state

    def timed_next(self):
        if not state.on:
            return next_item(self)
        began = state.clock()
        try:
            batch = next_item(self)
        finally:
            state.data_wait += state.clock() - began
            if state.first_data is None and state.last_end is None:
                state.first_data = began
        try:
            state.tokens += _token_count(torch, batch)
        except Exception as error:
            state.fail(error)
        return batch

    timed_next.__wrapped__ = next_item
    iterator.__next__ = timed_next


# Collectives whose blocking form is timed; any of them a torch version lacks is skipped.
_COLLECTIVES = ("all_reduce", "all_gather", "all_gather_object", "all_gather_into_tensor", "_all_gather_base",
                "reduce_scatter", "reduce_scatter_tensor", "_reduce_scatter_base", "broadcast",
                "broadcast_object_list", "reduce", "gather", "gather_object", "scatter", "scatter_object_list",
                "all_to_all", "all_to_all_single", "barrier", "monitored_barrier")


def _wrap_collective(fn):
    import inspect
    state = _state
    try:
        position = list(inspect.signature(fn).parameters).index("async_op")
    except ValueError:
        position = None

    phase = "torch.distributed." + fn.__name__

    def timed_collective(*args, **kwargs):
        local = state.local
        if not state.on or getattr(local, "in_collective", False):
            return fn(*args, **kwargs)
        asynchronous = kwargs.get("async_op", args[position] if position is not None and len(args) > position
                                  else False)
        if asynchronous:
            return fn(*args, **kwargs)
        try:
            previous = state.enter_phase(phase)
        except Exception as error:
            state.fail(error)
            return fn(*args, **kwargs)
        local.in_collective = True
        began = state.clock()
        try:
            return fn(*args, **kwargs)
        finally:
            local.in_collective = False
            state.comm_wait += state.clock() - began
            if previous is not None:
                state.health._reporter.phase = previous

    for name in ("__module__", "__name__", "__qualname__", "__doc__"):
        setattr(timed_collective, name, getattr(fn, name, None))
    timed_collective.__wrapped__ = fn
    return timed_collective


def _instrument_collectives(torch):
    import torch.distributed as dist
    if not dist.is_available():
        return
    c10d = dist.distributed_c10d
    for name in _COLLECTIVES:
        fn = getattr(c10d, name, None)
        if not callable(fn):
            continue
        wrapped = _wrap_collective(fn)
        setattr(c10d, name, wrapped)
        # torch.distributed re-exports them: the script calls that name, torch's own modules either.
        if getattr(dist, name, None) is fn:
            setattr(dist, name, wrapped)


def _arm(torch):
    global _state
    _state = _Instrumentation()
    try:
        _instrument_optimizers(torch)
        _instrument_backward(torch)
        _instrument_data_loaders(torch)
        _instrument_collectives(torch)
    except Exception as error:
        _state.fail(error)


class _TorchFinder:
    """Finds nothing itself: on `import torch` it has the other finders find torch, and arms once torch ran."""

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        try:
            spec = None
            for finder in sys.meta_path:
                find = getattr(finder, "find_spec", None)
                if finder is self or find is None:
                    continue
                spec = find(name, path, target)
                if spec is not None:
                    break
            if spec is None or spec.loader is None:
                return None
            loader = spec.loader
            execute = loader.exec_module

            def exec_and_arm(module):
                del loader.exec_module
                self.leave()
                execute(module)
                _arm(module)

            loader.exec_module = exec_and_arm
            return spec
        except Exception as error:
            # Torch is then found by the finders after this one, as if it were not here.
            self.leave()
            _Instrumentation().fail(error)
            return None

    def leave(self):
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass


if os.environ.get("DTRAIN_HEALTH_SOCKET") and "torch" not in sys.modules:
    sys.meta_path.insert(0, _TorchFinder())
_load_theirs()
