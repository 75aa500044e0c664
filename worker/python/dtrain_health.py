"""Health reports from any PyTorch script to dtrain's agent, standard library only.

    import dtrain_health as health
    for batch in health.timed(loader):   # time spent inside next() is data wait
        with health.step():              # one training step; the counter advances when the block exits
            ...
    health.report(loss=loss, tokens=n)   # optional: loss (a float or a tensor, read lazily), tokens, samples
    health.phase("allreduce")            # optional: what the script is doing now
    health.watch(ddp_model)              # optional: times DDP's bucket allreduces (a communication hook)

Every worker dtrain starts has this module on PYTHONPATH. A PyTorch script that does not import it is still seen
when health.instrument is auto: the bootstrap (bootstrap/sitecustomize.py) reports through this module, counting
optimizer steps; a script that uses step() or timed() itself is counted by them alone. Outside dtrain
(DTRAIN_HEALTH_SOCKET unset), and in any process but the one that speaks for the rank (below), every call does
nothing: timed() returns its argument and step() a shared do-nothing context.

Transport: one JSON object per datagram on the Unix socket DTRAIN_HEALTH_SOCKET (the agent's, in a directory only
this user can enter), carrying RANK, DTRAIN_JOB_TOKEN and DTRAIN_REPORT_TOKEN as a gRPC report does; the agent
refuses a datagram whose tokens are not this rank's or whose values cannot be real. The training thread never
touches the socket: step() keeps one snapshot of the last step (a step the bootstrap counts keeps only running
totals, which the sending thread turns into the step's times and rates), and a daemon thread sends the latest state at
import, after the first step, and every DTRAIN_HEALTH_INTERVAL_MS (a heartbeat: a long step is not a dead worker).
Sends never block (a full socket drops the datagram; the next one carries the same state). The last state is sent
once more when the process exits normally or by an exception (atexit), or on SIGTERM (how dtrain stops a worker), so a
short job's last step is not lost. At exit the sending thread is stopped first (joined, for at most 2 s): the
interpreter would otherwise end it wherever it next takes the GIL, and inside torch code that released it (reading a
loss tensor) that unwinds through C++ and aborts the process ("terminate called without an active exception"). For
SIGTERM, when the script has no handler of its own at import, the module installs one that sends and then dies of
SIGTERM as before; a thread woken by the signal (signal.set_wakeup_fd, when nothing else holds it) does the same while
the main thread is blocked in native code (a collective), so stopping a rank takes no longer than it did. A handler the
script installs later replaces it, and then the script decides.

One process speaks for a rank: the worker process its agent started, whose pid the agent puts in DTRAIN_WORKER_PID.
Every other process that imports this module with the worker's environment (a DataLoader's spawned workers, a
`subprocess.run([sys.executable, ...])`, torch.multiprocessing's children) is silent, as outside dtrain: no reporter,
no thread, no socket, no signal handler, no faulthandler; otherwise their step-0 and `exiting` reports would be taken
for the rank's (a hang hidden behind them, a healthy job failed as stuck in teardown). Without DTRAIN_WORKER_PID (an
older agent, another launcher) every such process reports, as before. A forked child (os.fork, a DataLoader's fork
workers) of the reporting process is silent too: every call does nothing there, its SIGTERM and dump signal are
back to what they were, and the reporter it inherited never sends.

Environment (malformed values are said once on stderr and the default is used: a report setting never stops a job):
    DTRAIN_WORKER_PID           the pid of the worker process the agent started (set by the agent; see above)
    DTRAIN_HEALTH_INTERVAL_MS   the resend interval (set by the agent; default 1000)
    DTRAIN_HEALTH_LOSS_EVERY    a loss on a device is read at most every this many steps (default 10), and only once
                                its value exists: no host synchronisation is added (a CPU loss is read at every step)

A step's times, in milliseconds of wall time:
    data_wait_ms      inside next() of timed() since the previous step ended
    step_ms           data_wait_ms plus the time inside the step() block
    comm_exposed_ms   with watch(): communication the step still waited for once backward had produced its last
                      gradients (from the launch of the step's last bucket allreduce to the completion of the last
                      one); the allreduces that ran behind backward's compute are hidden and not counted. Steps the
                      bootstrap counts add the wall time of blocking torch.distributed collectives
    compute_ms        step_ms - data_wait_ms - comm_exposed_ms

A call that holds the interpreter lock while it waits stops the sending thread too, and a rank silent longer than
health.heartbeat_timeout_s fails the job as a stopped process. torch 1.13's init_process_group is one: it holds the
lock for as long as it waits for its peers (measured: a peer 6 s late, no other thread of the waiting rank ran for
6 s). With health.instrument: auto (the default) dtrain's PyTorch bootstrap runs it through _Reporter.wait_quietly(),
whose report says `quiet`, and the launcher then judges the rank by the start-up and hang checks alone until it
returns. With health.instrument: off nothing does; import this module after init_process_group there.

Stacks: when DTRAIN_STACKS_FILE is set, faulthandler writes every thread's Python stack to it (appending) on
SIGUSR2 (SIGUSR1 when the script handles SIGUSR2 itself; none when it handles both), and the reports announce that
signal (dump_signal), so the agent asks for the Python stacks of a hung rank before it stops the round.
"""

import atexit
import faulthandler
import json
import math
import os
import signal
import socket
import sys
import threading
import time

__all__ = ["timed", "step", "report", "phase", "watch", "enabled"]

# How often the latest state is resent when DTRAIN_HEALTH_INTERVAL_MS is not set: the longest interval dtrain gives.
_DEFAULT_INTERVAL_S = 1.0
_EXIT_JOIN_S = 2.0     # how long exit waits for the sender's thread to end (it never blocks: a send or a loss read)
# The agent cuts a phase at 128 bytes; sending more only costs bytes.
_MAX_PHASE_CHARS = 128
# A loss on a device is read at most every this many steps when DTRAIN_HEALTH_LOSS_EVERY is not set.
_DEFAULT_LOSS_EVERY = 10


def _positive_int(env, name, default):
    """`name` from `env` as a positive integer; `default` when unset, or when malformed (said on stderr)."""
    text = env.get(name, "")
    if not text:
        return default
    if text.isdigit() and int(text) > 0:
        return int(text)
    try:
        sys.stderr.write("dtrain_health: %s=%r is not a positive integer; using %d\n" % (name, text, default))
    except Exception:
        pass
    return default


def _speaks_for_rank(env):
    """Whether this process is the worker its agent started (see the module's docstring): DTRAIN_WORKER_PID is this
    pid, or unset (every process reports, as before the variable); a malformed one is said and taken as unset."""
    text = env.get("DTRAIN_WORKER_PID", "")
    if not text:
        return True
    if text.isdigit():
        return int(text) == os.getpid()
    try:
        sys.stderr.write("dtrain_health: DTRAIN_WORKER_PID=%r is not a pid; this process reports for rank %s\n"
                         % (text, env.get("RANK", "0")))
    except Exception:
        pass
    return True


class _Nothing:
    """step() outside dtrain: enters and exits for free."""

    __slots__ = ()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


_NOTHING = _Nothing()


class _Reporter:
    """The state of this process's reports and the thread that sends them."""

    def __init__(self, path, env):
        self.path = path
        self.head = {"rank": int(env.get("RANK", "0")), "token": env.get("DTRAIN_JOB_TOKEN", ""),
                     "report_token": env.get("DTRAIN_REPORT_TOKEN", "")}
        self.interval = _positive_int(env, "DTRAIN_HEALTH_INTERVAL_MS", int(_DEFAULT_INTERVAL_S * 1000)) / 1000.0
        self.loss_every = _positive_int(env, "DTRAIN_HEALTH_LOSS_EVERY", _DEFAULT_LOSS_EVERY)
        self.page = os.sysconf("SC_PAGE_SIZE")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.setblocking(False)
        self.dropped = 0                 # datagrams the socket did not take (the agent gone, its queue full)
        self.step = 0                    # the step number reported: steps completed so far by this process
        self.steps_done = 0
        self.data_wait = 0.0             # seconds inside next() of timed() since the last step ended
        self.comm_first_launch = None    # this step's bucket allreduces (watch)
        self.comm_last_launch = 0.0
        self.comm_last_done = 0.0
        self.explicit_steps = False      # the script called step(): the bootstrap counts no steps
        self.explicit_data = False       # the script called timed(): the bootstrap adds no data wait
        self.explicit_phase = False      # the script called phase(): the bootstrap names no phase
        self.watched = False             # watch() times DDP's reduction: the bootstrap does not time it again
        self.by_hand = False             # the script called step(), timed(), report() or watch(): the bootstrap's
                                         # steps take its numbers in (automatic_step, on the training thread)
        self.auto = None                 # the bootstrap's measurements (sitecustomize._Instrumentation), once it
                                         # counted a step: its steps are folded in here when a report is built
        self.auto_steps = 0              # steps the bootstrap counted, as of the last one folded in
        self.folded = None               # the bootstrap's last step folded in (its `done`)
        self.tokens = None
        self.samples = None
        self.device = {}                 # device memory keys, replaced whole by whoever measures them
        self.loss = None                 # the last loss read (a float)
        self.pending_loss = None         # (tensor, ready event or None): a device loss not read yet
        self.loss_taken = None           # steps_done when a device loss was last captured
        self.phase = ""
        self.quiet = False               # inside wait_quietly(): reports say so
        self.last = {}                   # the last step's numbers, replaced whole (the sender reads it unlocked)
        self.dump_signal = 0
        self.stacks = None
        self.wake = threading.Event()
        self.stopping = False            # set at exit: the sender's thread ends (_last_send)
        self.pid = os.getpid()           # the process that speaks for the rank: a forked child never sends
        self.wakeup_fd = None            # the SIGTERM watcher's pipe (its write end), made signal's wakeup fd
        self._register_dump(env.get("DTRAIN_STACKS_FILE", ""))
        self.thread = threading.Thread(target=self._run, name="dtrain-health", daemon=True)
        self.thread.start()
        atexit.register(self._last_send)
        self._catch_term()
        os.register_at_fork(after_in_child=self._forked)

    def _forked(self):
        """In a child forked from this process (a DataLoader worker): the module does nothing from now on, and the
        signals are the child's own again, as without this module."""
        global _reporter
        _reporter = None
        try:
            if self.wakeup_fd is not None:
                previous = signal.set_wakeup_fd(-1)
                if previous != self.wakeup_fd:
                    signal.set_wakeup_fd(previous)   # the script's own by now: left as it was
            if signal.getsignal(signal.SIGTERM) == self._on_term:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
            if self.dump_signal:
                faulthandler.unregister(self.dump_signal)
        except (OSError, ValueError, RuntimeError):
            pass

    def _last_send(self):
        # A child forked from this process (a DataLoader worker) inherits the handler, not the rank.
        if os.getpid() == self.pid:
            self.stopping = True   # the sender's thread ends before the interpreter does (the module's docstring)
            self.wake.set()
            if self.thread is not threading.current_thread():
                self.thread.join(_EXIT_JOIN_S)
            self.send(final=True)

    def _catch_term(self):
        """SIGTERM sends the last state first (see the module's docstring)."""
        if threading.current_thread() is not threading.main_thread() or \
                signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, None):
            return
        try:
            signal.signal(signal.SIGTERM, self._on_term)
            read_end, write_end = os.pipe()
        except (OSError, ValueError, RuntimeError):
            return
        # The thread only when the wakeup fd is free (asyncio takes it, for one); the handler alone works then too,
        # once the main thread runs Python again.
        os.set_blocking(write_end, False)
        try:
            previous = signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
        except (OSError, ValueError):
            previous = None
        if previous != -1:
            if previous is not None:
                signal.set_wakeup_fd(previous)
            os.close(read_end)
            os.close(write_end)
            return
        # (A forked child must not wake this process's thread with its own signals: _forked.)
        self.wakeup_fd = write_end
        threading.Thread(target=self._watch_term, args=(read_end,), name="dtrain-health-term", daemon=True).start()

    def _on_term(self, signum, frame):
        if os.getpid() == self.pid:
            self.send(final=True)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)

    def _watch_term(self, read_end):
        while True:
            try:
                data = os.read(read_end, 64)
            except InterruptedError:
                continue
            except OSError:
                return
            if not data:
                return
            if signal.SIGTERM not in data or signal.getsignal(signal.SIGTERM) != self._on_term:
                continue   # another signal, or the script handles SIGTERM itself now
            self.send(final=True)
            try:
                import ctypes
                libc = ctypes.CDLL(None, use_errno=True)
                libc.signal.argtypes = (ctypes.c_int, ctypes.c_void_p)
                libc.signal.restype = ctypes.c_void_p
                libc.signal(int(signal.SIGTERM), None)   # SIG_DFL, from this thread (signal.signal cannot)
                os.kill(os.getpid(), signal.SIGTERM)
            except Exception:
                os.kill(os.getpid(), signal.SIGKILL)
            return

    def _register_dump(self, path):
        if not path:
            return
        for candidate in (signal.SIGUSR2, signal.SIGUSR1):
            if signal.getsignal(candidate) in (signal.SIG_DFL, None):
                try:
                    self.stacks = open(path, "a")
                    faulthandler.register(candidate, file=self.stacks, all_threads=True)
                except (OSError, RuntimeError, ValueError):
                    return
                self.dump_signal = int(candidate)
                return

    def message(self, final=False):
        body = dict(self.head)
        auto = self.auto
        phase = self.phase
        if auto is not None and auto.on:
            try:
                self._fold(auto)
                if not self.explicit_phase and not self.explicit_steps:
                    phase = auto.phase
                auto.device_memory(self)
            except Exception as error:   # the bootstrap's error: it turns itself off, reports go on
                auto.fail(error)
        body.update(self.last)
        body["step"] = self.step + self.auto_steps
        body["steps_done"] = self.steps_done + self.auto_steps
        loss = self._read_loss()
        if loss is not None:
            body["loss"] = loss
        if phase:
            body["phase"] = phase
        body.update(self.device)
        if self.dump_signal:
            body["dump_signal"] = self.dump_signal
        try:
            with open("/proc/self/statm", "rb") as f:
                body["rss_bytes"] = int(f.read().split()[1]) * self.page
        except (OSError, IndexError, ValueError):
            pass
        if final:   # the process is exiting: the launcher stops its health checks and judges its exit alone
            body["exiting"] = True
        elif self.quiet:   # the sender cannot run until a call returns: no heartbeat check meanwhile
            body["quiet"] = True
        return json.dumps(body, separators=(",", ":")).encode()

    def _read_loss(self):
        pending = self.pending_loss
        if pending is not None:
            tensor, ready = pending
            # A device loss is read once its value exists (its event passed), never waited for.
            if ready is None or ready.query():
                self.pending_loss = None
                try:
                    self._set_loss(float(tensor.item()))
                except Exception:   # a tensor that cannot be read is a loss not reported, never a dead sender
                    pass
        return self.loss

    def _set_loss(self, value):
        if math.isfinite(value):   # a diverged loss is the script's error to raise, not a value to report
            self.loss = value

    def send(self, final=False):
        if os.getpid() != self.pid:
            return   # a child forked by other means than os.fork (its at-fork handlers did not run)
        try:
            self.sock.sendto(self.message(final), self.path)
        except OSError:
            self.dropped += 1

    def wait_quietly(self, name, call, *args, **kwargs):
        """Returns call(*args, **kwargs), a call that holds the interpreter lock while it waits, so that the sender's
        thread cannot resend a heartbeat until it returns (torch 1.13's init_process_group, for as long as it waits for
        late peers). A report that says `quiet` goes first, from this thread, and the launcher does not judge the rank
        by its heartbeat until the next report without it, sent from here once the call returns or raises. The phase
        is `name` meanwhile, unless the script names its own phases."""
        previous = self.phase
        if not self.explicit_phase:
            self.phase = name
        self.quiet = True
        self.send()
        try:
            return call(*args, **kwargs)
        finally:
            self.quiet = False
            if not self.explicit_phase:
                self.phase = previous
            self.send()

    def _run(self):
        while not self.stopping:
            self.send()
            self.wake.wait(self.interval)
            self.wake.clear()

    def take_loss(self, loss):
        if isinstance(loss, (int, float)):
            self._set_loss(float(loss))
            return
        device = getattr(getattr(loss, "device", None), "type", "cpu")
        if device == "cpu":
            # Read by the sender (its value exists already): a step pays no item(). Detached: the loss's graph
            # (all of it, after backward(retain_graph=True)) is the script's to keep or free, not the reporter's.
            self.pending_loss = (loss.detach(), None)
            return
        steps = self.steps_done + (self.auto.done[0] if self.auto is not None and self.auto.done else 0)
        if self.loss_taken is not None and steps - self.loss_taken < self.loss_every:
            return
        self.loss_taken = steps
        ready = None
        if device == "cuda":
            import torch
            ready = torch.cuda.Event()
            ready.record()
        self.pending_loss = (loss.detach(), ready)

    def _watched_comm(self):
        """Seconds of watch()'s bucket allreduces the step still waited for (0 without watch())."""
        if self.comm_first_launch is None:
            return 0.0
        self.comm_first_launch = None
        return max(0.0, self.comm_last_done - self.comm_last_launch)

    def end_step(self, block_s):
        self.last = _step_times(block_s + self.data_wait, self.data_wait, self._watched_comm(), self.tokens,
                                self.samples)
        self.tokens = self.samples = None
        self.data_wait = 0.0
        self.steps_done += 1
        self.step += 1
        if self.steps_done == 1:
            self.wake.set()   # the first step is news: the launcher's start-up check waits for it

    def automatic_step(self, source, data_s, comm_s, tokens, samples, loss):
        """One optimizer step counted by the bootstrap (`source`, its measurements), on the training thread, when it
        is the first or the script reports by hand: `data_s` inside DataLoader iterators since the previous step,
        `comm_s` in blocking collectives and DDP's reduction, `tokens` and `samples` (None: not counted) its
        batches held, `loss` the last backward()'s tensor (None: no backward). Returns (data_s, comm_s, tokens,
        samples) with the script's own numbers in: timed()'s data wait instead of the bootstrap's, watch()'s
        timing added, a count given to report() instead of the bootstrap's; the loss is taken here. None when the
        script counts steps itself (the step is not the bootstrap's to count)."""
        self.auto = source
        if self.explicit_steps:
            return None
        data_s = self.data_wait + (0.0 if self.explicit_data else data_s)
        self.data_wait = 0.0
        comm_s += self._watched_comm()
        if self.tokens is not None:   # a count the script reported itself wins
            tokens = self.tokens
        if self.samples is not None:
            samples = self.samples
        self.tokens = self.samples = None
        if loss is not None:
            self.take_loss(loss)
        return data_s, comm_s, tokens, samples

    def _fold(self, auto):
        """Makes the bootstrap's last counted step the reported one: its times, rates and loss are computed here, on
        the sender's thread, from the running totals the training thread kept at that step and the one before."""
        done, previous = auto.last_steps()
        if done is None or done is self.folded or self.explicit_steps:
            return
        self.folded = done
        steps, ended, data_total, comm_total, tokens_total, samples_total, forward_total, loss, exact = done
        if exact is not None:
            began, data, comm, tokens, samples = exact
        else:
            began = previous[1]
            data, comm = data_total - previous[2], comm_total - previous[3]
            tokens = tokens_total - previous[4] or None
            samples = samples_total - previous[5] or forward_total - previous[6] or None
        self.last = _step_times(max(ended - began, data), data, comm, tokens, samples)
        if loss is not None:
            self.pending_loss = (loss, None)   # a detached CPU tensor (the bootstrap takes a device loss itself)
        self.auto_steps = steps


def _step_times(step_s, data_s, comm_s, tokens, samples):
    """A step's report fields (see the module's docstring) from its seconds and counts (None: not counted)."""
    last = {"step_ms": step_s * 1e3, "data_wait_ms": data_s * 1e3, "comm_exposed_ms": comm_s * 1e3,
            "compute_ms": max(0.0, step_s - data_s - comm_s) * 1e3}
    if tokens is not None and step_s > 0:
        last["tokens_per_s"] = tokens / step_s
    if samples is not None and step_s > 0:
        last["samples_per_s"] = samples / step_s
    return last


class _Step:
    __slots__ = ("reporter", "began")

    def __init__(self, reporter):
        self.reporter = reporter

    def __enter__(self):
        self.began = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.reporter.end_step(time.perf_counter() - self.began)
        return False


def _timed(reporter, iterable):
    clock = time.perf_counter
    it = iter(iterable)
    while True:
        began = clock()
        try:
            item = next(it)
        except StopIteration:
            return
        reporter.data_wait += clock() - began
        yield item


def _start():
    path = os.environ.get("DTRAIN_HEALTH_SOCKET", "")
    if not path or not _speaks_for_rank(os.environ):
        return None
    try:
        return _Reporter(path, os.environ)
    except (OSError, ValueError):
        return None


_reporter = _start()


def enabled():
    """Whether reports go anywhere (the script runs under dtrain, in the process that speaks for its rank)."""
    return _reporter is not None


def timed(iterable):
    """Iterates `iterable`, counting the time inside each next() as the step's data wait."""
    if _reporter is None:
        return iterable
    _reporter.explicit_data = _reporter.by_hand = True
    return _timed(_reporter, iterable)


def step():
    """A context for one training step: the step counter advances, and its times are kept, when it exits."""
    if _reporter is None:
        return _NOTHING
    _reporter.explicit_steps = _reporter.by_hand = True
    return _Step(_reporter)


def report(loss=None, tokens=None, samples=None):
    """The step's loss (a number, or a tensor read only once its value exists, at most every
    DTRAIN_HEALTH_LOSS_EVERY steps when it lives on a device; held detached, without its autograd graph), and the
    tokens and samples it processed (for tokens/s and samples/s)."""
    if _reporter is None:
        return
    _reporter.by_hand = True
    if loss is not None:
        _reporter.take_loss(loss)
    if tokens is not None:
        _reporter.tokens = tokens
    if samples is not None:
        _reporter.samples = samples


def phase(name):
    """What the script does now ("allreduce", "checkpoint"): a hung rank's last phase says where it hangs."""
    if _reporter is None:
        return
    _reporter.explicit_phase = True
    _reporter.phase = str(name)[:_MAX_PHASE_CHARS]
    _reporter.wake.set()


def watch(ddp_model, process_group=None):
    """Times `ddp_model`'s (a DistributedDataParallel) bucket allreduces through a communication hook that does
    what DDP's default does (allreduce, then divide by the world size); see comm_exposed_ms above. Registers nothing
    outside dtrain. DDP takes one hook per model, so call it instead of register_comm_hook, not as well."""
    if _reporter is None:
        return
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
    reporter = _reporter
    reporter.watched = reporter.by_hand = True
    clock = time.perf_counter

    def timed_allreduce(group, bucket):
        launched = clock()
        if reporter.comm_first_launch is None:
            reporter.comm_first_launch = launched
        reporter.comm_last_launch = launched

        def done(future):
            reporter.comm_last_done = max(reporter.comm_last_done, clock())
            return future.value()

        return allreduce_hook(group, bucket).then(done)

    timed_allreduce._dtrain_timed = True   # the bootstrap does not time it again
    ddp_model.register_comm_hook(process_group, timed_allreduce)
