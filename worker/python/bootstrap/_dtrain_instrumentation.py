"""The PyTorch bootstrap's state (sitecustomize.py): what one armed process measures, and the switch that turns it all
off.

_Instrumentation holds the running totals that the wrappers (_dtrain_loop_wrappers.py, _dtrain_dist_wrappers.py, or
their C versions in _dtrain_hooks) add to, and everything that runs once a step or less: the step's bookkeeping, DDP's
reduction, the CUDA events and memory, and the first step's way into dtrain_health's reporter. With _dtrain_hooks,
over_hooks makes the same class over its C State, whose members are the counters.

sitecustomize loads this file from its path (never through sys.path) when torch is imported, and gives it say_off and
helper below once it ran.
"""

import time

# Given by sitecustomize when it loads this file: the one line that says the instrumentation is off after an error of
# its own (say_off(error)), and helper(), dtrain_health as the bootstrap finds it (its _helper).
say_off = None
helper = None

# What the wrappers write: with _dtrain_hooks, C members of its State, the base of over_hooks's class.
# The steps kept for a report's points: hooks.h's HISTORY_STEPS, the agent's bound on a report's points.
HISTORY_STEPS = 64

_COUNTERS = ("on", "in_step", "in_collective", "in_backward", "data_wait", "comm_wait", "tokens", "samples",
             "forward_samples", "forward_tokens", "phase", "first_start", "loss", "scaled", "bucket_launch",
             "bucket_done", "bucket_event", "done", "previous", "reporter", "device_events", "history")


def step_counts(totals, before):
    """A step's (tokens, samples), None where not counted, from the running totals (tokens, samples, forward_samples,
    forward_tokens) at its end and `before` it: the DataLoader's batches when it handed out any this step, else the
    wrapped models' forward inputs; never both, so a batch that a DataLoader counted and a DDP model took is counted
    once."""
    samples = totals[1] - before[1]
    if samples:
        return totals[0] - before[0] or None, samples
    return totals[3] - before[3] or None, totals[2] - before[2] or None


class _Instrumentation:
    """What one armed process measures, and the switch that turns it all off.

    The training thread only adds to running totals, and at each optimizer step replaces `done` with one tuple of
    them (keeping the one before as `previous`); dtrain_health's sender thread turns the last two into the step's
    report (times, rates, the loss's value) when it sends. A step pays for a few attribute reads and writes, not
    for a report. The first step, the steps of a script that also reports by hand, and steps with CUDA
    measurements go through the reporter on the training thread as well (reported_step)."""

    __slots__ = _COUNTERS + ("clock", "armed_at", "health", "cuda", "device_index", "device_total", "model")

    def __init__(self):
        self.on = True
        self.clock = time.perf_counter
        # Re-entry guards: a step or a collective made of others is counted once. They are the process's, not each
        # thread's (a plain attribute costs a fraction of a threading.local's): a step or a collective that another
        # thread makes while one runs is not counted (the training thread is the one measured).
        self.in_step = False
        self.in_collective = False
        self.in_backward = False         # (a tensor subclass's __torch_function__ calls backward() again inside it)
        self.armed_at = self.clock()
        self.first_start = None          # when the first step began: its first batch, DDP forward or backward()
        # Running totals since the instrumentation armed:
        self.data_wait = 0.0             # seconds inside DataLoader iterators
        self.comm_wait = 0.0             # seconds in blocking collectives and DDP's reduction
        self.tokens = 0                  # token ids the DataLoader handed out
        self.samples = 0                 # batch elements it handed out
        self.forward_samples = 0         # batch elements DDP/FSDP models' forward took (when no DataLoader is used)
        self.forward_tokens = 0          # token ids they took (an integer tensor of 2 or more dimensions)
        # The step's loss: the sum of the 0-dim tensors backward() ran from since the last step, detached (with
        # loss / K accumulation, the mean over its K micro-batches: what the gradient was computed from); None
        # after a step. Summed as tensors (one add per micro-batch after the first): the step reads no value.
        self.loss = None
        # (a weak reference to the tensor a GradScaler's scale() returned, the unscaled loss it was given, detached):
        # backward() from that tensor adds the unscaled one, the loss the script sees (_dtrain_loop_wrappers.py).
        self.scaled = None
        self.bucket_launch = None        # DDP's buckets this step: the last launch, and when backward() returned
        self.bucket_done = None          # (DDP waits for every bucket before backward() returns)
        self.bucket_event = None         # CUDA: an event at the last launch
        self.device_events = []          # CUDA: (start, end) event pairs of collectives and buckets, not read yet
        self.phase = ""                  # what the training thread does now; reported once a step was counted,
                                         # unless the script names its own phases or counts its own steps
        # The last step counted: (steps, ended, data_wait, comm_wait, tokens, samples, forward_samples,
        # forward_tokens, loss, exact), the totals as they were when it ended; exact is None, or the step's own (began, data s, comm s,
        # tokens, samples) where the reporter adjusted them. Replaced whole; `previous` is the one before.
        self.done = None
        self.previous = None
        # Every `done` since dtrain_health's sender last took them (at most HISTORY_STEPS; past that the newest
        # replaces the last): the per-step points of its next report (_dtrain_health_report.py, _points), so a job
        # shorter than a few report intervals still draws a curve. One list append a step.
        self.history = []
        self.health = None               # the dtrain_health module, once the first step is counted
        self.reporter = None             # its reporter
        self.cuda = None                 # torch.cuda (device paths run only on CUDA tensors)
        self.device_index = None         # the CUDA device the training thread was seen using
        self.device_total = None
        # The wrapped models' size, replaced whole at the first forward of each (model_params, its 6N FLOPs per token,
        # device_name): sent with every report once a step was counted (_dtrain_dist_wrappers.py's count_model).
        self.model = {}

    # (For dtrain_health's sender, which has the instance: _dtrain_health_report.py's _fold.)
    step_counts = staticmethod(step_counts)

    def fail(self, error):
        """Turns the instrumentation off in this process and says so, once."""
        if not self.on:
            return
        self.on = False
        say_off(error)

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
                     self.forward_samples, self.forward_tokens, loss, None)
        self.loss = None
        self.remember(self.done)

    def remember(self, step):
        """`step` (a `done`) joins the history the reporter takes per-step points from (hooks_calls.c's remember)."""
        history = self.history
        if len(history) < HISTORY_STEPS:
            history.append(step)
        else:
            history[-1] = step

    def take_history(self):
        """The steps counted since the last call, oldest first (the sender's thread; the training thread appends to
        the list it finds, so one swap loses none)."""
        history, self.history = self.history, []
        return history

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
                self.health = helper()
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
            done = (0, self.first_start, 0.0, 0.0, 0, 0, 0, 0, None, None)
        data, comm = self.data_wait - done[2], self.comm_wait - done[3]
        tokens, samples = step_counts((self.tokens, self.samples, self.forward_samples, self.forward_tokens),
                                      done[4:8])
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
                     self.forward_samples, self.forward_tokens, None, (done[1],) + counted)
        self.remember(self.done)
        if done[0] == 0:
            reporter.wake.set()   # the first step is news: the launcher's start-up check waits for it

    def last_steps(self):
        """(done, previous), read together from another thread: the last step and the one before it (None before
        the first; (None, None) when steps ended faster than they could be read)."""
        for _ in range(8):
            done, previous = self.done, self.previous
            if done is None or done[9] is not None or (previous is not None and previous[0] == done[0] - 1):
                return done, previous
        return None, None


def over_hooks(hooks):
    """_Instrumentation with the counters in C: its methods over hooks.State, whose members replace _COUNTERS."""
    body = {name: value for name, value in vars(_Instrumentation).items()
            if name not in _Instrumentation.__slots__ and name not in ("__slots__", "__dict__", "__weakref__")}
    body["__slots__"] = tuple(name for name in _Instrumentation.__slots__ if name not in _COUNTERS)
    return type("_Instrumentation", (hooks.State,), body)

