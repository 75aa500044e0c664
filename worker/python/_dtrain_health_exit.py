"""How dtrain_health's last report gets out, and what the process's signals do (see dtrain_health.py): ExitSends
sends the last state at exit (after the sender's thread was stopped) and on SIGTERM (a handler, and a thread woken
by the signal while the main thread is blocked in native code), registers the dump signal on which faulthandler
writes every thread's Python stack, and gives a forked child its signals back.

dtrain_health loads this file from its path, never through sys.path (a module of the same name of the script's is
neither run for it nor displaced), and makes its _Reporter of _dtrain_health_report.py's Reports and ExitSends.
"""

import faulthandler
import os
import signal
import threading

EXIT_JOIN_S = 2.0     # how long exit waits for the sender's thread to end (it never blocks: a send or a loss read)


class ExitSends:
    """The exit, SIGTERM, fork and dump-signal half of _Reporter: it uses the fields and send() of Reports, and the
    sender's thread that _Reporter starts."""

    def _forked(self):
        """In a child forked from this process (a DataLoader worker): the signals are the child's own again, as
        without dtrain_health."""
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
            self.stopping = True   # the sender's thread ends before the interpreter does (dtrain_health's docstring)
            self.wake.set()
            if self.thread is not threading.current_thread():
                self.thread.join(EXIT_JOIN_S)
            self.send(final=True)

    def _catch_term(self):
        """SIGTERM sends the last state first (see dtrain_health's docstring)."""
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
