"""Launcher CPU per health report: `dtrain run -n N --nodes M` with workers that send gRPC health reports
(WorkerReports.Report, as dtrain-trainer's reporter does) as fast as they can up to a target rate for --seconds,
against the same job whose workers send one report and then only wait out the same time. The launcher's CPU time
(utime + stime of the `dtrain run` process alone, not its agents or workers: read from /proc/PID/stat once it has
exited and before it is reaped) of the reporting job less that of the
quiet one, divided by the reports the agents forwarded, is its cost per report; times 1,000 it is the share of a core
the launcher spends at 1,000 reports per second. Runs alternate quiet/reporting, --runs pairs; medians."""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

WORKER = r"""
import os, sys, time
import grpc
from dtrain.v1 import report_pb2, report_pb2_grpc
rank = int(os.environ["RANK"])
rate, seconds, out = float(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
stub = report_pb2_grpc.WorkerReportsStub(grpc.insecure_channel(os.environ["DTRAIN_AGENT_ADDR"]))
meta = [("dtrain-token", os.environ["DTRAIN_JOB_TOKEN"]), ("dtrain-report-token", os.environ["DTRAIN_REPORT_TOKEN"])]
sent, start = 0, time.monotonic()
while True:
    now = time.monotonic() - start
    if now >= seconds:
        break
    if rate > 0 and sent < rate * now or sent == 0:
        sent += 1
        stub.Report(report_pb2.WorkerReport(rank=rank, step=sent, steps_done=sent, loss=3.0, tokens_per_s=1000.0,
                                            rss_bytes=1 << 30), metadata=meta, timeout=10)
    else:
        time.sleep(0.0005 if rate > 0 else 0.05)
with open(os.path.join(out, f"rank_{rank}"), "w") as f:
    f.write(str(sent))
"""


def one_job(args, work, rate_per_worker):
    out = tempfile.mkdtemp(dir=work)
    script = os.path.join(work, "worker.py")
    argv = [args.dtrain, "run", "-n", str(args.ranks // args.nodes), "--nodes", str(args.nodes), "--logs-dir",
            os.path.join(work, "runs"), "--", args.python, script, str(rate_per_worker), str(args.seconds), out]
    env = dict(os.environ, PYTHONPATH=os.path.join(args.build, "python"))
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=work)
    err = proc.stderr.read().decode(errors="replace")
    os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)   # exited, not yet reaped: its /proc entry stays
    with open(f"/proc/{proc.pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")   # utime, stime (fields 14, 15)
    proc.wait()
    if proc.returncode != 0:
        sys.exit(f"job failed ({proc.returncode}):\n{err[-3000:]}")
    reports = sum(int(open(os.path.join(out, f)).read()) for f in os.listdir(out))
    return cpu, reports


def main():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", default=os.path.join(root, "build"))
    parser.add_argument("--python", default="/usr/bin/python3", help="a Python with grpcio")
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--rate", type=float, default=1000, help="reports per second, all workers together")
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    args.dtrain = os.path.join(args.build, "bin", "dtrain")
    work = tempfile.mkdtemp(prefix="dtrain-bench-reports-")
    quiet, busy, counts = [], [], []
    done = False
    try:
        with open(os.path.join(work, "worker.py"), "w") as f:
            f.write(WORKER)
        for r in range(args.runs):
            q_cpu, _ = one_job(args, work, 0)
            b_cpu, n = one_job(args, work, args.rate / args.ranks)
            quiet.append(q_cpu)
            busy.append(b_cpu)
            counts.append(n)
            print(f"run {r + 1}: quiet job {q_cpu:.3f} s CPU; reporting job {b_cpu:.3f} s CPU, {n} reports "
                  f"({n / args.seconds:.0f}/s)", file=sys.stderr, flush=True)
        done = True
    finally:
        if done:
            shutil.rmtree(work, ignore_errors=True)  # the jobs' run directories and logs: the disk is shared
        else:
            print(f"kept {work}: the failed job's logs are there", file=sys.stderr)
    per_report = [(b - q) / n for b, q, n in zip(busy, quiet, counts)]
    median = statistics.median(per_report)
    print(f"{args.ranks} ranks on {args.nodes} nodes, {args.seconds:.0f} s, target {args.rate:.0f} reports/s, "
          f"achieved {statistics.median(counts) / args.seconds:.0f}/s (median of {args.runs})")
    print(f"launcher CPU: quiet job {statistics.median(quiet):.3f} s, reporting job {statistics.median(busy):.3f} s")
    print(f"launcher CPU per report: {median * 1e6:.1f} us (runs: {', '.join(f'{x * 1e6:.1f}' for x in per_report)})")
    print(f"at 1,000 reports/s: {median * 1000 * 100:.1f}% of one core")


if __name__ == "__main__":
    main()
