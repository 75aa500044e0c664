"""What a worker's DTRAIN_REPORT_TOKEN guarantees (agent/job/job_runner.h, JobRunner::check_reporter), with two jobs
running at once:
- a report to this job's agent that carries the other job's live tokens (job token and report token) is refused, and
  so is one with this round's job token but another worker's report token;
- no token is on a command line (/proc/PID/cmdline is world-readable) of any process of either job;
- another uid cannot read a worker's environment (/proc/PID/environ is the worker's uid's, mode 0400); that part needs
  root to become another uid, and says SKIPPED without it.
What it does not guarantee, checked so that the docs stay true: a process of the same uid reads a sibling's token."""

import json
import os
import time

from harness import BUILD_DIR, PYTHON, Run, check, finish, write

# Job B: one worker that publishes its tokens and waits until told to stop.
OTHER_JOB = r"""
import json, os, sys, time
stop = sys.argv[1] + ".stop"
with open(sys.argv[1] + ".tmp", "w") as f:
    json.dump({k: os.environ[k] for k in ("DTRAIN_JOB_TOKEN", "DTRAIN_REPORT_TOKEN")}, f)
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
began = time.monotonic()
while not os.path.exists(stop) and time.monotonic() - began < 60:
    time.sleep(0.05)
"""

# Job A: rank 1 waits; rank 0 tries the other job's tokens, reads rank 1's environment as itself and as another uid.
WORKER = r"""
import json, os, sys, time
import grpc
from dtrain.v1 import report_pb2, report_pb2_grpc

shared = sys.argv[1]
def wait_for(path):
    began = time.monotonic()
    while not os.path.exists(path):
        if time.monotonic() - began > 30:
            sys.exit("timed out waiting for " + path)
        time.sleep(0.05)

rank = int(os.environ["RANK"])
if rank == 1:
    write_pid = os.path.join(shared, "rank1.pid")
    with open(write_pid + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.rename(write_pid + ".tmp", write_pid)
    wait_for(os.path.join(shared, "done"))
    sys.exit(0)

wait_for(os.path.join(shared, "b.json"))
wait_for(os.path.join(shared, "rank1.pid"))
other = json.load(open(os.path.join(shared, "b.json")))
sibling = int(open(os.path.join(shared, "rank1.pid")).read())
stub = report_pb2_grpc.WorkerReportsStub(grpc.insecure_channel(os.environ["DTRAIN_AGENT_ADDR"]))

def report(job_token, report_token):
    try:
        stub.Report(report_pb2.WorkerReport(rank=0, step=1, loss=1.0),
                    metadata=[("dtrain-token", job_token), ("dtrain-report-token", report_token)], timeout=10)
        return "accepted"
    except grpc.RpcError as e:
        return e.code().name

print("own tokens:", report(os.environ["DTRAIN_JOB_TOKEN"], os.environ["DTRAIN_REPORT_TOKEN"]))
print("other job's tokens:", report(other["DTRAIN_JOB_TOKEN"], other["DTRAIN_REPORT_TOKEN"]))
print("other job's report token:", report(os.environ["DTRAIN_JOB_TOKEN"], other["DTRAIN_REPORT_TOKEN"]))

secrets = [os.environ["DTRAIN_JOB_TOKEN"], os.environ["DTRAIN_REPORT_TOKEN"], other["DTRAIN_JOB_TOKEN"],
           other["DTRAIN_REPORT_TOKEN"]]
in_cmdline = []
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        cmdline = open("/proc/%s/cmdline" % pid, "rb").read().decode(errors="replace")
    except OSError:
        continue
    if any(s in cmdline for s in secrets):
        in_cmdline.append(pid)
print("tokens in command lines:", in_cmdline)

environ = "/proc/%d/environ" % sibling
print("same uid reads the sibling's report token:",
      b"DTRAIN_REPORT_TOKEN=" in open(environ, "rb").read())
if os.geteuid() == 0:
    child = os.fork()
    if child == 0:
        os.setgroups([])
        os.setgid(65534)
        os.setuid(65534)
        try:
            open(environ, "rb").read()
            os._exit(1)
        except PermissionError:
            os._exit(0)
        except OSError:
            os._exit(2)
    _, status = os.waitpid(child, 0)
    print("another uid reads the sibling's environment:", {0: "refused", 1: "read"}.get(os.WEXITSTATUS(status), "?"))
else:
    print("SKIPPED: another uid's view needs root to switch uids")
open(os.path.join(shared, "done"), "w").close()
"""

shared = Run([]).dir
env = {"PYTHONPATH": os.path.join(BUILD_DIR, "python")}
b_json = os.path.join(shared, "b.json")
job_b = Run(["run", "-n", "1", "--name", "token-b", "--", PYTHON, write(os.path.join(shared, "b.py"), OTHER_JOB),
             b_json], env=env, timeout=90).start()
try:
    job_a = Run(["run", "-n", "2", "--console", "all", "--name", "token-a", "--", PYTHON,
                 write(os.path.join(shared, "a.py"), WORKER), shared], env=env, timeout=90)
    job_a.run()
    job_a.show()
finally:
    open(b_json + ".stop", "w").close()
    job_b.wait()
check(job_a.code == 0, "job A exits 0, got %s" % job_a.code)
check(job_b.code == 0, "job B exits 0, got %s" % job_b.code)
out = job_a.out
check("own tokens: accepted" in out, "a worker's report with its own tokens is accepted")
check("other job's tokens: PERMISSION_DENIED" in out, "another job's live tokens are refused")
check("other job's report token: PERMISSION_DENIED" in out, "a report token that is not this worker's is refused")
check("tokens in command lines: []" in out, "no token is on any process's command line")
check("same uid reads the sibling's report token: True" in out, "the same uid reads it (the stated trust model)")
if os.geteuid() == 0:
    check("another uid reads the sibling's environment: refused" in out, "another uid cannot read a worker's tokens")
else:
    print("SKIPPED: the other-uid check needs root")
job_a.assert_no_leaks()
job_b.assert_no_leaks()
finish()
