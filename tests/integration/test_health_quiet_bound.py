"""Quiet is bounded (real agents, the real datagram socket, real signals). A rank's report that says `quiet` turns its
heartbeat check off until a report without it; once the rank has made its first step, with health.hang_timeout_s 0
(the default), nothing else used to judge it, so a rank stopped or wedged inside a quiet call hung the job for good.
Each case's worker makes 3 steps through dtrain_health, then enters a call through the reporter's wait_quietly() (what
the bootstrap does with init_process_group):
  stopped  the call is SIGSTOP of the worker itself: its agent samples it in state T, and the launcher fails the
           job (124) as `is stopped` about health.heartbeat_timeout_s (2) after it stopped (startup_timeout_s is 30
           there, so the other bound cannot be what fails it);
  bound    the call sleeps for an hour (its reporter keeps sending, each report quiet): the launcher fails the job
           (124) once quiet has lasted health.startup_timeout_s (3), naming the bound.
Without the bounds both jobs run until this test's own timeout. Both cases run at the same time. Each run leaves no
process behind."""

import time

from harness import PYTHON, Run, check, finish, write

WORKER = r"""
import os, signal, sys, time
import dtrain_health as health

for _ in range(3):
    with health.step():
        time.sleep(0.05)
print("3 steps done, entering the quiet call", flush=True)
if sys.argv[1] == "stopped":
    health._reporter.wait_quietly("stopped", os.kill, os.getpid(), signal.SIGSTOP)
else:
    health._reporter.wait_quietly("wedged", time.sleep, 3600)
print("the quiet call returned", flush=True)
"""

SPEC = """
name: quiet-bound-%s
nodes: {provider: local, count: 1}
workers_per_node: 1
command: [%s, %s, %s]
stop: {grace_s: 1}
health: {heartbeat_timeout_s: 2, startup_timeout_s: %s, hang_timeout_s: 0}
logs: {dir: runs, console: all}
"""


def start(case):
    run = Run([], timeout=40)
    script = write(run.dir + "/worker.py", WORKER)
    run.args += ["launch", write(run.dir + "/job.yaml", SPEC % (case, PYTHON, script, case, 30 if case == "stopped" else 3))]
    run.began = time.monotonic()
    return run.start()


runs = {case: start(case) for case in ("stopped", "bound")}
for case, run in runs.items():
    run.wait()
    took = time.monotonic() - run.began
    print("%s: the job took %.1f s" % (case, took), flush=True)
    run.show()
    check(run.code == 124, "%s: the quiet rank fails its health check -> exit 124, got %s" % (case, run.code))
    check("3 steps done" in run.out + run.err, "%s: the rank made its steps before the quiet call" % case)
    check(took < 20, "%s: judged within seconds of its bound, not at the test's timeout (%.1f s)" % (case, took))
    run.assert_no_leaks()
check("rank 0 is stopped (its agent has seen its process in state T" in runs["stopped"].err,
      "stopped: the summary says the quiet rank's process is stopped")
check("rank 0 has been in a call that keeps its reporter from running (quiet" in runs["bound"].err and
      "(the bound is 3 s" in runs["bound"].err, "bound: the summary names the quiet call and its bound")
check("the quiet call returned" not in runs["bound"].out + runs["bound"].err, "bound: the call never returned")
finish()
