"""A rank's teardown after its last health report is not a dead rank (real agents, the real datagram socket, plain
Python workers, no PyTorch needed): 2 ranks on one node import dtrain_health, make 6 and 4 steps under
`with dtrain_health.step():`, and then linger 4 s in the interpreter's finalization (an object's __del__ that sleeps,
as a PyTorch process's gloo groups and DDP reducers are torn down there), after dtrain_health stopped its reporter's
thread and sent its last report at exit; health.heartbeat_timeout_s is 2.
  exiting   the last report says "exiting": the launcher stops its health checks of the rank and judges its exit
            alone: the job succeeds (exit 0), both teardowns ran to their end, no rank is reported as stopped
            reporting health or killed by a signal, and `dtrain status --json` shows each rank exited at its own
            last step (6 and 4) with exiting true;
  silent    the same workers with a reporter whose last report does not say it (the key taken out, as a reporter
            older than the key sends it): the heartbeat check still covers the teardown, and the job fails (124)
            with "rank N stopped reporting health". This is the failure the key removes, and it shows the teardown
            here is silent: without it the first case would prove nothing;
  stuck     health.exit_timeout_s 2: rank 0's teardown takes 0.5 s, rank 1's 60 s (a teardown that never ends, as
            torch 1.13's can, a gloo thread waiting for the GIL): rank 1 fails the job as a health failure (124)
            about 2 s after its last report, "rank 1 sent its last report (exiting) 2.x s ago and has not exited:
            it is stuck in teardown (health.exit_timeout_s: 2)", its stacks are written before the stop, the events
            log has the health_check_failed, rank 0's teardown completed and rank 1's was cut short; the job ends in
            well under the 60 s (without the check it would wait them out and exit 0). The exiting case above runs
            with the default exit_timeout_s (120): 4 s of teardown pass.
(A 4 s sleep in an atexit handler would not do: one registered after the import runs before dtrain_health's, while
the reporter's thread still heartbeats.)"""

import glob
import json
import os
import re
import time

from harness import PYTHON, Run, check, finish, status_json, write

WORKER = r"""
import os, sys, time
rank = int(os.environ["RANK"])
done_file = sys.argv[1] + ".%d" % rank

class Teardown:
    # Runs when finalization clears this module, after atexit (dtrain_health's last send) and after the reporter's
    # daemon thread was stopped; the defaults keep what it needs alive until then.
    def __del__(self, sleep=time.sleep, open_=open, done_file=done_file, took=float(sys.argv[3].split(",")[rank])):
        sleep(took)
        with open_(done_file, "w") as f:
            f.write("done")

teardown = Teardown()
import dtrain_health as health
if sys.argv[2] == "silent":
    # A reporter whose last report does not say that the process is exiting. The function is built outside this
    # module's globals: the reporter is never freed, and through them it would keep `teardown` from finalization.
    health._reporter.message = eval("lambda final=False: message(False)", {"message": health._reporter.message})
steps = 6 if rank == 0 else 4
for _ in range(steps):
    with health.step():
        time.sleep(0.05)
print("rank %d trained %d steps; tearing down" % (rank, steps), flush=True)
"""

SPEC = """
name: %s
nodes: {provider: local, count: 1}
workers_per_node: 2
command: [%s, %s, %s, %s, "%s"]
stop: {grace_s: 1}
health: {heartbeat_timeout_s: 2%s}
logs: {dir: runs, console: all}
"""


def launch(mode, teardown_s="4,4", health=""):
    """`teardown_s`: rank 0's and rank 1's seconds in finalization; `health`: more health keys."""
    run = Run([], timeout=120)
    done = os.path.join(run.dir, "teardown-done")
    script = write(os.path.join(run.dir, "worker.py"), WORKER)
    run.args += ["launch", write(os.path.join(run.dir, "job.yaml"), SPEC % ("exit-" + mode, PYTHON, script, done,
                                                                                 mode, teardown_s, health))]
    start = time.monotonic()
    run.run()
    run.took = time.monotonic() - start
    run.show()
    run.done = [os.path.exists(done + ".%d" % rank) for rank in (0, 1)]
    return run


# ---- exiting: the teardown after the last report is the rank's own business
run = launch("exiting")
print("exiting: the job took %.1f s" % run.took, flush=True)
check(run.code == 0, "both ranks trained to the end and exited 0 -> launcher exits 0, got %s" % run.code)
check(run.done == [True, True], "both teardowns ran their 4 s to the end (%s)" % run.done)
check(run.took >= 4, "the job lasted through the teardown (%.1f s)" % run.took)
check("stopped reporting health" not in run.err, "no rank failed the heartbeat check")
check("killed by signal" not in run.err, "no rank was killed (no stack-dump signal while tearing down)")
status = status_json(run)
check(status.get("state") == "succeeded", "status: the job succeeded (%s)" % status.get("state"))
ranks = {r["rank"]: r for r in status.get("ranks", [])}
check(sorted(ranks) == [0, 1], "status shows both ranks: %s" % sorted(ranks))
for rank, steps in ((0, 6), (1, 4)):
    row = ranks.get(rank, {})
    print("status rank %d: state %s, step %s, exiting %s" % (rank, row.get("state"), row.get("step"),
                                                             row.get("exiting")), flush=True)
    check(row.get("state") == "exited", "rank %d exited: %s" % (rank, row.get("state")))
    check(row.get("step") == steps, "rank %d's last step is %d: %s" % (rank, steps, row.get("step")))
    check(row.get("exiting") is True, "rank %d's last report said it was exiting: %s" % (rank, row.get("exiting")))
run.assert_no_leaks()

# ---- silent: without the key, the same teardown fails the heartbeat check
run = launch("silent")
check(run.code == 124, "a silent teardown past health.heartbeat_timeout_s -> 124, got %s" % run.code)
check(re.search(r"rank [01] stopped reporting health 2\.\d s ago", run.err),
      "the heartbeat check names a rank that stopped reporting")
ranks = {r["rank"]: r for r in status_json(run).get("ranks", [])}
check(all(r.get("exiting") is False for r in ranks.values()) and len(ranks) == 2,
      "no rank said it was exiting: %s" % {k: r.get("exiting") for k, r in ranks.items()})
run.assert_no_leaks()

# ---- stuck: a teardown past health.exit_timeout_s fails the job, its stacks taken as for a hang
run = launch("stuck", "0.5,60", ", exit_timeout_s: 2")
print("stuck: the job took %.1f s" % run.took, flush=True)
check(run.code == 124, "a rank stuck in teardown past health.exit_timeout_s -> 124, got %s" % run.code)
check(re.search(r"rank 1 sent its last report \(exiting\) 2\.\d s ago and has not exited: it is stuck in teardown "
                r"\(health\.exit_timeout_s: 2\)", run.err), "the teardown check names rank 1 and the key")
check("stopped reporting health" not in run.err, "no rank failed the heartbeat check")
check(run.done == [True, False], "rank 0's teardown completed, rank 1's was cut short (%s)" % run.done)
check(run.took < 30, "the job did not wait out rank 1's 60 s teardown (%.1f s)" % run.took)
stacks = sorted(os.path.basename(p) for p in glob.glob(os.path.join(run.dir, "runs", "*", "attempt_0", "stacks",
                                                                     "rank_[0-9].txt")))
check("rank_1.txt" in stacks, "rank 1's stacks were written before the stop (%s)" % stacks)
events = []
for path in glob.glob(os.path.join(run.dir, "runs", "*", "events.jsonl")):
    with open(path) as f:
        events += [json.loads(line) for line in f if line.strip()]
failed = [e for e in events if e.get("event") == "health_check_failed"]
check(len(failed) == 1 and failed[0].get("rank") == 1 and "stuck in teardown" in failed[0].get("what", ""),
      "events.jsonl has rank 1's health_check_failed: %s" % failed)
ranks = {r["rank"]: r for r in status_json(run).get("ranks", [])}
check(ranks.get(1, {}).get("exiting") is True, "status: rank 1 had sent its last report: %s" % ranks.get(1))
run.assert_no_leaks()

finish()
