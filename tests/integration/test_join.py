"""provider join on loopback: agents started with `dtrain agent --join` dial the launcher; node ranks follow join
order; with count MIN:MAX the job starts after join_timeout_s with the agents that came. An agent killed mid-job
is replaced by a new agent that joins during the backoff: the next round runs on it and the survivor. Loopback is
no exception to the cluster token: launcher and agents find the secret through DTRAIN_SECRET_DIR."""

import os
import signal
import socket
import subprocess
import tempfile
import time

from harness import DTRAIN, Run, check, describe, finish, tagged_pids, wait_no_leaks, write


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def agent(run, port):
    return subprocess.Popen([DTRAIN, "agent", "--join", "127.0.0.1:%d" % port, "--quiet", "--join-timeout-s", "30"],
                            env=run.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


SECRET = os.path.join(tempfile.mkdtemp(prefix="dtrain-join-secret-"), "secret")
subprocess.run([DTRAIN, "secret", "init", "--dir", SECRET], check=True, stdout=subprocess.DEVNULL)
# Joined agents keep the jobs' logs in their own run directory ($XDG_STATE_HOME/dtrain/runs): the test's, here.
ENV = {"DTRAIN_SECRET_DIR": SECRET, "XDG_STATE_HOME": os.path.dirname(SECRET)}

# 1. Two of at most three agents join; the job starts after the join timeout with both.
run = Run([], timeout=60, env=ENV)
port = free_port()
spec = write(os.path.join(run.dir, "job.yaml"),
             "name: joined\nnodes: {provider: join, count: '2:3', rendezvous: '127.0.0.1:%d', join_timeout_s: 5}\n"
             "workers_per_node: 2\ncommand: [/bin/sh, -c, 'echo rank $RANK node $GROUP_RANK of $GROUP_WORLD_SIZE']\n"
             "logs: {console: all}\n" % port)
run.args += ["launch", spec]
run.start()
agents = [agent(run, port) for _ in range(2)]
run.wait()
run.show()
check(run.code == 0, "2 joined agents of 2:3 -> exit 0, got %s" % run.code)
for r in range(4):
    check("[%d] rank %d node %d of 2" % (r, r, r // 2) in run.out, "rank %d on node %d of 2" % (r, r // 2))
for a in agents:
    try:
        a.wait(timeout=10)
    except subprocess.TimeoutExpired:
        check(False, "a joined agent exits when its job ends")
run.assert_no_leaks()

# 2. Kill one agent mid-job; a new one joins during the backoff and the next round runs on 2 nodes again.
run = Run([], timeout=90, env=ENV)
port = free_port()
worker = ('if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then echo started; exec sleep 300; fi; '
          'echo "rank $RANK of $WORLD_SIZE on node $GROUP_RANK at restart $TORCHELASTIC_RESTART_COUNT"')
spec = write(os.path.join(run.dir, "job.yaml"),
             "name: rejoin\nnodes: {provider: join, count: '1:2', rendezvous: '127.0.0.1:%d', join_timeout_s: 5}\n"
             "workers_per_node: 2\ncommand: [/bin/sh, -c, '%s']\nrestart: {max_restarts: 1, backoff_s: 3}\n"
             "stop: {grace_s: 1}\nhealth: {node_timeout_s: 3}\nlogs: {console: all}\n" % (port, worker))
run.args += ["launch", spec]
run.start()
first = [agent(run, port) for _ in range(2)]
deadline = time.monotonic() + 30
while time.monotonic() < deadline:
    sleeping = [p for p in tagged_pids(run.tag) if open("/proc/%d/cmdline" % p, "rb").read().startswith(b"sleep")]
    if len(sleeping) == 4:
        break
    time.sleep(0.05)
os.killpg(first[1].pid, signal.SIGKILL)
time.sleep(1.0)
replacement = agent(run, port)
run.wait()
run.show()
check(run.code == 0, "restart after an agent kill, with a replacement joining -> exit 0, got %s" % run.code)
check(run.out.count("of 4 on node") == 4, "the second round ran 4 ranks on 2 nodes (the survivor and the new agent)")
check("lost" in run.err, "the launcher reported the killed agent's node as lost")
took, left = wait_no_leaks(run.tag, 10)
check(took is not None, "nothing left after the rejoin job: " + describe(left))
finish()
