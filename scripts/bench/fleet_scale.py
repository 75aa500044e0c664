"""The launcher at scale: one real `dtrain launch` (provider join) and dtrain-fleet-sim holding N simulated agents,
each a real TLS session with the cluster token, x W workers that "run" --run-ms and exit 0. No worker processes:
what is measured is the launcher (and gRPC/TLS on both sides), not process start-up.

Cases (each a fresh launcher and simulator):
  scale N    N agents, everything succeeds: the phases as the agents saw them (all hellos answered, all StartGroups
             received, all exits sent, all sessions ended = job end), from the first dial; the launcher's CPU
             (user+sys, from wait4) and peak RSS; CPU per agent
  plain N    the same over plaintext (--insecure on both sides): the difference is what TLS costs
  plain-unbatched N  plain, with every agent message in a write of its own (dtrain-fleet-sim --no-batch): what
             the agents' batching (agent/session/message_batch.h) is worth
  lost N     one agent goes silent 2 s after its StartGroup: how long the launcher takes to give it up
             (health.node_timeout_s 5), and the job's end (it fails: a node was lost, no restarts)
  cut N      one agent cuts its session 2 s after its StartGroup: the launcher hears of it from the connection at
             once; the job's end (it fails)
  health N   N agents whose W workers each report at --report-hz (as dtrain-trainer does; the simulator coalesces
             them as an agent's Outbox does) for --health-run-s, one straggler (rank 5: its steps take twice as
             long, 60% data wait): the launcher's CPU over the reporting span (from every agent's first reports to
             the workers' exits, in cores), how long after every rank reported the straggler diagnosis reached
             events.jsonl, `dtrain status --json JOB_DIR` and a GET /metrics while it runs (the slowest of 3 each),
             the report page's time and size afterwards (`dtrain report`), and whether any node was lost
  stall N    one agent stops reading its stream after Configure while the launcher has a large StartGroup for it
             (each worker's command padded with a 32 KiB argument: each StartGroup is 256 KiB): the longest
             launcher silence any other agent saw, and whether any
             other agent's lease (node_timeout_s 3) ran out

    scripts/bench/fleet_scale.sh [--cases scale:256,scale:1024,scale:4096,plain:4096,lost:4096,stall:1024]
"""

import argparse
import json
import os
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time

# Each phase is timed by the simulator from its first dial; the run's deadline is generous for a loaded machine.
SIM_TIMEOUT_S = 300
# After the simulator's last session ended, the launcher has only its shutdown left (stop.grace_s 1 and margins).
LAUNCHER_EXIT_S = 30


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spec_text(n, workers, port, logs, node_timeout_s, pad, metrics_port=0):
    # The padding is an argument: each worker's argv goes in the StartGroup whole, where a variable every worker
    # shares would go once (StartGroup.common_env).
    command = "[/bin/true, '%s']" % ("x" * pad) if pad else "[/bin/true]"
    return ("name: fleet\nnodes: {provider: join, count: %d, rendezvous: '127.0.0.1:%d', join_timeout_s: 120}\n"
            "workers_per_node: %d\ncommand: %s\nbinding: none\nhealth: {node_timeout_s: %d}\n"
            "stop: {grace_s: 1}\nlogs: {dir: %s, console: none}\n" % (n, port, workers, command, node_timeout_s, logs)
            + ("observe: {metrics_addr: '127.0.0.1:%d'}\n" % metrics_port if metrics_port else ""))


def timed(call):
    """(seconds, result) of call()."""
    began = time.monotonic()
    result = call()
    return time.monotonic() - began, result


def exited_within(process, seconds):
    """Whether `process` exits within `seconds`, without reaping it (wait_launcher reads its rusage)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
            return True
        time.sleep(0.05)
    return False


def watch_health(dtrain, logs, metrics_port, sim, launcher, report):
    """While the simulator runs: the straggler diagnosis's time (its events.jsonl ts), and the slowest of 3 status
    and /metrics answers once the ranks report. Fills `report`. A probe that fails because the job ended meanwhile
    (the launcher exited within 2 s of it) is not an error."""
    import glob
    import urllib.request
    straggler_ts, status_s, metrics_s, status_bytes, metrics_bytes, errors = None, [], [], 0, 0, []
    next_probe = time.monotonic() + 15
    while sim.poll() is None:
        time.sleep(0.5)
        dirs = glob.glob(os.path.join(logs, "*", "events.jsonl"))
        if not dirs:
            continue
        job_dir = os.path.dirname(dirs[0])
        if straggler_ts is None:
            with open(dirs[0]) as f:
                for line in f:
                    if '"diagnosis"' in line and '"straggler"' in line:
                        straggler_ts = json.loads(line)["ts"]
                        report["straggler_message"] = json.loads(line).get("message", "")
                        break
        if len(status_s) < 3 and time.monotonic() >= next_probe:
            next_probe = time.monotonic() + 5
            took, done = timed(lambda: subprocess.run([dtrain, "status", "--json", job_dir], capture_output=True,
                                                      timeout=60))
            failed = []
            if done.returncode == 0:
                status_s.append(took)
                status_bytes = len(done.stdout)
            else:
                failed.append("status: " + done.stderr.decode()[-300:])
            try:
                took, body = timed(lambda: urllib.request.urlopen("http://127.0.0.1:%d/metrics" % metrics_port,
                                                                  timeout=60).read())
                metrics_s.append(took)
                metrics_bytes = len(body)
            except OSError as e:
                failed.append("metrics: %s" % e)
            if failed and not exited_within(launcher, 2.0):
                errors += failed
    report.update(straggler_ts=straggler_ts, status_s=status_s, metrics_s=metrics_s, status_bytes=status_bytes,
                  metrics_bytes=metrics_bytes, probe_errors=errors)


def wait_launcher(launcher):
    """(exit status, rusage) of the launcher; killed (and so failing) when it outlives LAUNCHER_EXIT_S."""
    deadline = time.monotonic() + LAUNCHER_EXIT_S
    while True:
        pid, status, usage = os.wait4(launcher.pid, os.WNOHANG)
        if pid:
            return status, usage
        if time.monotonic() > deadline:
            launcher.kill()
            _, status, usage = os.wait4(launcher.pid, 0)
            return status, usage
        time.sleep(0.05)


def run_case(dtrain, sim, kind, n, workers, run_ms, timeout_s=SIM_TIMEOUT_S, node_timeout_s=None, report_hz=1.0,
             health_run_s=40):
    work = tempfile.mkdtemp(prefix="dtrain-fleet-")
    port = free_port()
    if node_timeout_s is None:
        node_timeout_s = {"lost": 5, "cut": 5, "stall": 3}.get(kind, 30)
    spec = os.path.join(work, "job.yaml")
    metrics_port = free_port() if kind == "health" else 0
    logs = os.path.join(work, "logs")
    with open(spec, "w") as f:
        f.write(spec_text(n, workers, port, logs, node_timeout_s, 32 * 1024 if kind == "stall" else 0,
                          metrics_port))
    secret = os.path.join(work, "secret")
    subprocess.run([dtrain, "secret", "init", "--dir", secret], check=True, stdout=subprocess.DEVNULL)
    env = dict(os.environ, DTRAIN_SECRET_DIR=secret)
    insecure = ["--insecure"] if kind.startswith("plain") else []
    t0 = time.monotonic()
    launcher = subprocess.Popen([dtrain, "launch"] + insecure + [spec], stdout=subprocess.DEVNULL,
                                stderr=open(os.path.join(work, "launcher.err"), "w"), env=env)
    args = [sim, "--launcher", "127.0.0.1:%d" % port, "--agents", str(n), "--secret-dir", secret,
            "--run-ms", str(run_ms), "--launcher-pid", str(launcher.pid), "--timeout-s", str(timeout_s)] + insecure
    if kind in ("lost", "cut"):
        args += ["--run-ms", "10000", "--drop", "1", "--drop-mode", "silent" if kind == "lost" else "cut",
                 "--drop-after-ms", "2000"]
    if kind == "stall":
        args += ["--stall-agent", str(n // 2)]
    if kind == "plain-unbatched":
        args += ["--no-batch"]
    watched = {}
    if kind == "health":
        args += ["--run-ms", str(health_run_s * 1000), "--report-hz", str(report_hz), "--straggler-rank", "5"]
        sim_proc = subprocess.Popen(args, stdout=subprocess.PIPE, text=True, env=env)
        watch_health(dtrain, logs, metrics_port, sim_proc, launcher, watched)
        out, sim_code = sim_proc.communicate()[0], sim_proc.returncode
    else:
        sim_run = subprocess.run(args, stdout=subprocess.PIPE, text=True, env=env)
        out, sim_code = sim_run.stdout, sim_run.returncode
    status, usage = wait_launcher(launcher)
    wall = time.monotonic() - t0
    report = json.loads(out) if out.strip() else {}
    report.update(watched)
    if kind == "health":
        import glob
        job_dirs = glob.glob(os.path.join(logs, "*", "events.jsonl"))
        if job_dirs:
            job_dir = os.path.dirname(job_dirs[0])
            took, done = timed(lambda: subprocess.run([dtrain, "report", job_dir], capture_output=True, timeout=120))
            page = os.path.join(job_dir, "report.html")
            report.update(report_page_s=took, report_page_bytes=os.path.getsize(page) if os.path.exists(page) else -1,
                          report_page_code=done.returncode)
            with open(job_dirs[0]) as f:
                report["nodes_lost"] = sum(1 for line in f if '"node_lost"' in line)
    report.update(sim_code=sim_code, node_timeout_s=node_timeout_s, kind=kind, n=n, ranks=n * workers, code=os.waitstatus_to_exitcode(status), launcher_wall_s=wall,
                  launcher_cpu_s=usage.ru_utime + usage.ru_stime, launcher_rss_mib=usage.ru_maxrss / 1024.0)
    err = open(os.path.join(work, "launcher.err")).read()
    report["launcher_err"], report["lost_lines"] = err[-3000:], err.count(" lost: ")
    if report["code"] != 0 and (kind == "scale" or kind.startswith("plain")):
        sys.stderr.write(report["launcher_err"])
    if os.environ.get("DTRAIN_BENCH_KEEP"):
        report["work_dir"] = work
    else:
        shutil.rmtree(work, ignore_errors=True)
    return report


def start_burners(count):
    """`count` CPU-bound processes (busy loops, each ended after SIM_TIMEOUT_S at the latest) at the launcher's and
    the simulator's priority."""
    return [subprocess.Popen(["timeout", str(SIM_TIMEOUT_S), "sh", "-c", "while :; do :; done"],
                             start_new_session=True) for _ in range(count)]


def stop_burners(burners):
    for b in burners:
        os.killpg(b.pid, 9)
        b.wait()


def seconds(report, phase):
    value = report.get(phase + "_ms", -1)
    return "%.2f" % (value / 1000.0) if value >= 0 else "-"


PHASES = (("hellos", "all_configured"), ("start", "all_started"), ("run", "all_exited"), ("end", "all_closed"))


def print_cpu_by_phase(reports):
    """CPU seconds each side spent in each phase (launcher / simulator), from the first dial, read when the
    simulator saw the phase end: what TLS costs is the hellos column of a scale case minus the plain case's. The
    simulator's start-up (its agents' channels and credentials) comes before the first dial and is not counted."""
    print()
    print("| case | agents | " + " | ".join("%s CPU, launcher / sim (s)" % name for name, _ in PHASES) + " |")
    print("| --- | ---: | " + " | ".join("---:" for _ in PHASES) + " |")
    for r in reports:
        cells, last_l, last_s = [], r.get("dial_launcher_cpu_s", 0.0), r.get("dial_sim_cpu_s", 0.0)
        for _, key in PHASES:
            if r.get(key + "_ms", -1) < 0:
                cells.append("-")
                continue
            l, s = r[key + "_launcher_cpu_s"], r[key + "_sim_cpu_s"]
            cells.append("%.2f / %.2f" % (l - last_l, s - last_s))
            last_l, last_s = l, s
        print("| %s | %d | %s |" % (r["kind"], r["n"], " | ".join(cells)), flush=True)


def print_health(reports):
    """The health cases: the launcher under every rank's reports."""
    health = [r for r in reports if r["kind"] == "health"]
    if not health:
        return
    print()
    print("| agents | ranks | reports | launcher cores, reporting span | straggler named after all reported (s) | "
          "status --json, slowest (s) | /metrics, slowest (s) | report page (s, MB) | nodes lost | exit |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: |")
    for r in health:
        span_s = (r.get("all_exited_ms", -1) - r.get("all_reporting_ms", -1)) / 1000.0
        cores = ((r.get("all_exited_launcher_cpu_s", 0) - r.get("all_reporting_launcher_cpu_s", 0)) / span_s
                 if span_s > 0 and r.get("all_reporting_ms", -1) >= 0 else float("nan"))
        named = "never"
        if r.get("straggler_ts") and r.get("all_reporting_ms", -1) >= 0:
            named = "%.1f" % ((r["straggler_ts"] - r["t0_unix_ms"] - r["all_reporting_ms"]) / 1000.0)
        slowest = lambda xs: "%.2f" % max(xs) if xs else "-"
        print("| %d | %d | %d | %.3f (%.1f s) | %s | %s | %s | %.2f, %.2f | %s | %d |" % (
            r["n"], r["ranks"], r.get("reports", 0), cores, span_s, named, slowest(r.get("status_s", [])),
            slowest(r.get("metrics_s", [])), r.get("report_page_s", -1), r.get("report_page_bytes", -1) / 1e6,
            r.get("nodes_lost", "?"), r["code"]), flush=True)
        if r.get("probe_errors"):
            print("  probe errors: %s" % r["probe_errors"][:3])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--dtrain", required=True)
    parser.add_argument("--sim", required=True)
    parser.add_argument("--cases", default="scale:256,scale:1024,scale:4096,plain:4096,lost:4096,stall:1024")
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--run-ms", type=int, default=1000)
    parser.add_argument("--json", help="also write every report to this file")
    parser.add_argument("--report-hz", type=float, default=1.0, help="health cases: reports per rank per second")
    parser.add_argument("--health-run-s", type=int, default=40, help="health cases: how long the workers report")
    parser.add_argument("--burners", type=int, default=0,
                        help="CPU-bound processes competing for the CPUs during each case (a loaded machine)")
    parser.add_argument("--node-timeout-s", type=int,
                        help="health.node_timeout_s for every case (default: 5 for lost and cut, 3 for stall, else 30)")
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    print("| case | agents | ranks | exit | hellos in (s) | started (s) | exited (s) | job end (s) | launcher CPU (s) "
          "| CPU/agent (ms) | peak RSS (MiB) | sim CPU (s) | notes |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    reports = []
    for case in args.cases.split(","):
        kind, n = case.split(":")
        burners = start_burners(args.burners)
        try:
            r = run_case(args.dtrain, args.sim, kind, int(n), args.workers, args.run_ms,
                         node_timeout_s=args.node_timeout_s, report_hz=args.report_hz, health_run_s=args.health_run_s)
        finally:
            stop_burners(burners)
        r["burners"] = args.burners
        reports.append(r)
        notes = ""
        if r["burners"]:
            notes = ("%d CPU-bound processes alongside: nodes lost %d, the simulator's heartbeats at most %s ms late, "
                     "its writes at most %s ms; " % (r["burners"], r["lost_lines"],
                                                      r.get("healthy_max_heartbeat_late_ms"),
                                                      r.get("healthy_max_write_delay_ms")))
        if kind == "cut":
            notes += "job ended %s s after the first dial (the cut 2 s after StartGroup)" % seconds(r, "all_closed")
        if kind == "lost":
            notes += "lost agent given up %s ms after it went silent (node_timeout_s %d)" % (
                r.get("drop_detect_ms"), r["node_timeout_s"])
        if kind == "stall":
            notes += "others' longest launcher silence %s ms, leases lost %s; stalled agent: %s" % (
                r.get("healthy_max_launcher_gap_ms"), r.get("healthy_lease_lost"), json.dumps(r.get("stalled")))
        print("| %s | %d | %d | %d | %s | %s | %s | %s | %.2f | %.2f | %.0f | %.2f | %s |" % (
            kind, r["n"], r["ranks"], r["code"], seconds(r, "all_configured"), seconds(r, "all_started"),
            seconds(r, "all_exited"), seconds(r, "all_closed"), r["launcher_cpu_s"],
            1000.0 * r["launcher_cpu_s"] / r["n"], r["launcher_rss_mib"], r.get("sim_cpu_s", -1), notes), flush=True)
    print_cpu_by_phase(reports)
    print_health(reports)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(reports, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
