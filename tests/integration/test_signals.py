"""Ctrl-C (SIGINT) and SIGTERM to the launcher stop everything and exit 130 / 143. SIGKILL to the launcher: each
agent notices the broken session and stops its workers within the lease."""

import os
import signal
import time

from harness import Run, check, describe, finish, tagged_pids, wait_no_leaks, write

SPEC = """
name: sig
nodes: {provider: local, count: 2}
workers_per_node: 2
command: [/bin/sh, -c, "echo started; exec sleep 300"]
stop: {grace_s: 1}
health: {node_timeout_s: 3}
logs: {console: all}
"""


def sleepers(tag):
    out = []
    for pid in tagged_pids(tag):
        try:
            with open("/proc/%d/cmdline" % pid, "rb") as f:
                if f.read().startswith(b"sleep\x00300"):
                    out.append(pid)
        except OSError:
            pass
    return out


def start_job():
    run = Run([], timeout=60)
    spec = write(os.path.join(run.dir, "job.yaml"), SPEC)
    run.args += ["launch", spec]
    run.start()
    deadline = time.monotonic() + 30
    while len(sleepers(run.tag)) < 4 and time.monotonic() < deadline:
        time.sleep(0.05)
    check(len(sleepers(run.tag)) == 4, "4 workers running before the signal: %s" % describe(tagged_pids(run.tag)))
    return run


for sig, code in ((signal.SIGINT, 130), (signal.SIGTERM, 143)):
    run = start_job()
    os.kill(run.proc.pid, sig)
    run.wait()
    run.show()
    check(run.code == code, "%s -> exit %d, got %s" % (sig.name, code, run.code))
    check("interrupted by %s" % sig.name in run.err, "the launcher says it was interrupted by %s" % sig.name)
    run.assert_no_leaks(timeout=2.0)

run = start_job()
workers = sleepers(run.tag)
start = time.monotonic()
os.kill(run.proc.pid, signal.SIGKILL)
run.wait()
while any(os.path.exists("/proc/%d" % p) and open("/proc/%d/stat" % p).read().rsplit(")", 1)[1].split()[0] != "Z"
          for p in workers if os.path.exists("/proc/%d/stat" % p)):
    if time.monotonic() - start > 3.0:
        break
    time.sleep(0.02)
took = time.monotonic() - start
print("workers gone %.3f s after SIGKILL to the launcher" % took)
check(took < 3.0, "workers gone within the 3 s lease after SIGKILL to the launcher (took %.2f s)" % took)
took, left = wait_no_leaks(run.tag, 3.0)
check(took is not None, "no agent or worker left after SIGKILL to the launcher: " + describe(left))
finish()
