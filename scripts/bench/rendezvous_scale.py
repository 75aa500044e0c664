"""Rendezvous at scale: N real agents (separate `dtrain agent --join` processes on loopback) x 4 workers each.

Each worker is dtrain-store-ping: it sets its key in the job store on node 0's agent and waits for rank 0's key.
Measured from the moment the launcher and the agents are started (together, as a scheduler would):
  - workers started: when the launcher reports every worker of the round started;
  - job end: when the launcher exits (every worker exited 0 and every agent was shut down);
  - store ops/s: the 2 store operations of every worker (set + blocking get) over the window in which they ran
    (from the first worker start the launcher saw to the end of the round), an aggregate, not a peak.
Reports per-agent cost (wall time / agents) so growth with N is visible.
"""

import argparse
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time


def run(dtrain, ping, agents, workers, port):
    work = tempfile.mkdtemp(prefix="dtrain-scale-")
    spec = os.path.join(work, "job.yaml")
    with open(spec, "w") as f:
        f.write("name: scale\nnodes: {provider: join, count: %d, rendezvous: '127.0.0.1:%d', join_timeout_s: 120}\n"
                "workers_per_node: %d\ncommand: [%s]\nbinding: none\nhealth: {node_timeout_s: 60}\n"
                "logs: {dir: %s, console: none}\n" % (agents, port, workers, ping, os.path.join(work, "logs")))
    # Sessions need the cluster token on loopback too: launcher and agents share a fresh secret.
    secret = os.path.join(work, "secret")
    subprocess.run([dtrain, "secret", "init", "--dir", secret], check=True, stdout=subprocess.DEVNULL)
    env = dict(os.environ, DTRAIN_SECRET_DIR=secret)
    t0 = time.monotonic()
    launcher = subprocess.Popen([dtrain, "launch", spec], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                env=env)
    procs = []
    for _ in range(agents):
        procs.append(subprocess.Popen([dtrain, "agent", "--join", "127.0.0.1:%d" % port, "--quiet",
                                       "--join-timeout-s", "120"],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env))
    spawned = time.monotonic() - t0
    started_at = [None]
    lines = []

    def read():
        for line in launcher.stderr:
            lines.append(line)
            if "workers started" in line and started_at[0] is None:
                started_at[0] = time.monotonic() - t0

    reader = threading.Thread(target=read)
    reader.start()
    code = launcher.wait(timeout=600)
    ended = time.monotonic() - t0
    reader.join()
    for p in procs:
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
    round_ms = None
    for line in lines:
        m = re.search(r"all (\d+) workers started on (\d+) nodes in (\d+) ms", line)
        if m:
            round_ms = int(m.group(3))
    shutil.rmtree(work, ignore_errors=True)
    if code != 0:
        sys.stderr.write("".join(lines[-20:]))
    return {"code": code, "spawned": spawned, "started": started_at[0], "ended": ended, "round_ms": round_ms}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--dtrain", required=True)
    parser.add_argument("--ping", required=True)
    parser.add_argument("--agents", default="64,256,512")
    parser.add_argument("--workers", type=int, default=4)
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    print("| agents | ranks | exit | agents spawned (s) | all workers started (s) | job end (s) | end per agent (ms) | store ops/s |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    results = []
    for n in [int(x) for x in args.agents.split(",")]:
        r = run(args.dtrain, args.ping, n, args.workers, 29700 + n % 200)
        ranks = n * args.workers
        started = r["started"] if r["started"] is not None else float("nan")
        window = r["ended"] - started if r["started"] is not None else float("nan")
        ops = 2 * ranks / window if window and window > 0 else float("nan")
        print("| %d | %d | %d | %.2f | %.2f | %.2f | %.1f | %.0f |" % (
            n, ranks, r["code"], r["spawned"], started, r["ended"], 1000 * r["ended"] / n, ops), flush=True)
        results.append((n, r))
    return 0 if all(r["code"] == 0 for _, r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
