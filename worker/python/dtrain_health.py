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

Files: this one holds what a script calls and the reporter's start; the reporter's state and sending are in
_dtrain_health_report.py, its exit, SIGTERM, fork and dump signal in _dtrain_health_exit.py, both beside this file and
loaded from there by path (never through sys.path: a script's module of the same name is never taken for them).
"""

import atexit
import os
import sys
import threading
import time

__all__ = ["timed", "step", "report", "phase", "watch", "enabled"]

# The agent cuts a phase at 128 bytes; sending more only costs bytes.
_MAX_PHASE_CHARS = 128


def _load_part(name):
    """`name`.py beside this file, loaded from its path: never through sys.path (a script's module of that name is not
    run for it) and never registered in sys.modules (nor is the script's displaced)."""
    import importlib.util
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), name + ".py")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_report = _load_part("_dtrain_health_report")
_exit = _load_part("_dtrain_health_exit")


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


class _Reporter(_report.Reports, _exit.ExitSends):
    """The state of this process's reports and the thread that sends them."""

    def __init__(self, path, env):
        _report.Reports.__init__(self, path, env)
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
        super()._forked()


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
