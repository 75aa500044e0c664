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


def spec_text(n, workers, port, logs, node_timeout_s, pad):
    # The padding is an argument: each worker's argv goes in the StartGroup whole, where a variable every worker
    # shares would go once (StartGroup.common_env).
    command = "[/bin/true, '%s']" % ("x" * pad) if pad else "[/bin/true]"
    return ("name: fleet\nnodes: {provider: join, count: %d, rendezvous: '127.0.0.1:%d', join_timeout_s: 120}\n"
            "workers_per_node: %d\ncommand: %s\nbinding: none\nhealth: {node_timeout_s: %d}\n"
            "stop: {grace_s: 1}\nlogs: {dir: %s, console: none}\n" % (n, port, workers, command, node_timeout_s, logs))


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


def run_case(dtrain, sim, kind, n, workers, run_ms, timeout_s=SIM_TIMEOUT_S, node_timeout_s=None):
    work = tempfile.mkdtemp(prefix="dtrain-fleet-")
    port = free_port()
    if node_timeout_s is None:
        node_timeout_s = {"lost": 5, "cut": 5, "stall": 3}.get(kind, 30)
    spec = os.path.join(work, "job.yaml")
    with open(spec, "w") as f:
        f.write(spec_text(n, workers, port, os.path.join(work, "logs"), node_timeout_s,
                          32 * 1024 if kind == "stall" else 0))
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
    sim_run = subprocess.run(args, stdout=subprocess.PIPE, text=True, env=env)
    out = sim_run.stdout
    status, usage = wait_launcher(launcher)
    wall = time.monotonic() - t0
    report = json.loads(out) if out.strip() else {}
    report.update(sim_code=sim_run.returncode, node_timeout_s=node_timeout_s, kind=kind, n=n, ranks=n * workers, code=os.waitstatus_to_exitcode(status), launcher_wall_s=wall,
                  launcher_cpu_s=usage.ru_utime + usage.ru_stime, launcher_rss_mib=usage.ru_maxrss / 1024.0)
    report["launcher_err"] = open(os.path.join(work, "launcher.err")).read()[-3000:]
    if report["code"] != 0 and (kind == "scale" or kind.startswith("plain")):
        sys.stderr.write(report["launcher_err"])
    shutil.rmtree(work, ignore_errors=True)
    return report


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


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--dtrain", required=True)
    parser.add_argument("--sim", required=True)
    parser.add_argument("--cases", default="scale:256,scale:1024,scale:4096,plain:4096,lost:4096,stall:1024")
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--run-ms", type=int, default=1000)
    parser.add_argument("--json", help="also write every report to this file")
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
        r = run_case(args.dtrain, args.sim, kind, int(n), args.workers, args.run_ms,
                     node_timeout_s=args.node_timeout_s)
        reports.append(r)
        notes = ""
        if kind == "cut":
            notes = "job ended %s s after the first dial (the cut 2 s after StartGroup)" % seconds(r, "all_closed")
        if kind == "lost":
            notes = "lost agent given up %s ms after it went silent (node_timeout_s %d)" % (
                r.get("drop_detect_ms"), r["node_timeout_s"])
        if kind == "stall":
            notes = "others' longest launcher silence %s ms, leases lost %s; stalled agent: %s" % (
                r.get("healthy_max_launcher_gap_ms"), r.get("healthy_lease_lost"), json.dumps(r.get("stalled")))
        print("| %s | %d | %d | %d | %s | %s | %s | %s | %.2f | %.2f | %.0f | %.2f | %s |" % (
            kind, r["n"], r["ranks"], r["code"], seconds(r, "all_configured"), seconds(r, "all_started"),
            seconds(r, "all_exited"), seconds(r, "all_closed"), r["launcher_cpu_s"],
            1000.0 * r["launcher_cpu_s"] / r["n"], r["launcher_rss_mib"], r.get("sim_cpu_s", -1), notes), flush=True)
    print_cpu_by_phase(reports)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(reports, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
