"""dtrain's PyTorch bootstrap (health.instrument: auto): an unmodified PyTorch script reports its steps to dtrain.

The agent puts this directory on the PYTHONPATH of workers whose command runs Python (agent/job/python_command.h),
after dtrain_health.py's and before everything of the user's, so Python's site module imports this file as
`sitecustomize`. It then runs the sitecustomize that would have been imported without it (the next one on sys.path:
the user's, or the distribution's such as Debian's /etc/python3.X/sitecustomize.py), which takes its place in
sys.modules, so nothing of theirs is lost.

It arms only when the program imports torch: a finder at the head of sys.meta_path waits for that one import, lets
it run, and then instruments torch and leaves sys.meta_path. A program that never imports torch pays one name
comparison per module it imports, and is not otherwise touched. It arms only in the worker process the agent started
(DTRAIN_WORKER_PID is its pid, or unset: dtrain_health's rule): the Python children that inherit this PYTHONPATH (a
DataLoader's spawned workers, a `subprocess.run([sys.executable, ...])`, torch.multiprocessing's) and the children
forked from the worker (their wrappers turn off at the fork) measure and send nothing, so they never speak for the
rank.

Armed, it measures, per optimizer step:
    steps       one step is one call of an optimizer's step() (any torch.optim.Optimizer subclass: each class's
                step is wrapped once, when its first instance is made; a wrapper such as ZeroRedundancyOptimizer,
                whose step calls its inner optimizer's, is counted once). The wrapper is used on every torch
                version, also where torch has global step hooks (2.x): those cannot tell an inner optimizer's step
                from its wrapper's. Gradient-accumulation micro-steps call no step() and are not steps. A step runs
                from the end of the previous one; the first from its first batch, DDP forward or backward().
    data wait   wall time inside DataLoader iterators' __next__ (single- and multi-process loaders alike);
    loss        the last 0-dim tensor whose backward() ran before the step (read as dtrain_health's report(loss=)
                does: by its sender thread; on a device taken at most every DTRAIN_HEALTH_LOSS_EVERY steps and read
                only once its value exists);
    tokens,     when a batch is, or begins with (a tuple, a list, a dict's input_ids or first value), a tensor:
    samples     its first dimension is samples; when it holds integers, batch x sequence, its elements are tokens.
                Without a DataLoader, samples are the first dimension of DDP models' first forward argument;
    comm wait   wall time inside blocking torch.distributed collectives (async_op=True ones return at once and are
                not counted; a collective made of others is counted once), and DDP's gradient reduction: from the
                last gradient backward produced for a DDP model's parameters (DDP then launches its last bucket) to
                the end of backward(), where DDP waits for every bucket (see _instrument_ddp; with
                dtrain_health.watch(), its hook's timing instead). DDP's reduction and the script's communication
                hooks are left as they are. On CUDA tensors both come from CUDA events read once they have
                passed, never waited for;
    memory      on CUDA, memory_reserved, max_memory_allocated and the device's total (RSS is the reporter's);
    phase       "data" inside __next__, "forward" after a batch or a step, "backward", "optimizer", and
                "torch.distributed.<name>" while a blocking collective runs (the previous phase after it): a rank
                hung in one is reported there. Set only once reports run, and never over a script's own phases.
and reports them through dtrain_health (its reporter, socket and thread; see that module for the fields). The
reporter starts at the first optimizer step, so a torch program that never steps an optimizer sends nothing and is
never judged by the launcher's start-up or heartbeat checks. A script that uses dtrain_health's step() or timed()
itself is counted by those alone (explicit use wins). A torch without one of these hooks gets one line on rank 0
naming what is not measured. Armed, it also passes init_process_group through dtrain_health's wait_quietly() once
the script reports, since that call keeps the reporter's thread from heartbeating while it waits for late peers
(_wrap_init_process_group).

The wrappers are in C (hooks.c, the extension _dtrain_hooks, which the build puts beside this file) for the interpreter
dtrain was built with (DTRAIN_HOOKS_PYTHON, Debian's /usr/bin/python3 by default): 1.6-1.9 us a wrapped call in a
training loop, against 2.6-2.9 us for the Python wrappers below (BENCHMARKS.md), which any other interpreter gets (the
extension's file name carries its ABI tag, so no other version loads it) and which do the same work: the measurements
are the same. A torch with CUDA gets the Python wrapper for collectives (its CUDA events) either way. Both the
extension and dtrain_health are loaded from their files beside this directory, never by name through sys.path: a
script's own _dtrain_hooks.py or dtrain_health.py is never run by the bootstrap (a script that imports
dtrain_health itself is reported through that import).

The loss is held detached (loss.detach(): its value, no autograd graph) and dropped at the step: what the script
frees, a graph kept by backward(retain_graph=True) included, is freed as without dtrain.

An exception inside the instrumentation, arming included, never reaches the program: it is reported once on stderr
and the instrumentation turns itself off in this process (the wrappers then only call through).
"""

import functools
import os
import sys
import time

_HERE = os.path.dirname(os.path.abspath(__file__))


def _load_theirs():
    """Runs the sitecustomize that comes after this directory on sys.path, as `sitecustomize`."""
    import importlib.machinery
    import importlib.util

    rest = []
    seen_here = False
    for entry in sys.path:
        if seen_here:
            rest.append(entry)
        elif os.path.abspath(entry or os.curdir) == _HERE:
            seen_here = True
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest if seen_here else
                                                    [e for e in sys.path if os.path.abspath(e or os.curdir) != _HERE])
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    # Theirs is `sitecustomize` from now on: the import machinery keeps whatever sys.modules holds under the name
    # once this file has run, and their code may import itself by that name.
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


# What the wrappers write: with _dtrain_hooks, C members of its State, the base of _over_hooks's class.
_COUNTERS = ("on", "in_step", "in_collective", "data_wait", "comm_wait", "tokens", "samples", "forward_samples",
             "phase", "first_start", "loss", "bucket_launch", "bucket_done", "bucket_event", "done", "previous",
             "reporter", "device_events")


class _Instrumentation:
    """What one armed process measures, and the switch that turns it all off.

    The training thread only adds to running totals, and at each optimizer step replaces `done` with one tuple of
    them (keeping the one before as `previous`); dtrain_health's sender thread turns the last two into the step's
    report (times, rates, the loss's value) when it sends. A step pays for a few attribute reads and writes, not
    for a report. The first step, the steps of a script that also reports by hand, and steps with CUDA
    measurements go through the reporter on the training thread as well (reported_step)."""

    __slots__ = _COUNTERS + ("clock", "armed_at", "health", "cuda", "device_index", "device_total")

    def __init__(self):
        self.on = True
        self.clock = time.perf_counter
        # Re-entry guards: a step or a collective made of others is counted once. They are the process's, not each
        # thread's (a plain attribute costs a fraction of a threading.local's): a step or a collective that another
        # thread makes while one runs is not counted (the training thread is the one measured).
        self.in_step = False
        self.in_collective = False
        self.armed_at = self.clock()
        self.first_start = None          # when the first step began: its first batch, DDP forward or backward()
        # Running totals since the instrumentation armed:
        self.data_wait = 0.0             # seconds inside DataLoader iterators
        self.comm_wait = 0.0             # seconds in blocking collectives and DDP's reduction
        self.tokens = 0                  # token ids the DataLoader handed out
        self.samples = 0                 # batch elements it handed out
        self.forward_samples = 0         # batch elements DDP models' forward took (when no DataLoader is used)
        self.loss = None                 # the last 0-dim tensor backward() ran from, detached; None after a step
        self.bucket_launch = None        # DDP's buckets this step: the last launch, and when backward() returned
        self.bucket_done = None          # (DDP waits for every bucket before backward() returns)
        self.bucket_event = None         # CUDA: an event at the last launch
        self.device_events = []          # CUDA: (start, end) event pairs of collectives and buckets, not read yet
        self.phase = ""                  # what the training thread does now; reported once a step was counted,
                                         # unless the script names its own phases or counts its own steps
        # The last step counted: (steps, ended, data_wait, comm_wait, tokens, samples, forward_samples, loss,
        # exact), the totals as they were when it ended; exact is None, or the step's own (began, data s, comm s,
        # tokens, samples) where the reporter adjusted them. Replaced whole; `previous` is the one before.
        self.done = None
        self.previous = None
        self.health = None               # the dtrain_health module, once the first step is counted
        self.reporter = None             # its reporter
        self.cuda = None                 # torch.cuda (device paths run only on CUDA tensors)
        self.device_index = None         # the CUDA device the training thread was seen using
        self.device_total = None

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

    def device_comm(self):
        """Seconds of the CUDA collectives whose end events have passed (never waited for); the rest stay queued."""
        waiting, seconds = [], 0.0
        for start, end in self.device_events:
            if end.query():
                seconds += start.elapsed_time(end) / 1e3
            elif len(waiting) < 256:
                waiting.append((start, end))
        self.device_events = waiting
        return seconds

    def device_memory(self, reporter):
        """Device memory into the report (the sender's thread: for the device the training thread was seen on)."""
        cuda, index = self.cuda, self.device_index
        if cuda is None or index is None or not cuda.is_initialized():
            return
        if self.device_total is None:
            self.device_total = cuda.get_device_properties(index).total_memory
        reporter.device = {"device_mem_used_bytes": cuda.memory_reserved(index),
                           "device_mem_peak_bytes": cuda.max_memory_allocated(index),
                           "device_mem_total_bytes": self.device_total}

    def backward_done(self):
        """backward() returned: DDP's reduction of this step's buckets is complete (on a GPU: queued before this)."""
        if self.bucket_launch is not None and self.bucket_done is None:
            self.bucket_done = self.clock()
        if self.bucket_event is not None:
            end = self.cuda.Event(enable_timing=True)
            end.record()
            self.device_events.append((self.bucket_event, end))
            self.bucket_event = None

    def step_done(self):
        """An optimizer step returned: the totals as they are now become `done`."""
        now = self.clock()
        if self.bucket_launch is not None:
            self.comm_wait += self.reduction(now)
        done, loss = self.done, self.loss
        if done is None or self.reporter.by_hand or self.device_events or (loss is not None and not loss.is_cpu):
            self.reported_step(now)
            return
        self.previous = done
        self.done = (done[0] + 1, now, self.data_wait, self.comm_wait, self.tokens, self.samples,
                     self.forward_samples, loss, None)
        self.loss = None

    def reduction(self, now):
        """Seconds this step waited for DDP's reduction (0 when dtrain_health.watch() times it instead)."""
        launched, done = self.bucket_launch, self.bucket_done
        self.bucket_launch = self.bucket_done = None
        if self.reporter is not None and self.reporter.watched:
            return 0.0
        return max(0.0, (done if done is not None else now) - launched)

    def reported_step(self, now):
        """step_done's way through the reporter (see the class's docstring), for the first step and the steps whose
        numbers the script or a CUDA device adds to."""
        reporter = self.reporter
        if reporter is None:
            if self.health is None:
                self.health = _helper()
                self.reporter = reporter = self.health._reporter
            if reporter is None:   # no health socket: nothing to report to
                self.on = False
                return
            cuda = self.cuda
            if cuda is not None and cuda.is_initialized():
                self.device_index = cuda.current_device()
        if self.first_start is None:
            self.first_start = self.armed_at
        done, loss = self.done, self.loss
        if done is None:
            done = (0, self.first_start, 0.0, 0.0, 0, 0, 0, None, None)
        data, comm = self.data_wait - done[2], self.comm_wait - done[3]
        tokens = self.tokens - done[4] or None
        samples = self.samples - done[5] or self.forward_samples - done[6] or None
        if self.device_events:
            comm += self.device_comm()
        if loss is not None and loss.is_cuda:
            self.device_index = loss.get_device()
        self.loss = None   # (the reporter takes it: a device one at most every DTRAIN_HEALTH_LOSS_EVERY steps)
        counted = reporter.automatic_step(self, data, comm, tokens, samples, loss)
        if counted is None:   # the script counts its steps itself
            return
        self.previous = self.done
        self.done = (done[0] + 1, now, self.data_wait, self.comm_wait, self.tokens, self.samples,
                     self.forward_samples, None, (done[1],) + counted)
        if done[0] == 0:
            reporter.wake.set()   # the first step is news: the launcher's start-up check waits for it

    def last_steps(self):
        """(done, previous), read together from another thread: the last step and the one before it (None before
        the first; (None, None) when steps ended faster than they could be read)."""
        for _ in range(8):
            done, previous = self.done, self.previous
            if done is None or done[8] is not None or (previous is not None and previous[0] == done[0] - 1):
                return done, previous
        return None, None


def _load_hooks():
    """_dtrain_hooks (hooks.c): the wrappers in C, built beside this file for the interpreter dtrain was built with.
    None for any other interpreter (the file's name carries its ABI tag), or where it was not built: the Python
    wrappers below then do the same work (about 2.6-2.9 us a wrapped call in a training loop, against 1.6-1.9).
    Loaded from its file: `import _dtrain_hooks` would take a script's _dtrain_hooks.py before it. The name stays the
    script's: loading an extension puts it in sys.modules, and what was there is put back."""
    import importlib.machinery
    import importlib.util
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = os.path.join(_HERE, "_dtrain_hooks" + suffix)
        if not os.path.isfile(path):
            continue
        theirs = sys.modules.get("_dtrain_hooks")
        try:
            spec = importlib.util.spec_from_file_location(
                "_dtrain_hooks", path, loader=importlib.machinery.ExtensionFileLoader("_dtrain_hooks", path))
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return module
        except Exception:
            return None
        finally:
            if theirs is None:
                sys.modules.pop("_dtrain_hooks", None)
            else:
                sys.modules["_dtrain_hooks"] = theirs
    return None


def _imported_helper():
    """The script's own import of dtrain_health, or None (a file of that name of its own lacks _Reporter)."""
    imported = sys.modules.get("dtrain_health")
    return imported if hasattr(imported, "_Reporter") else None


def _helper():
    """dtrain_health, which the bootstrap reports through: the script's own import of it when it made one (one
    reporter per process), else the file beside this directory, loaded from its path, never a file of that name in
    the script's directory (the script's own business, which the bootstrap must not run). Registered as
    `dtrain_health` when that name leads to this same file, so that a later import of it by the script finds this
    one and its reporter."""
    import importlib.machinery
    import importlib.util
    own = _imported_helper()
    if own is not None:
        return own
    imported = sys.modules.get("dtrain_health")
    path = os.path.join(os.path.dirname(_HERE), "dtrain_health.py")
    spec = importlib.util.spec_from_file_location("dtrain_health", path)
    module = importlib.util.module_from_spec(spec)
    found = importlib.machinery.PathFinder.find_spec("dtrain_health")
    register = imported is None and found is not None and found.origin is not None and \
        os.path.realpath(found.origin) == os.path.realpath(path)
    if register:
        sys.modules["dtrain_health"] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        if register:
            sys.modules.pop("dtrain_health", None)
        raise
    return module


def _over_hooks(hooks):
    """_Instrumentation with the counters in C: its methods over hooks.State, whose members replace _COUNTERS."""
    body = {name: value for name, value in vars(_Instrumentation).items()
            if name not in _Instrumentation.__slots__ and name not in ("__slots__", "__dict__", "__weakref__")}
    body["__slots__"] = tuple(name for name in _Instrumentation.__slots__ if name not in _COUNTERS)
    return type("_Instrumentation", (hooks.State,), body)


_state = None
_hooks = None


def _wrap_step(step):
    state = _state
    if _hooks is not None:
        counted = _hooks.Hook(_hooks.KIND_STEP, step, state)
        functools.update_wrapper(counted, step)
        counted._dtrain_counted = True
        return counted

    def counted_step(*args, **kwargs):
        if not state.on:
            return step(*args, **kwargs)
        if state.in_step:
            return step(*args, **kwargs)
        state.in_step = True
        state.phase = "optimizer"
        if state.bucket_launch is not None or state.bucket_event is not None:
            try:
                state.backward_done()   # (when backward ran through torch.autograd.backward, not Tensor.backward)
            except Exception as error:
                state.fail(error)
        try:
            result = step(*args, **kwargs)
        finally:
            state.in_step = False
        try:
            state.step_done()
        except Exception as error:
            state.fail(error)
        # What follows a step until the next batch or backward() is taken for the next forward.
        state.phase = "forward"
        return result

    functools.update_wrapper(counted_step, step)
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


def _first_tensor(torch, batch):
    """The tensor whose first dimension is `batch`'s samples: the batch itself, its first element, or a dict's
    input_ids or first value; None when there is none to look at."""
    kind = type(batch)
    if kind is torch.Tensor:
        return batch
    if kind is tuple or kind is list or (kind is not dict and isinstance(batch, (tuple, list))):
        batch = batch[0] if batch else None
    elif isinstance(batch, dict):
        batch = batch.get("input_ids", next(iter(batch.values()), None))
    return batch if isinstance(batch, torch.Tensor) else None


def _token_dtypes(torch):
    """The integer dtypes a tensor of token ids can have (a set: one lookup per batch)."""
    return frozenset(getattr(torch, name) for name in ("uint8", "int8", "int16", "int32", "int64")
                     if hasattr(torch, name))


def _instrument_backward(torch):
    tensor = torch.Tensor
    backward = tensor.backward
    state = _state
    if _hooks is not None:
        tensor.backward = functools.update_wrapper(_hooks.Hook(_hooks.KIND_BACKWARD, backward, state), backward)
        return

    def noting_backward(self, *args, **kwargs):
        if not state.on:
            return backward(self, *args, **kwargs)
        if state.first_start is None:
            state.first_start = state.clock()
        state.phase = "backward"
        result = backward(self, *args, **kwargs)
        # After the call, detached (hooks.c's note_loss says why): read later, by the reporter's thread.
        try:
            if state.on and not self.ndim:
                state.loss = self.detach()
        except Exception as error:
            state.fail(error)
        if state.bucket_launch is not None or state.bucket_event is not None:
            try:
                state.backward_done()
            except Exception as error:
                state.fail(error)
        return result

    tensor.backward = functools.update_wrapper(noting_backward, backward)


def _instrument_data_loaders(torch):
    iterator = torch.utils.data.dataloader._BaseDataLoaderIter
    next_item = iterator.__next__
    state = _state

    clock = state.clock
    tensor = torch.Tensor
    token_dtypes = _token_dtypes(torch)
    if _hooks is not None:
        timed = _hooks.Hook(_hooks.KIND_NEXT, next_item, state, first_tensor=functools.partial(_first_tensor, torch),
                            tensor_type=tensor, token_dtypes=token_dtypes)
        timed.__wrapped__ = next_item
        iterator.__next__ = timed
        return

    def timed_next(self):
        if not state.on:
            return next_item(self)
        began = clock()
        state.phase = "data"
        try:
            batch = next_item(self)
        finally:
            state.data_wait += clock() - began
            if state.first_start is None:
                state.first_start = began
        state.phase = "forward"
        # Samples: the first dimension of the batch's first tensor; token ids: its elements, when it holds
        # integers, batch x sequence.
        try:
            first = batch if type(batch) is tensor else _first_tensor(torch, batch)
            if first is not None:
                shape = first.shape
                if shape:
                    state.samples += shape[0]
                    if len(shape) == 2 and first.dtype in token_dtypes:
                        state.tokens += shape[0] * shape[1]
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
    clock = state.clock
    cuda = state.cuda
    try:
        position = list(inspect.signature(fn).parameters).index("async_op")
    except ValueError:
        position = sys.maxsize   # (never async)

    phase = "torch.distributed." + fn.__name__
    if _hooks is not None and cuda is None:
        # (A torch with CUDA gets the Python wrapper below: its CUDA events.)
        return functools.update_wrapper(_hooks.Hook(_hooks.KIND_COLLECTIVE, fn, state, phase=phase,
                                                    async_position=position), fn)

    def on_device(args):
        first = args[0] if args else None
        if isinstance(first, (list, tuple)):
            first = first[0] if first else None
        return getattr(first, "is_cuda", False)

    def timed_collective(*args, **kwargs):
        if not state.on or (kwargs and kwargs.get("async_op")) or (len(args) > position and args[position]):
            return fn(*args, **kwargs)   # off, or async_op=True: it returns at once and is not counted
        if state.in_collective:
            return fn(*args, **kwargs)
        previous = state.phase
        state.phase = phase
        start = None
        # No tensor is on a CUDA device before torch.cuda initialised (its is_initialized(), read without a call).
        if cuda is not None and getattr(cuda, "_initialized", True):
            try:
                # On a GPU the call returns once the collective is queued: its time is read from CUDA events later.
                if on_device(args):
                    start = cuda.Event(enable_timing=True)
                    start.record()
            except Exception as error:
                state.fail(error)
                return fn(*args, **kwargs)
        state.in_collective = True
        began = clock()
        try:
            return fn(*args, **kwargs)
        finally:
            state.in_collective = False
            if start is None:
                state.comm_wait += clock() - began
            else:
                try:
                    end = cuda.Event(enable_timing=True)
                    end.record()
                    state.device_events.append((start, end))
                except Exception as error:
                    state.fail(error)
            state.phase = previous

    return functools.update_wrapper(timed_collective, fn)


def _wrap_init_process_group(fn):
    """init_process_group holds the interpreter lock while it waits for late peers (torch 1.13: in the TCPStore's
    connect and the store barrier, the whole wait), so dtrain_health's sender cannot heartbeat through it. Once the
    script reports (dtrain_health imported: its reporter runs), the call goes through the reporter's wait_quietly(),
    whose reports tell the launcher not to judge the rank by its heartbeat meanwhile. Before that nothing is sent and
    nothing is judged, and the call is only passed through."""
    state = _state

    def init_process_group(*args, **kwargs):
        helper = state.health if state.health is not None else _imported_helper()
        reporter = getattr(helper, "_reporter", None)
        if reporter is None or not state.on:
            return fn(*args, **kwargs)
        return reporter.wait_quietly("torch.distributed.init_process_group", fn, *args, **kwargs)

    return functools.update_wrapper(init_process_group, fn)


def _instrument_collectives(torch):
    dist = torch.distributed
    if not dist.is_available():
        return
    c10d = dist.distributed_c10d

    def replace(name, wrap):
        fn = getattr(c10d, name, None)
        if not callable(fn):
            return
        wrapped = wrap(fn)
        setattr(c10d, name, wrapped)
        # torch.distributed re-exports them: the script calls that name, torch's own modules either.
        if getattr(dist, name, None) is fn:
            setattr(dist, name, wrapped)

    replace("init_process_group", _wrap_init_process_group)
    for name in _COLLECTIVES:
        replace(name, _wrap_collective)


def _instrument_ddp(torch):
    """Times DDP's gradient reduction without touching it: at a DDP model's first forward, a hook on each of its
    parameters notes when backward produced that parameter's gradient. The last one is when DDP launched its last
    bucket, and the step waited from there to the end of backward(), where DDP waits for every bucket (on a GPU, from
    a CUDA event re-recorded at each hook to one at the end of backward(), read once both have passed). DDP's own
    reduction, and any communication hook the script registers, run as they would without dtrain (a Python hook of
    dtrain's would put Python callbacks on the backend's threads)."""
    ddp = torch.nn.parallel.DistributedDataParallel
    forward = ddp.forward
    state = _state

    clock = state.clock

    # One of these runs for every parameter at every backward(): the CPU one is two attribute writes.
    def gradient_ready(grad):
        state.bucket_launch = clock()
        state.bucket_done = None

    if _hooks is not None:
        gradient_ready = state.gradient_ready   # (the same, in C)

    def gradient_ready_on_device(grad):
        if state.on:
            try:
                if state.bucket_event is None:
                    state.bucket_event = state.cuda.Event(enable_timing=True)
                state.bucket_event.record()
            except Exception as error:
                state.fail(error)

    def forward_timed(self, *args, **kwargs):
        if state.first_start is None:
            state.first_start = state.clock()
        if state.on:
            try:
                if args:
                    first = _first_tensor(torch, args[0])
                    if first is not None and first.ndim:
                        state.forward_samples += first.shape[0]
                if "_dtrain_timed" not in self.__dict__:
                    self.__dict__["_dtrain_timed"] = True
                    for parameter in self.module.parameters():
                        if parameter.requires_grad:
                            parameter.register_hook(gradient_ready_on_device if state.cuda is not None and
                                                    parameter.is_cuda else gradient_ready)
            except Exception as error:
                state.fail(error)
        return forward(self, *args, **kwargs)

    ddp.forward = functools.update_wrapper(forward_timed, forward)


# What each part measures, for the line that says what a torch without it leaves unmeasured.
_PARTS = ((_instrument_optimizers, "torch.optim.Optimizer", "steps"),
          (_instrument_backward, "torch.Tensor.backward", "the loss and the backward phase"),
          (_instrument_data_loaders, "torch.utils.data.dataloader._BaseDataLoaderIter.__next__",
           "data wait, tokens/s and samples/s"),
          (_instrument_collectives, "torch.distributed", "waits in blocking collectives"),
          (_instrument_ddp, "torch.nn.parallel.DistributedDataParallel",
           "DDP's gradient reduction (exposed communication)"))


def _arm(torch):
    global _state, _hooks
    _hooks = _load_hooks()
    _state = (_over_hooks(_hooks) if _hooks is not None else _Instrumentation)()
    os.register_at_fork(after_in_child=_forked)
    # A torch built without CUDA (or ROCm, which torch.cuda also serves) has no device to measure: its wrappers then
    # skip every device check.
    version = getattr(torch, "version", None)
    if getattr(version, "cuda", None) or getattr(version, "hip", None):
        _state.cuda = getattr(torch, "cuda", None)
    missing = []
    for part, hook, what in _PARTS:
        try:
            part(torch)
        except (AttributeError, ImportError):
            missing.append("%s (no %s)" % (what, hook))
        except Exception as error:
            _state.fail(error)
            return
    if missing and os.environ.get("RANK", "0") == "0":
        try:
            sys.stderr.write("dtrain: torch %s lacks what the PyTorch instrumentation hooks into; not measured: %s. "
                             "dtrain_health's timed(), step() and report() measure these by hand.\n"
                             % (getattr(torch, "__version__", "?"), "; ".join(missing)))
        except Exception:
            pass


def _forked():
    """A child forked from the worker (a DataLoader worker, os.fork) is not the worker: its wrappers only call
    through."""
    if _state is not None:
        _state.on = False


def _arm_quietly(torch):
    """_arm, whose errors never reach the program (see the module's docstring)."""
    try:
        _arm(torch)
    except Exception as error:
        (_state if _state is not None else _Instrumentation()).fail(error)


def _speaks_for_rank():
    """Whether this process is the worker the agent started: dtrain_health's rule (its _speaks_for_rank; a malformed
    DTRAIN_WORKER_PID counts as unset, which the helper says when it loads)."""
    text = os.environ.get("DTRAIN_WORKER_PID", "")
    return not text.isdigit() or int(text) == os.getpid()


class _TorchFinder:
    """Finds nothing itself: on `import torch` it has the other finders find torch, and arms once torch ran."""

    def __init__(self):
        self.pid = os.getpid()

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        if os.getpid() != self.pid:   # a forked child of the worker, which had not imported torch yet
            self.leave()
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
                _arm_quietly(module)

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


if os.environ.get("DTRAIN_HEALTH_SOCKET") and "torch" not in sys.modules and _speaks_for_rank():
    sys.meta_path.insert(0, _TorchFinder())
_load_theirs()
