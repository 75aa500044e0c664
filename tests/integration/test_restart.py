"""A job that fails twice and then succeeds, with restart.max_restarts 3: each round is a new attempt with its own
logs, TORCHELASTIC_RESTART_COUNT counts up, and the launcher exits 0. With max_restarts 1 the same job fails."""

import glob
import os

from harness import Run, check, finish, write

WORKER = r"""
echo "attempt $TORCHELASTIC_RESTART_COUNT of max $TORCHELASTIC_MAX_RESTARTS token $DTRAIN_JOB_TOKEN"
if [ "$TORCHELASTIC_RESTART_COUNT" -lt 2 ]; then
  if [ "$RANK" = 1 ]; then exit 5; fi
  exec sleep 300
fi
echo "rank $RANK done at restart $TORCHELASTIC_RESTART_COUNT"
"""

SPEC = """
name: flaky
nodes: {provider: local, count: 2}
workers_per_node: 2
command: [/bin/sh, %s]
restart: {max_restarts: %d, backoff_s: 0.2}
stop: {grace_s: 2}
logs: {dir: logs, console: all}
"""


def launch(max_restarts):
    run = Run([])
    script = write(os.path.join(run.dir, "worker.sh"), WORKER)
    spec = write(os.path.join(run.dir, "job.yaml"), SPEC % (script, max_restarts))
    run.args += ["launch", spec]
    run.run()
    run.show()
    return run


run = launch(3)
check(run.code == 0, "two failures then success with max_restarts 3 -> exit 0, got %s" % run.code)
for rank in range(4):
    check("[%d] rank %d done at restart 2" % (rank, rank) in run.out, "rank %d ran its third attempt" % rank)
check("attempt 2 of max 3" in run.out, "TORCHELASTIC_MAX_RESTARTS is 3")
tokens = {line.split("token ")[1] for line in run.out.splitlines() if "token " in line}
check(len(tokens) == 3, "each round gets a fresh store token (saw %d distinct)" % len(tokens))
jobs = glob.glob(os.path.join(run.dir, "logs", "flaky-*"))
check(len(jobs) == 1 and all(os.path.isdir(os.path.join(jobs[0], "attempt_%d" % a)) for a in range(3)),
      "attempt_0..2 directories exist")
run.assert_no_leaks()

run = launch(1)
check(run.code == 5, "failing twice with max_restarts 1 -> exit 5 (rank 1's code), got %s" % run.code)
check("root cause: rank 1" in run.err, "summary names rank 1")
run.assert_no_leaks()
finish()
