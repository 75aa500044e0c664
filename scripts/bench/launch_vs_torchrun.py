"""Launch and teardown, dtrain vs torchrun (Debian's torch), side by side in one run on this machine.

(a) startup: wall time of 8 no-op workers (/bin/true), launcher start to launcher exit.
(b) teardown: rank 1 exits 1 at t0 (it writes t0 just before exiting) while 7 ranks sit in `sh -c 'sleep 300'`;
    time from t0 to the launcher's exit, and whether anything of the job is left running afterwards.
Runs are interleaved (dtrain, torchrun, torchrun 0.1 s, dtrain, ...) so machine noise hits all alike; medians.
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

TORCHRUN = ["/usr/bin/python3", "-m", "torch.distributed.run"]


def leftovers(tag):
    needle = ("DTRAIN_BENCH_TAG=" + tag).encode()
    left = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open("/proc/%s/environ" % entry, "rb") as f:
                if needle in f.read().split(b"\0"):
                    with open("/proc/%s/stat" % entry) as s:
                        if s.read().rsplit(")", 1)[1].split()[0] != "Z":
                            left.append(int(entry))
        except OSError:
            pass
    return left


def timed(argv, workdir, tag):
    env = dict(os.environ, DTRAIN_BENCH_TAG=tag)
    start = time.monotonic_ns()
    proc = subprocess.run(argv, cwd=workdir, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                          timeout=600)
    end_mono = time.monotonic_ns()
    end_wall = time.time_ns()
    return proc.returncode, (end_mono - start) / 1e6, end_wall


def commands(dtrain, kind, workdir, logdir, program):
    if kind == "dtrain":
        return [dtrain, "run", "-n", "8", "--grace-s", "5", "--logs-dir", logdir, "--"] + program
    base = TORCHRUN + ["--standalone", "--nproc_per_node=8", "--redirects", "1", "--tee", "1", "--log_dir", logdir]
    if kind == "torchrun-0.1s":
        base += ["--monitor_interval", "0.1"]
    return base + ["--no_python"] + program


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--dtrain", required=True)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    kinds = ["dtrain", "torchrun", "torchrun-0.1s"]
    work = tempfile.mkdtemp(prefix="dtrain-bench-")
    startup = {k: [] for k in kinds}
    teardown = {k: [] for k in kinds}
    leaks = {k: 0 for k in kinds}
    codes = {k: set() for k in kinds}
    script = os.path.join(work, "fail.sh")
    with open(script, "w") as f:
        f.write('if [ "$RANK" = 1 ]; then sleep 1; date +%s%N > "$T0_FILE"; exit 1; fi\nexec sh -c "sleep 300"\n')
    for i in range(args.runs):
        for kind in kinds:
            logdir = os.path.join(work, "logs-%s-%d" % (kind, i))
            tag = uuid.uuid4().hex
            code, ms, _ = timed(commands(args.dtrain, kind, work, logdir, ["/bin/true"]), work, tag)
            if code != 0:
                print("%s startup run %d exited %d" % (kind, i, code), file=sys.stderr)
            startup[kind].append(ms)

            t0_file = os.path.join(work, "t0-%s-%d" % (kind, i))
            os.environ["T0_FILE"] = t0_file
            tag = uuid.uuid4().hex
            code, _, end_wall = timed(commands(args.dtrain, kind, work, logdir + "-fail", ["/bin/sh", script]), work, tag)
            codes[kind].add(code)
            with open(t0_file) as f:
                t0 = int(f.read().strip())
            teardown[kind].append((end_wall - t0) / 1e6)
            time.sleep(0.2)
            left = leftovers(tag)
            if left:
                leaks[kind] += len(left)
                for pid in left:
                    try:
                        os.kill(pid, 9)
                    except OSError:
                        pass
    shutil.rmtree(work, ignore_errors=True)

    med = {k: statistics.median(v) for k, v in startup.items()}
    tmed = {k: statistics.median(v) for k, v in teardown.items()}
    print("| launcher | (a) 8 x /bin/true, median ms | ratio to dtrain | (b) teardown after rank exit, median ms | ratio to dtrain | launcher exit codes (b) | processes left after (b), all runs |")
    print("| --- | ---: | ---: | ---: | ---: | --- | ---: |")
    for k in kinds:
        print("| %s | %.0f | %.2f | %.0f | %.2f | %s | %d |" % (
            k, med[k], med[k] / med["dtrain"], tmed[k], tmed[k] / tmed["dtrain"],
            ",".join(str(c) for c in sorted(codes[k])), leaks[k]))
    print()
    print("runs per cell: %d; all samples (ms):" % args.runs)
    for k in kinds:
        print("  %-14s startup %s" % (k, " ".join("%.0f" % x for x in startup[k])))
        print("  %-14s teardown %s" % (k, " ".join("%.0f" % x for x in teardown[k])))
    ok = med["dtrain"] < 150 and tmed["dtrain"] < 300 and leaks["dtrain"] == 0
    print("\ntargets: (a) dtrain median < 150 ms: %s; (b) < 300 ms and nothing left: %s" % (
        "met" if med["dtrain"] < 150 else "MISSED", "met" if tmed["dtrain"] < 300 and leaks["dtrain"] == 0 else "MISSED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
