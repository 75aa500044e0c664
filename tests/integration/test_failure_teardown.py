"""Rank 2 exits 3 while the others sleep: the launcher exits 3 with one summary, and nothing is left running:
not the sleeping workers, not a grandchild that called setsid, not a double-forked daemon."""

import json
import os
import time

from harness import Run, check, finish, write

WORKER = r"""
if [ "$RANK" = 2 ]; then
  sleep 0.5
  echo "loading shard 17" >&2
  echo "CUDA error: an illegal memory access was encountered" >&2
  printf '{"message": {"message": "RuntimeError: shard 17 is corrupt", "extraInfo": {"py_callstack": "Traceback: train.py line 42", "timestamp": "1"}}}' > "$TORCHELASTIC_ERROR_FILE"
  exit 3
fi
if [ "$RANK" = 5 ]; then
  setsid sleep 300 &
  (sleep 300 &) 
fi
if [ "$RANK" = 6 ]; then
  trap '' TERM
fi
exec sh -c 'sleep 300'
"""

run = Run([])
script = write(os.path.join(run.dir, "worker.sh"), WORKER)
run.args += ["run", "-n", "8", "--grace-s", "1", "--name", "teardown", "--", "/bin/sh", script]
started = time.monotonic()
run.run()
elapsed = time.monotonic() - started
run.show()
check(run.code == 3, "rank 2 exits 3 -> launcher exits 3, got %s" % run.code)
check("root cause: rank 2 on node 0" in run.err, "summary names rank 2 and its node")
check("exited with code 3" in run.err, "summary gives the exit code")
check("CUDA error: an illegal memory access was encountered" in run.err, "summary shows rank 2's last stderr lines")
check("RuntimeError: shard 17 is corrupt" in run.err, "summary shows the error file's message")
check("Traceback: train.py line 42" in run.err, "summary shows the error file's traceback")
check("rank_2.log" in run.err, "summary points at rank 2's log")
check(run.err.count("root cause") == 1, "exactly one summary")
check(elapsed < 20, "launcher ended within 20 s (took %.1f s)" % elapsed)
run.assert_no_leaks(timeout=2.0)
finish()
