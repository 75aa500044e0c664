"""Where `dtrain run -n N -- /bin/true` spends its time, phase by phase, from the kernel's own timestamps.

Each run is recorded with `perf record -e sched:sched_process_{exec,fork,exit}` (tracepoints: no sampling, a few
microseconds per event), and the phases are read off the launcher's and its local agent's process events:

  launcher start   the launcher's exec to its exec of the local agent (its own start-up, the spec, the run directory)
  agent start      the agent's exec to its first thread (the dynamic loader, static initialisers, option parsing)
  agent ready      the agent's first thread to the first worker's fork by its keeper (node facts, its servers, the
                   session, the round's preparation, StartGroup, the first keeper)
  workers          the first worker's fork to the last worker's exit (N keepers, N execs, N exits)
  agent exit       the last worker's exit to the agent's exit (GroupDone, the launcher's Shutdown, its servers' end)
  launcher exit    the agent's exit to the launcher's (its keeper's report, status.json, events.jsonl, report.html)
  total            the launcher's exec to its exit

Several builds are measured interleaved (A, B, A, B, ...) so that machine noise hits each alike; medians in ms.
Needs perf (Debian's linux-perf) and root (tracepoints). Usage:
    launch_phases.py [--runs 9] [--workers 8] DTRAIN [DTRAIN ...]
"""

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

PHASES = ["launcher start", "agent start", "agent ready", "workers", "agent exit", "launcher exit", "total"]
EVENT = re.compile(r"\s*(\S+)\s+(\d+)\s+\[\d+\]\s+([\d.]+):\s+sched:(\S+):\s*(.*)")


def record(dtrain, workers, workdir):
    """The sched events of one run, as (ms since the launcher's exec, comm, pid, event, fields)."""
    data = os.path.join(workdir, "sched.data")
    subprocess.run(["perf", "record", "-q", "-e", "sched:sched_process_exec,sched:sched_process_fork,"
                    "sched:sched_process_exit", "-o", data, "--", dtrain, "run", "-n", str(workers), "--",
                    "/bin/true"], cwd=workdir, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    text = subprocess.run(["perf", "script", "-i", data], capture_output=True, text=True, check=True).stdout
    events, start = [], None
    for line in text.splitlines():
        m = EVENT.match(line)
        if not m:
            continue
        comm, pid, seconds, event, fields = m.groups()
        start = float(seconds) if start is None else start
        events.append(((float(seconds) - start) * 1000, comm, int(pid), event, fields))
    return events


def phases(events):
    """The phases of one run (see the docstring), or None when a marker is missing."""
    def first(pred):
        return next((e for e in events if pred(e)), None)
    launcher = events[0][2]
    agent = first(lambda e: e[3] == "sched_process_exec" and e[2] != launcher and "/bin/true" not in e[4])
    if agent is None:
        return None
    thread = first(lambda e: e[2] == agent[2] and e[3] == "sched_process_fork")
    # A keeper names itself dtrain-keeper once forked; its first event of its own is the fork of its worker (the
    # launcher has a keeper of its own, the agent's parent, which forked before the agent ran).
    forks = [e for e in events if e[1] == "dtrain-keeper" and e[3] == "sched_process_fork" and thread and
             e[0] > thread[0]]
    exits = [e for e in events if e[1] == "true" and e[3] == "sched_process_exit"]
    agent_exit = first(lambda e: e[3] == "sched_process_exit" and "pid=%d " % agent[2] in e[4])
    launcher_exit = first(lambda e: e[3] == "sched_process_exit" and "pid=%d " % launcher in e[4])
    if not (thread and forks and exits and agent_exit and launcher_exit):
        return None
    first_keeper = forks[0][0]
    return {"launcher start": agent[0], "agent start": thread[0] - agent[0],
            "agent ready": first_keeper - thread[0], "workers": exits[-1][0] - first_keeper,
            "agent exit": agent_exit[0] - exits[-1][0], "launcher exit": launcher_exit[0] - agent_exit[0],
            "total": launcher_exit[0]}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("dtrain", nargs="+")
    args = parser.parse_args()
    if shutil.which("perf") is None:
        sys.exit("launch_phases: needs perf (apt-get install linux-perf)")
    workdir = tempfile.mkdtemp(prefix="dtrain-launch-phases-")
    try:
        taken = {d: [] for d in args.dtrain}
        for _ in range(args.runs):
            for dtrain in args.dtrain:
                got = phases(record(os.path.abspath(dtrain), args.workers, workdir))
                if got:
                    taken[dtrain].append(got)
        print("%-14s" % "phase, ms" + "".join("%12s" % ("build %d" % (i + 1)) for i in range(len(args.dtrain))))
        for phase in PHASES:
            cells = ["%12.1f" % statistics.median(r[phase] for r in taken[d]) if taken[d] else "%12s" % "-"
                     for d in args.dtrain]
            print("%-14s" % phase + "".join(cells))
        for i, dtrain in enumerate(args.dtrain):
            print("build %d: %s (%d runs of %d)" % (i + 1, dtrain, len(taken[dtrain]), args.runs))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
