"""`dtrain run` across machines vs torchrun c10d (Debian's torch), side by side in one run, on network-namespace hosts.

Each host is a network namespace on one bridge (tests/integration/netns.py's Cluster); the same command starts on every
host at (nearly) the same moment, torchrun's way:
  dtrain:   dtrain run --secret-dir S --nnodes N --nproc-per-node 2 --rdzv-endpoint H0:PORT --tee 1 worker.py  (TLS)
  torchrun: torchrun --nnodes N --nproc_per_node 2 --rdzv_backend c10d --rdzv_endpoint H0:PORT --rdzv_id ID
                     --redirects 1 --tee 1 --log_dir DIR worker.py   (--redirects/--tee/--log_dir: 1.13's default
                     console handling crashes on Python 3.11)
The worker is a Python script with no torch import (it prints its RANK and exits), so the comparison is the
launchers'; torchrun itself imports torch on every host, dtrain does not. Both launchers' workers run the same
interpreter, /usr/bin/python3: torchrun uses its own (sys.executable), dtrain runs `python3` from PATH, so /usr/bin
goes first on PATH (a pyenv shim first on PATH costs seconds per worker start on a loaded machine).

(a) startup: wall time from starting the commands until every host's command exited, and until the first worker line
    (rank=...) appeared on any host's stdout; pairs alternate (dtrain, torchrun, torchrun, dtrain, ...); medians.
(b) failure: local rank 0 on host 1 exits 3 after 1 s (it writes its wall clock just before exiting) while every other
    worker sleeps 60 s: time from that exit until every host's command exited; runs are capped at --cap-s (90 s) and a
    capped run is reported as a cap (its commands are then killed).
After each run, processes still alive on any host are counted (and killed). Needs root (namespaces).
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "integration"))
from netns import Cluster, require_netns  # noqa: E402

PYTHON = "/usr/bin/python3"
TORCHRUN = [PYTHON, "-m", "torch.distributed.run"]
NPROC = 2
WORKER = r"""
import os, sys, time
e = os.environ
print("rank=%s world=%s host=%s python=%s" % (e["RANK"], e["WORLD_SIZE"], os.uname().nodename, sys.executable),
      flush=True)
if e.get("BENCH_FAIL") == "1":
    if e["LOCAL_RANK"] == "0":
        time.sleep(1)
        with open(e["BENCH_T0"], "w") as f:
            f.write(str(time.time_ns()))
        sys.exit(3)
    time.sleep(60)
elif e.get("BENCH_FAIL") == "0":
    time.sleep(60)
"""


class Launch:
    """One command on one host: its exit time (time.time_ns) and the time of its first worker line."""

    def __init__(self, cluster, i, argv, env, cwd, out_path):
        self.err = open(out_path + ".err", "w")
        self.out_path = out_path
        self.first_line = None
        self.ended = None
        self.lines = []
        self.proc = cluster.spawn(i, argv, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=self.err)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for raw in self.proc.stdout:
            if self.first_line is None and b"rank=" in raw:
                self.first_line = time.time_ns()
            self.lines.append(raw.decode(errors="replace"))
        self.proc.wait()
        self.ended = time.time_ns()

    def finish(self, deadline_ns):
        """Waits until the command ended or deadline_ns (wall); False if it ran past it (then it is killed)."""
        self.reader.join(max(0.0, (deadline_ns - time.time_ns()) / 1e9))
        capped = self.reader.is_alive()
        if capped:
            try:
                os.killpg(self.proc.pid, 9)
            except OSError:
                pass
            self.reader.join(10)
        self.err.close()
        with open(self.out_path + ".out", "w") as f:
            f.writelines(self.lines)
        return not capped


def command(kind, args, c, port, logdir):
    endpoint = "%s:%d" % (c.hosts[0].addr, port)
    if kind == "dtrain":
        return [args.dtrain, "run", "--secret-dir", args.secret, "--nnodes", str(args.hosts), "--nproc-per-node",
                str(NPROC), "--rdzv-endpoint", endpoint, "--tee", "1", "worker.py"]
    return TORCHRUN + ["--nnodes", str(args.hosts), "--nproc_per_node", str(NPROC), "--rdzv_backend", "c10d",
                       "--rdzv_endpoint", endpoint, "--rdzv_id", uuid.uuid4().hex[:12], "--redirects", "1", "--tee",
                       "1", "--log_dir", logdir, "worker.py"]


def leftovers(c):
    """Processes still alive on any host 0.5 s after the commands ended; killed."""
    time.sleep(0.5)
    n = 0
    for i in range(len(c.hosts)):
        for pid in c.pids(i):
            n += 1
            try:
                os.kill(pid, 9)
            except OSError:
                pass
    return n


def one(kind, args, c, work, run_id, fail):
    """Runs the command on every host; returns (codes, start_ns, ends, first_line_ns, t0_ns or None, capped, left)."""
    port = 29400 + run_id % 500
    logdir = os.path.join(work, "logs-%s-%d" % (kind, run_id))
    t0_file = os.path.join(work, "t0-%d" % run_id)
    argv = command(kind, args, c, port, logdir)
    launches = []
    start = time.time_ns()
    for i in range(args.hosts):
        env = {"PATH": "/usr/bin:" + os.environ.get("PATH", "/bin")}
        if fail:
            env.update({"BENCH_FAIL": "1" if i == 1 else "0", "BENCH_T0": t0_file})
        launches.append(Launch(c, i, argv, env, work, os.path.join(work, "%s-%d-h%d" % (kind, run_id, i))))
    deadline = start + int(args.cap_s * 1e9)
    finished = [l.finish(deadline) for l in launches]
    capped = not all(finished)
    left = leftovers(c)
    codes = [l.proc.returncode if ok else None for l, ok in zip(launches, finished)]
    firsts = [l.first_line for l in launches if l.first_line is not None]
    t0 = None
    if fail and os.path.exists(t0_file):
        with open(t0_file) as f:
            t0 = int(f.read().strip())
    end = max(l.ended for l in launches) if not capped else None
    if args.verbose or any(code != (3 if fail else 0) for code in codes):
        for i, l in enumerate(launches):
            with open(l.out_path + ".err") as f:
                tail = f.read()[-1500:]
            print("  [%s run %d host %d exit %s] stderr tail:\n%s" % (kind, run_id, i, codes[i], tail), file=sys.stderr)
    return codes, start, end, (min(firsts) if firsts else None), t0, capped, left


def fmt_ms(x):
    return "-" if x is None else "%.0f" % x


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def ratio(a, b):
    return "-" if a is None or b is None or b == 0 else "%.2f" % (a / b)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dtrain", required=True)
    parser.add_argument("--hosts", type=int, default=2, help="network-namespace hosts (2 or 3)")
    parser.add_argument("--pairs", type=int, default=7, help="alternating startup pairs")
    parser.add_argument("--fail-pairs", type=int, default=1, help="failure-case pairs (each torchrun run may take 60 s+)")
    parser.add_argument("--cap-s", type=float, default=90.0, help="each run is killed after this many seconds")
    parser.add_argument("--verbose", action="store_true", help="print every command's stderr tail")
    args = parser.parse_args()
    if args.hosts < 2:
        parser.error("--hosts must be 2 or more")
    require_netns()
    work = tempfile.mkdtemp(prefix="dtrain-bench-nodes-")
    os.chmod(work, 0o755)
    with open(os.path.join(work, "worker.py"), "w") as f:
        f.write(WORKER)
    args.secret = os.path.join(work, "secret")
    subprocess.run([args.dtrain, "secret", "init", "--dir", args.secret], check=True, stdout=subprocess.DEVNULL)
    kinds = ("dtrain", "torchrun")
    total = {k: [] for k in kinds}
    first = {k: [] for k in kinds}
    codes = {k: set() for k in kinds}
    left = {k: 0 for k in kinds}
    teardown = {k: [] for k in kinds}      # ms, or None for a capped run
    fcodes = {k: set() for k in kinds}
    fleft = {k: 0 for k in kinds}
    run_id = 0
    bench_start = time.monotonic()
    with Cluster(args.hosts, verbose=False) as c:
        print("%d hosts %s, %d workers each; worker: print RANK, exit (no torch import)" % (
            args.hosts, ", ".join(h.addr for h in c.hosts), NPROC))
        print("(a) startup, ms from starting the command on every host: all exited / first worker line")
        for p in range(args.pairs):
            order = kinds if p % 2 == 0 else kinds[::-1]
            row = {}
            for kind in order:
                run_id += 1
                cs, start, end, fl, _, capped, n = one(kind, args, c, work, run_id, False)
                codes[kind].update("cap" if x is None else x for x in cs)
                left[kind] += n
                tot = None if capped else (end - start) / 1e6
                fst = None if fl is None else (fl - start) / 1e6
                total[kind].append(tot)
                first[kind].append(fst)
                row[kind] = "%s %s / %s (exit %s)" % (kind, "cap" if capped else fmt_ms(tot), fmt_ms(fst),
                                                      ",".join(str(x) for x in cs))
            print("  pair %d: %s | %s" % (p + 1, row["dtrain"], row["torchrun"]), flush=True)
        print("(b) failure: host 1's local rank 0 exits 3 after 1 s, others sleep 60 s; ms from its exit to every "
              "host's command exited (cap %.0f s)" % args.cap_s)
        for p in range(args.fail_pairs):
            order = kinds if p % 2 == 0 else kinds[::-1]
            row = {}
            for kind in order:
                run_id += 1
                cs, start, end, _, t0, capped, n = one(kind, args, c, work, run_id, True)
                fcodes[kind].update("cap" if x is None else x for x in cs)
                fleft[kind] += n
                if capped:
                    teardown[kind].append(None)
                    desc = "CAP (%.0f s)" % args.cap_s
                elif t0 is None:
                    teardown[kind].append(None)
                    desc = "no failure time (the failing worker did not run?)"
                else:
                    teardown[kind].append((end - t0) / 1e6)
                    desc = "%.0f" % teardown[kind][-1]
                row[kind] = "%s %s (exit %s)" % (kind, desc, ",".join("cap" if x is None else str(x) for x in cs))
            print("  pair %d: %s | %s" % (p + 1, row["dtrain"], row["torchrun"]), flush=True)
    shutil.rmtree(work, ignore_errors=True)

    m = {k: med(total[k]) for k in kinds}
    f = {k: med(first[k]) for k in kinds}
    print()
    print("| launcher (%d hosts x %d workers) | all commands exited, median ms | first worker line, median ms | "
          "exit codes | processes left, all runs |" % (args.hosts, NPROC))
    print("| --- | ---: | ---: | --- | ---: |")
    for k in kinds:
        print("| %s | %s | %s | %s | %d |" % (k, fmt_ms(m[k]), fmt_ms(f[k]), ",".join(str(x) for x in sorted(
            codes[k], key=str)), left[k]))
    print("| dtrain / torchrun | %s | %s | | |" % (ratio(m["dtrain"], m["torchrun"]), ratio(f["dtrain"], f["torchrun"])))
    print()
    print("| launcher | failure to every command exited, ms (each run) | capped runs | exit codes | processes left |")
    print("| --- | --- | ---: | --- | ---: |")
    for k in kinds:
        print("| %s | %s | %d of %d | %s | %d |" % (
            k, " ".join("cap" if x is None else "%.0f" % x for x in teardown[k]),
            sum(1 for x in teardown[k] if x is None), len(teardown[k]),
            ",".join(str(x) for x in sorted(fcodes[k], key=str)), fleft[k]))
    print()
    print("pairs: %d (startup), %d (failure); all startup samples, ms (all exited / first line):" % (
        args.pairs, args.fail_pairs))
    for k in kinds:
        print("  %-9s %s" % (k, " ".join("%s/%s" % (fmt_ms(a), fmt_ms(b)) for a, b in zip(total[k], first[k]))))
    print("bench wall time: %.0f s" % (time.monotonic() - bench_start))
    return 0


if __name__ == "__main__":
    sys.exit(main())
