"""`logs.console: all` with two ranks that each write one 100 MiB line to stderr in a single write: the job ends, its
local agent exits by itself right after its session (it used to join gRPC's executor threads on the way out, one of
them inside a poll of seconds, and the launcher killed it 5 s later: "a local agent did not exit by itself"), and
both log files hold the whole line. The failure was intermittent (about one run in ten on 2 loaded cores), so the
job runs twice."""

import os
import re
import subprocess
import time

from harness import DTRAIN, PYTHON, Run, check, finish, write

LINE_BYTES = 100 << 20
# From "finished" to the launcher's exit: the agents' last messages and exits take well under a second; the bug
# took the launcher's 5 s wait for its agents, then their kill.
EXIT_BOUND_S = 3.0


def launch(attempt):
    run = Run([])
    spec = write(os.path.join(run.dir, "job.yaml"),
                 "name: long-lines\nnodes: {provider: local, count: 1}\nworkers_per_node: 2\n"
                 "command: [%s, -c, \"import sys; sys.stderr.write('a' * %d + '\\\\n')\"]\n"
                 "logs: {dir: runs, console: all}\n" % (PYTHON, LINE_BYTES))
    err_path = os.path.join(run.dir, "launcher.err")
    began = time.monotonic()
    with open(err_path, "wb") as err:
        done = subprocess.run([DTRAIN, "launch", spec], cwd=run.dir, env=run.env, stdout=subprocess.DEVNULL,
                              stderr=err, timeout=60)
    took = time.monotonic() - began
    with open(err_path, "rb") as f:
        f.seek(max(0, os.path.getsize(err_path) - 64 * 1024))
        tail = f.read().decode(errors="replace")
    print("--- attempt %d: exit %d in %.2f s; launcher's last lines:\n%s" %
          (attempt, done.returncode, took, "\n".join(line[:200] for line in tail.splitlines()[-6:])), flush=True)
    check(done.returncode == 0, "attempt %d: the job exits 0, got %d" % (attempt, done.returncode))
    check("did not exit by itself" not in tail, "attempt %d: the local agent exits by itself" % attempt)
    finished = re.search(r"finished: 2 ranks exited 0 in ([0-9.]+) s", tail)
    if check(finished is not None, "attempt %d: the launcher says the job finished" % attempt):
        after = took - float(finished.group(1))
        check(after < EXIT_BOUND_S, "attempt %d: the launcher exits %.2f s after the job's end (bound %.1f s)"
              % (attempt, after, EXIT_BOUND_S))
    jobs = run.job_dirs()
    if check(len(jobs) == 1, "attempt %d: one job directory" % attempt):
        for rank in range(2):
            size = os.path.getsize(os.path.join(jobs[0], "attempt_0", "rank_%d.log" % rank))
            check(size == LINE_BYTES + 1, "attempt %d: rank %d's log holds the whole line (%d bytes)"
                  % (attempt, rank, size))
    run.assert_no_leaks()


for attempt in range(2):
    launch(attempt)
finish()
