"""What a quiet job costs: one `dtrain launch` (provider local, 2 nodes, one `sleep` worker each) left alone for
--seconds, and the CPU time of the launcher and of each agent over that span, per process and per thread, from
/proc/PID/task/TID/schedstat (nanoseconds on the CPU). The thread named dtrain-looplag is LoopLag's 50 ms ticker
(common/os/loop_lag.h): one in the launcher, one per agent session.

    /usr/bin/python3 scripts/bench/idle_cost.py --dtrain build/bin/dtrain [--seconds 60]
"""

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time


def threads(pid):
    """{(tid, name): ns on the CPU} of every thread of `pid`."""
    out = {}
    try:
        tids = os.listdir("/proc/%d/task" % pid)
    except OSError:
        return out
    for tid in tids:
        try:
            with open("/proc/%d/task/%s/comm" % (pid, tid)) as f:
                name = f.read().strip()
            with open("/proc/%d/task/%s/schedstat" % (pid, tid)) as f:
                out[(int(tid), name)] = int(f.read().split()[0])
        except OSError:
            pass
    return out


def children(pid):
    """Every descendant of `pid`, with its comm."""
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        kids = []
        try:
            for tid in os.listdir("/proc/%d/task" % p):   # a child is listed under the thread that forked it
                with open("/proc/%d/task/%s/children" % (p, tid)) as f:
                    kids += [int(x) for x in f.read().split()]
        except OSError:
            pass
        for k in kids:
            try:
                with open("/proc/%d/comm" % k) as f:
                    found.append((k, f.read().strip()))
            except OSError:
                pass
            todo.append(k)
    return found


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--dtrain", required=True)
    parser.add_argument("--seconds", type=float, default=60)
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="dtrain-idle-")
    spec = os.path.join(work, "job.yaml")
    with open(spec, "w") as f:
        f.write("name: idle\nnodes: {provider: local, count: 2}\nworkers_per_node: 1\n"
                "command: [sleep, '%d']\nlogs: {dir: %s, console: none}\n" % (args.seconds + 30, work))
    launcher = subprocess.Popen([args.dtrain, "launch", spec], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(5)
        agents = [p for p, name in children(launcher.pid) if name == "dtrain"]
        watched = [("launcher", launcher.pid)] + [("agent %d" % i, p) for i, p in enumerate(agents)]
        before = {who: threads(pid) for who, pid in watched}
        time.sleep(args.seconds)
        after = {who: threads(pid) for who, pid in watched}
    finally:
        launcher.send_signal(signal.SIGINT)
        try:
            launcher.wait(timeout=30)
        except subprocess.TimeoutExpired:
            launcher.kill()
            launcher.wait()
        shutil.rmtree(work, ignore_errors=True)
    print("| process | threads | CPU over %.0f s (ms) | share of a core | of it, the dtrain-looplag ticker (ms) |"
          % args.seconds)
    print("| --- | ---: | ---: | ---: | ---: |")
    for who, _ in watched:
        spent = {k: after[who][k] - before[who].get(k, 0) for k in after[who]}
        total = sum(spent.values()) / 1e6
        ticker = sum(v for (tid, name), v in spent.items() if name == "dtrain-looplag") / 1e6
        print("| %s | %d | %.1f | %.4f%% | %.1f |" % (who, len(spent), total, 100.0 * total / 1000.0 / args.seconds,
                                                     ticker))
    return 0


if __name__ == "__main__":
    sys.exit(main())
