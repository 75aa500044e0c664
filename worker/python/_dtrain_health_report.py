"""What dtrain_health reports and how it gets out (see dtrain_health.py for the fields and the transport): Reports,
the state of this process's reports (the last step's times, the loss, the phase, the PyTorch bootstrap's steps folded
in) and its sending, one datagram at a time from the sender's thread; the numbers of one step (step_times); the
environment's settings (positive_int).

dtrain_health loads this file from its path, never through sys.path (a module of the same name of the script's is
neither run for it nor displaced), and makes its _Reporter of Reports and _dtrain_health_exit.py's ExitSends.
"""

import json
import math
import os
import socket
import sys
import threading

# How often the latest state is resent when DTRAIN_HEALTH_INTERVAL_MS is not set: the longest interval dtrain gives.
DEFAULT_INTERVAL_S = 1.0
# A loss on a device is read at most every this many steps when DTRAIN_HEALTH_LOSS_EVERY is not set.
DEFAULT_LOSS_EVERY = 10


def positive_int(env, name, default):
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



class Reports:
    """The state of this process's reports, and its sending (the thread that sends is _Reporter's)."""

    def __init__(self, path, env):
        self.path = path
        self.head = {"rank": int(env.get("RANK", "0")), "token": env.get("DTRAIN_JOB_TOKEN", ""),
                     "report_token": env.get("DTRAIN_REPORT_TOKEN", "")}
        self.interval = positive_int(env, "DTRAIN_HEALTH_INTERVAL_MS", int(DEFAULT_INTERVAL_S * 1000)) / 1000.0
        self.loss_every = positive_int(env, "DTRAIN_HEALTH_LOSS_EVERY", DEFAULT_LOSS_EVERY)
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
        self.auto = None                 # the bootstrap's measurements (its _Instrumentation, in
                                         # bootstrap/_dtrain_instrumentation.py), once it counted a step: its
                                         # steps are folded in here when a report is built
        self.auto_steps = 0              # steps the bootstrap counted, as of the last one folded in
        self.folded = None               # the bootstrap's last step folded in (its `done`)
        self.point_before = None         # the last step of the bootstrap's history taken (_points measures from it)
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
        self.stopping = False            # set at exit: the sender's thread ends (ExitSends._last_send)
        self.pid = os.getpid()           # the process that speaks for the rank: a forked child never sends
        self.wakeup_fd = None            # the SIGTERM watcher's pipe (its write end), made signal's wakeup fd

    def message(self, final=False):
        body = dict(self.head)
        auto = self.auto
        phase = self.phase
        model = {}
        if auto is not None and auto.on:
            try:
                self._fold(auto)
                if not self.explicit_phase and not self.explicit_steps:
                    phase = auto.phase
                auto.device_memory(self)
                # model_params, model_flops_per_token, device_name: what MFU is computed from (an agent that does
                # not know these keys yet ignores them: it reads the fields it knows by name).
                model = auto.model
            except Exception as error:   # the bootstrap's error: it turns itself off, reports go on
                auto.fail(error)
        body.update(self.last)
        if auto is not None and auto.on and not self.explicit_steps:
            points = self._points(auto)
            if points:
                body["points"] = points
        body["step"] = self.step + self.auto_steps
        body["steps_done"] = self.steps_done + self.auto_steps
        loss = self._read_loss()
        if loss is not None:
            body["loss"] = loss
        if phase:
            body["phase"] = phase
        body.update(self.device)
        body.update(model)
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

    def _points(self, auto):
        """[step, loss, step_ms, tokens_per_s] for each step the bootstrap counted since the last report, oldest
        first (the agent keeps a report's points, so a job of a few report intervals still draws a curve of every
        step). A step is measured from the one before it; a step without a loss (the first, whose loss the reporter
        took itself) or without the one before is left out. When more steps passed than the history keeps, the
        newest point spans the steps it replaced: its time and rate are their average."""
        points = []
        for step in auto.take_history():
            before, self.point_before = self.point_before, step
            loss = step[8]
            if before is None or loss is None or step[9] is not None or step[0] <= before[0]:
                continue
            seconds = step[1] - before[1]
            if seconds <= 0:
                continue
            tokens, _ = auto.step_counts(step[4:8], before[4:8])
            try:
                value = float(loss.item())
            except Exception:   # a loss that cannot be read leaves its point out, never the report
                continue
            if math.isfinite(value):
                points.append([step[0] + self.step, value, seconds * 1e3 / (step[0] - before[0]),
                               (tokens or 0) / seconds])
        return points

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
        self.last = step_times(block_s + self.data_wait, self.data_wait, self._watched_comm(), self.tokens,
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
        steps, ended, data_total, comm_total = done[:4]
        loss, exact = done[8:]
        if exact is not None:
            began, data, comm, tokens, samples = exact
        else:
            began = previous[1]
            data, comm = data_total - previous[2], comm_total - previous[3]
            tokens, samples = auto.step_counts(done[4:8], previous[4:8])
        self.last = step_times(max(ended - began, data), data, comm, tokens, samples)
        if loss is not None:
            self.pending_loss = (loss, None)   # a detached CPU tensor (the bootstrap takes a device loss itself)
        self.auto_steps = steps



def step_times(step_s, data_s, comm_s, tokens, samples):
    """A step's report fields (see dtrain_health's docstring) from its seconds and counts (None: not counted)."""
    last = {"step_ms": step_s * 1e3, "data_wait_ms": data_s * 1e3, "comm_exposed_ms": comm_s * 1e3,
            "compute_ms": max(0.0, step_s - data_s - comm_s) * 1e3}
    if tokens is not None and step_s > 0:
        last["tokens_per_s"] = tokens / step_s
    if samples is not None and step_s > 0:
        last["samples_per_s"] = samples / step_s
    return last
