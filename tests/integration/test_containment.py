"""SIGKILL to a `dtrain agent` takes its workers' whole process trees with it: a new session (setsid), double-forked
daemons, setsid + double fork, and a wide tree of shells, 32 processes per worker. Nothing of them may outlive the
agent by more than a few seconds (before each worker ran below a keeper, all but the workers themselves lived on
under init). The agent's private directory (the workers' TLS key) is left behind by the kill and removed by the
next agent's start; an agent that exits normally removes its own.

The agent is a standalone one (provider static), so no launcher is its ancestor to sweep the orphans up.

Then `pkill -9 dtrain`: a local job whose every dtrain process (launcher, agent, keepers, the agent's PID namespace
holder dtrain-pidns) is SIGKILLed at once. The keepers die too, so only the PID namespace the agent keeps its workers
in can take the setsid'd and double-forked descendants down: nothing of the trees may be left (as root; without
CAP_SYS_ADMIN there is no namespace and the test says SKIPPED for that part)."""

import glob
import os
import select
import signal
import socket
import subprocess
import time

from harness import DTRAIN, Run, check, describe, finish, tagged_pids, write

# 2 + 1 + 2 + 16 = 21 sleeps per worker, 32 processes with the shells.
WORKER = r"""
setsid sh -c 'sleep 300 & sleep 300 & wait' &
(sleep 300 &)
(setsid sh -c '(sleep 300 &); sleep 300' &)
for i in 1 2 3 4 5 6 7 8; do sh -c 'sleep 300 & sleep 300 & wait' & done
echo "rank $RANK ready"
wait
"""
WORKERS = 2
SLEEPS = 21 * WORKERS


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cmdline(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return f.read()
    except OSError:
        return b""


def start_agent(run, port, runtime):
    """A standalone agent with its own XDG_RUNTIME_DIR (so its private directory is where this test looks)."""
    env = dict(run.env)
    env["XDG_RUNTIME_DIR"] = runtime
    proc = subprocess.Popen([DTRAIN, "agent", "--listen", "127.0.0.1:%d" % port, "--secret-dir", run.secret,
                             "--run-dir", os.path.join(runtime, "runs")],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    ready, _, _ = select.select([proc.stdout], [], [], 20)
    line = proc.stdout.readline().decode() if ready else ""
    check(line.startswith("dtrain-agent listening on"), "the agent says it listens (got %r)" % line)
    return proc


def agent_dirs(runtime):
    return sorted(glob.glob(os.path.join(runtime, "dtrain", "agent-*")))


def sleeps(tag):
    return [p for p in tagged_pids(tag) if cmdline(p).startswith(b"sleep\x00300")]


def wait_sleeps(tag, where):
    """Until every worker's SLEEPS sleeps run (at most 40 s); checks they all do."""
    deadline = time.monotonic() + 40
    while len(sleeps(tag)) < SLEEPS and time.monotonic() < deadline:
        time.sleep(0.05)
    check(len(sleeps(tag)) == SLEEPS, "%d sleeps running %s, found %d" % (SLEEPS, where, len(sleeps(tag))))


def alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


BOUND = 3.0


def survivors(pids, killed_at):
    """Waits up to BOUND seconds after `killed_at` for `pids` to be gone; returns the seconds that took and those left
    (SIGKILLed here, so that no test leaves them behind)."""
    while any(alive(p) for p in pids) and time.monotonic() - killed_at < BOUND:
        time.sleep(0.01)
    took = time.monotonic() - killed_at
    left = [p for p in pids if alive(p)]
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    return took, left


run = Run([], timeout=90)
run.secret = os.path.join(run.dir, "secret")
subprocess.run([DTRAIN, "secret", "init", "--dir", run.secret], check=True, stdout=subprocess.DEVNULL)
runtime = os.path.join(run.dir, "runtime")
os.makedirs(runtime, mode=0o700)
old_style = set(glob.glob("/tmp/dtrain-agent-tls-*"))
port = free_port()
agent = start_agent(run, port, runtime)

script = write(os.path.join(run.dir, "worker.sh"), WORKER)
spec = write(os.path.join(run.dir, "job.yaml"),
             "name: contain\nnodes: {provider: static, agents: ['127.0.0.1:%d']}\nworkers_per_node: %d\n"
             "command: [/bin/sh, %s]\nstop: {grace_s: 1}\nhealth: {node_timeout_s: 3}\nlogs: {console: all}\n"
             % (port, WORKERS, script))
run.args += ["launch", spec, "--secret-dir", run.secret]
run.start()

wait_sleeps(run.tag, "below the agent before the kill")
tree = [p for p in tagged_pids(run.tag) if p not in (agent.pid, run.proc.pid)]
keepers = [p for p in tree if cmdline(p).startswith(b"dtrain-keeper\x00")]
print("agent %d, %d processes below it (%d keepers)" % (agent.pid, len(tree), len(keepers)), flush=True)
check(len(keepers) == WORKERS, "one keeper per worker, found %d" % len(keepers))
dirs = agent_dirs(runtime)
check(len(dirs) == 1 and os.path.isfile(os.path.join(dirs[0], "tls", "worker.key")),
      "the agent keeps the workers' TLS files in its private directory: %s" % dirs)

killed_at = time.monotonic()
os.kill(agent.pid, signal.SIGKILL)
agent.wait()
took, left = survivors(tree, killed_at)
print("the agent's %d descendants gone %.3f s after its SIGKILL" % (len(tree), took), flush=True)
check(not left, "every descendant of the SIGKILLed agent gone within %.0f s; left: %s" % (BOUND, describe(left)))

# The launcher loses its node: the job fails, and nothing of it is left.
run.wait()
run.show()
check(run.code not in (0, None), "the job fails when its only agent is killed (exit %s)" % run.code)
run.assert_no_leaks(timeout=5.0)

# The killed agent's directory (with the workers' key) is still there; the next agent's start removes it, and that
# agent removes its own when it exits.
check(agent_dirs(runtime) == dirs, "a SIGKILLed agent leaves its directory behind: %s" % agent_dirs(runtime))
second = start_agent(run, free_port(), runtime)
now = agent_dirs(runtime)
check(dirs[0] not in now, "the next agent's start removed the killed agent's directory: %s" % now)
check(len(now) == 1 and now[0].startswith(os.path.join(runtime, "dtrain", "agent-%d-" % second.pid)),
      "the next agent has a directory of its own: %s" % now)
second.send_signal(signal.SIGTERM)
try:
    second.wait(timeout=15)
except subprocess.TimeoutExpired:
    second.kill()
    second.wait()
    check(False, "the second agent exits on SIGTERM")
check(agent_dirs(runtime) == [], "an agent that exits removes its directory: %s" % agent_dirs(runtime))
check(set(glob.glob("/tmp/dtrain-agent-tls-*")) <= old_style, "no TLS directory directly under /tmp any more")


def comm(pid):
    try:
        with open("/proc/%d/comm" % pid) as f:
            return f.read().strip()
    except OSError:
        return ""


# ---- pkill -9 dtrain
if os.geteuid() != 0:
    print("SKIPPED: pkill -9 dtrain (the agent's PID namespace needs root)", flush=True)
    finish()
node = Run([], timeout=60)
node_spec = write(os.path.join(node.dir, "job.yaml"),
                  "name: contain-all\nnodes: {provider: local, count: 1}\nworkers_per_node: %d\n"
                  "command: [/bin/sh, %s]\nlogs: {console: all}\n" % (WORKERS, script))
node.args += ["launch", node_spec]
node.start()
wait_sleeps(node.tag, "before the kill")
everything = tagged_pids(node.tag)
dtrains = [p for p in everything if comm(p).startswith("dtrain")]
check(any(comm(p) == "dtrain-pidns" for p in dtrains), "the agent keeps its workers in a PID namespace: %s" %
      describe(dtrains))
killed_at = time.monotonic()
for pid in dtrains:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass  # already gone: killing one dtrain process can take others with it, as under pkill -9
node.wait()
took, left = survivors(everything, killed_at)
print("%d processes, %d of them dtrain's, gone %.3f s after SIGKILL to every dtrain process at once" %
      (len(everything), len(dtrains), took), flush=True)
check(not left, "nothing of the workers' trees outlives pkill -9 dtrain; left: %s" % describe(left))
finish()
