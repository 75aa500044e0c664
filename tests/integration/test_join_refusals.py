"""Agents a join launcher must turn away, and the numbers a node checks before it dials (loopback, real agents, real
TLS):
1. An agent with another cluster's secret (another CA and token) and one started with --insecure against the TLS
   launcher exit at once (well under their 30 s join timeout) naming the check that failed, not "cannot connect".
2. Node ranks: an agent asking for a node rank another agent has is refused at once (its message and the
   launcher's note name both); one asking for rank 7 of 2 is refused likewise. Neither costs the job anything: the
   real agents join and the job succeeds with exit 0.
3. `dtrain run` refuses, with exit 2 and before dialing anyone, --node-rank 7 of --nnodes 2, --rdzv-conf timeouts
   below the bounds the heartbeats need (read_timeout=0.001, join_timeout=1e-9), and a SLURM_STEP_NUM_NODES that is
   not a node count (abc, 99999999), naming the option or variable and its value."""

import os
import socket
import subprocess
import time

from harness import DTRAIN, Run, check, finish, kill_tagged, write


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def agent(run, port, *extra):
    return subprocess.Popen([DTRAIN, "agent", "--join", "127.0.0.1:%d" % port, "--join-timeout-s", "30",
                             "--run-dir", os.path.join(run.dir, "agent-runs")] + list(extra),
                            env=run.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def refused(proc, what, words, bound=8.0):
    """Waits for a turned-away agent: it must exit non-zero within `bound` s, its stderr naming `words`."""
    start = time.monotonic()
    try:
        _, err = proc.communicate(timeout=bound + 5)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    took = time.monotonic() - start
    print("%s: exit %s after %.2f s: %s" % (what, proc.returncode, took, err.strip()[-400:]), flush=True)
    check(proc.returncode not in (0, None), "%s exits non-zero, got %s" % (what, proc.returncode))
    check(took < bound, "%s is refused at once, not after its 30 s join timeout (took %.2f s)" % (what, took))
    for w in words:
        check(w in err, "%s: its error says %r: %s" % (what, w, err[-600:]))
    return took


run = Run([], timeout=90)
ours, theirs = os.path.join(run.dir, "ours"), os.path.join(run.dir, "theirs")
for d in (ours, theirs):
    subprocess.run([DTRAIN, "secret", "init", "--dir", d], check=True, stdout=subprocess.DEVNULL)
run.env["DTRAIN_SECRET_DIR"] = ours
port = free_port()
spec = write(os.path.join(run.dir, "job.yaml"),
             "name: guarded\nnodes: {provider: join, count: 2, rendezvous: '127.0.0.1:%d', join_timeout_s: 40}\n"
             "workers_per_node: 1\ncommand: [/bin/sh, -c, 'echo rank $RANK node $GROUP_RANK']\n"
             "logs: {console: all}\n" % port)
run.args += ["launch", spec]
run.start()
try:
    time.sleep(1.0)
    # 1. Rogue agents: another cluster's secret, and plaintext.
    refused(agent(run, port, "--secret-dir", theirs), "an agent of another cluster",
            ["refused this agent", "TLS handshake"])
    refused(agent(run, port, "--insecure"), "a plaintext agent (--insecure)",
            ["refused this agent", "requires TLS"])
    # 2. Node ranks: rank 1 taken, rank 7 out of range; then the real rank 0 completes the job.
    first = agent(run, port, "--slot", "1")
    time.sleep(1.5)
    refused(agent(run, port, "--slot", "1"), "a second agent asking for node rank 1",
            ["refused this agent", "node rank 1", "already has"])
    refused(agent(run, port, "--slot", "7"), "an agent asking for node rank 7 of 2",
            ["refused this agent", "node rank 7", "at most 2 nodes"])
    last = agent(run, port, "--slot", "0")
    run.wait()
    run.show()
    check(run.code == 0, "the job runs on the two real agents after the refusals: exit 0, got %s" % run.code)
    check("[0] rank 0 node 0" in run.out and "[1] rank 1 node 1" in run.out,
          "node ranks follow the real agents' slots")
    check(run.err.count("refused the agent of") == 2 and "node rank 1" in run.err and "already has" in run.err,
          "the launcher notes each refused agent, naming the rank and the agent that has it")
    for a in (first, last):
        a.wait(timeout=15)
finally:
    kill_tagged(run.tag)

# 3. What `dtrain run` refuses before it dials anyone.
env = dict(run.env)
for k in list(env):
    if k.startswith("SLURM_"):
        del env[k]
cases = [
    (["--nnodes", "2", "--node-rank", "7", "--rdzv-endpoint", "127.0.0.1:%d" % free_port()], {},
     "--node-rank 7 is not a node of --nnodes 2"),
    (["--rdzv-conf", "read_timeout=0.001"], {}, "read_timeout (health.node_timeout_s) must be from 2"),
    (["--rdzv-conf", "join_timeout=1e-9"], {}, "join_timeout (nodes.join_timeout_s) must be from 2"),
    ([], {"SLURM_NODEID": "1", "SLURM_STEP_NUM_NODES": "abc"}, "SLURM_STEP_NUM_NODES is 'abc'"),
    ([], {"SLURM_NODEID": "1", "SLURM_STEP_NUM_NODES": "99999999"}, "SLURM_STEP_NUM_NODES is '99999999'"),
]
for args, extra, words in cases:
    start = time.monotonic()
    p = subprocess.run([DTRAIN, "run"] + args + ["--", "/bin/true"], cwd=run.dir, env=dict(env, **extra),
                       capture_output=True, text=True, timeout=30)
    took = time.monotonic() - start
    check(p.returncode == 2 and words in p.stderr,
          "dtrain run %s %s: exit 2 naming it, got %d: %s" % (" ".join(args), extra, p.returncode, p.stderr[-400:]))
    check(took < 5, "refused before dialing anyone (took %.2f s)" % took)
finish()
