"""Ctrl-C (SIGINT) and SIGTERM to the launcher stop everything and exit 130 / 143. SIGKILL to the launcher: each
agent notices the broken session and stops its workers within the lease, and the next launcher removes the private
directory the killed one left (its local agents' sockets) while a running launcher's stays."""

import glob
import os
import tempfile
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


def start_job(env=None):
    run = Run([], timeout=60, env=env)
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

# The launchers below keep their private directories under $TMPDIR/dtrain-<uid> (XDG_RUNTIME_DIR unset), where
# this test looks.
tmpdir = tempfile.mkdtemp(prefix="dtrain-it-tmp-")
private_env = {"TMPDIR": tmpdir, "XDG_RUNTIME_DIR": ""}


def launcher_dirs(run):
    return glob.glob(os.path.join(tmpdir, "dtrain-%d" % os.geteuid(), "agent-%d-*" % run.proc.pid))


live = start_job(private_env)
check(len(launcher_dirs(live)) == 1, "a running launcher holds one private directory: %s" % launcher_dirs(live))

run = start_job(private_env)
killed_dirs = launcher_dirs(run)
check(len(killed_dirs) == 1, "the launcher to be killed holds one private directory: %s" % killed_dirs)
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
check(all(os.path.isdir(d) for d in killed_dirs), "a SIGKILLed launcher cannot remove its directory: %s" % killed_dirs)

after = start_job(private_env)
check(not any(os.path.exists(d) for d in killed_dirs),
      "the next launcher removed the killed launcher's directory: %s" % killed_dirs)
check(len(launcher_dirs(live)) == 1, "a running launcher's directory is kept: %s" % launcher_dirs(live))
check(len(launcher_dirs(after)) == 1, "the new launcher holds its own: %s" % launcher_dirs(after))
for job in (live, after):
    job_dirs = launcher_dirs(job)
    os.kill(job.proc.pid, signal.SIGTERM)
    job.wait()
    check(job.code == 143, "SIGTERM -> exit 143, got %s" % job.code)
    job.assert_no_leaks(timeout=5.0)
    check(not any(os.path.exists(d) for d in job_dirs), "a launcher that exits removes its directory: %s" % job_dirs)
finish()
