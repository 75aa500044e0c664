"""Only the worker process speaks for its rank, on the agent's side (real agents, the real datagram socket; the
kernel's SO_PASSCRED pid). The Python helper stays silent in a worker's children by itself; this test covers what
it cannot: a child that writes its own datagrams with the rank's tokens, as a user's own reporter in a subprocess
would. Rank 0 reports 3 steps through dtrain_health, starts a child that sends a report every 0.1 s as rank 0 with
a step that moves each time (and, at the end, `exiting`), then hangs. health.hang_timeout_s is 2:
  the agent drops the child's datagrams (its pid is not the worker's), so the launcher sees rank 0 stuck at step 3
  and fails the job (124, "made no step progress") within a few seconds. Before, each of the child's reports was
  progress and the hang went undetected until this test's own timeout.
The agent's warning names the drop ("from another process") on the launcher's stderr. The run leaves no process behind."""

import time

from harness import PYTHON, Run, check, finish, write

WORKER = r"""
import json, os, socket, subprocess, sys, time
import dtrain_health as health

for _ in range(3):
    with health.step():
        time.sleep(0.05)
CHILD = '''
import json, os, socket, time
sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
head = {"rank": int(os.environ["RANK"]), "token": os.environ["DTRAIN_JOB_TOKEN"],
        "report_token": os.environ["DTRAIN_REPORT_TOKEN"]}
for i in range(400):
    report = dict(head, step=100 + i, steps_done=100 + i, exiting=(i == 399))
    try:
        sock.sendto(json.dumps(report).encode(), os.environ["DTRAIN_HEALTH_SOCKET"])
    except OSError:
        pass
    time.sleep(0.1)
'''
subprocess.Popen([sys.executable, "-c", CHILD])
print("3 steps done; the child reports, the parent hangs", flush=True)
time.sleep(3600)
"""

SPEC = """
name: health-sender
nodes: {provider: local, count: 1}
workers_per_node: 1
command: [%s, %s]
stop: {grace_s: 1}
health: {heartbeat_timeout_s: 30, hang_timeout_s: 2}
logs: {dir: runs, console: all}
"""

run = Run([], timeout=40)
script = write(run.dir + "/worker.py", WORKER)
run.args += ["launch", write(run.dir + "/job.yaml", SPEC % (PYTHON, script))]
began = time.monotonic()
run.run()
took = time.monotonic() - began
print("the job took %.1f s" % took, flush=True)
run.show()
check(run.code == 124, "the hung parent fails the hang check -> exit 124, got %s" % run.code)
check("rank 0 made no step progress" in run.err and "stuck at step 3" in run.err,
      "the summary names the hang at the parent's step 3, not the child's steps")
check(took < 20, "judged within seconds of hang_timeout_s, not at the test's timeout (%.1f s)" % took)
check("dropped a datagram (from another process: rank 0: sent by pid" in run.err,
      "the agent's warning about the child's datagrams reaches the launcher's stderr")
run.assert_no_leaks()
finish()
