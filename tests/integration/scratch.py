"""One test process's scratch space: a directory under /tmp that holds every tempfile.mkdtemp/mkstemp of the process
(through tempfile.tempdir; the environment of the processes a test starts is left alone, so the product picks its own
directories as it would for a user). The directory goes when the test passes (`passed()`, called by the harnesses'
finish()) or made nothing (a skip); when a check failed or the test died it stays, and its path is printed, so the
evidence is there to read.

Before, every run dir, log and shard stayed under /tmp: a suite run left about 1.5 GB (console_long_lines alone writes
800 MB), and the disk filled up after enough runs, which failed unrelated tests with ENOSPC."""

import atexit
import os
import shutil
import tempfile

ROOT = tempfile.mkdtemp(prefix="dtrain-t-")
# As /tmp itself: the throwaway users of local_users and status_control reach the directories made in it.
os.chmod(ROOT, 0o1777)
tempfile.tempdir = ROOT

_passed = []


def passed():
    """The test passed: the scratch directory is removed at exit."""
    _passed.append(True)


def _at_exit():
    try:
        empty = not os.listdir(ROOT)
    except OSError:
        return
    if _passed or empty:
        shutil.rmtree(ROOT, ignore_errors=True)
    else:
        print("scratch directory kept for inspection: " + ROOT, flush=True)


atexit.register(_at_exit)
