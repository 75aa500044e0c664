"""The launcher's event log, `dtrain status` and its diagnoses, on a real job: 2 local nodes x 2 workers that send
health reports over gRPC as dtrain-trainer does, with a per-step breakdown; rank 2's data loader is slow (38 ms of
data wait where its peers have 3, while they wait for it in the gradient reduction).
  - while the job runs, `dtrain status RUN_DIR --json` answers through the control socket (mode 0600): every rank
    running with its pid and step, and the straggler named; `dtrain status` with no argument picks the newest job
    under ./runs and prints the table;
  - the summary of the successful job names rank 2 on node 1 as the straggler, with data wait as its cause;
  - afterwards `dtrain status --json` reads the last snapshot (state succeeded), the socket is gone, and
    events.jsonl holds one JSON object per line: job_start, round_start, 4 worker_started, health snapshots, the
    straggler diagnosis, 4 worker_exited, round_end and job_end;
  - `dtrain status --watch` on a pseudo-terminal redraws in place (one clear, then cursor home and line clears) with
    each rank's recent step times as a sparkline, the straggler's in bold red and named; into a pipe, plain ASCII
    blocks one after another;
  - a job whose worker exits 3 ends "failed" in both."""

import json
import os
import pty
import select
import stat
import subprocess
import time

from harness import BUILD_DIR, DTRAIN, PYTHON, REPORTING_WORKER, Run, check, finish, status_json, wait_for, write

SPEC = """
name: %s
nodes: {provider: local, count: 2}
workers_per_node: 2
command: %s
stop: {grace_s: 1}
logs: {dir: runs, console: none}
"""


def status(run, *args):
    done = subprocess.run([DTRAIN, "status"] + list(args), cwd=run.dir, capture_output=True, text=True, timeout=30)
    return done


# ---- a successful job with a straggler
run = Run([], env={"PYTHONPATH": os.path.join(BUILD_DIR, "python")}, timeout=150)
stop_file = os.path.join(run.dir, "stop")
command = "[%s, %s, %s, 90]" % (PYTHON, write(os.path.join(run.dir, "worker.py"), REPORTING_WORKER), stop_file)
run.args += ["launch", write(os.path.join(run.dir, "job.yaml"), SPEC % ("straggler", command))]
run.start()
job_dir = wait_for("the job's directory", lambda: (run.job_dirs() or [None])[0], 30)
sock = os.path.join(job_dir or "", "control.sock")
wait_for("the control socket", lambda: os.path.exists(sock), 30)
mode = os.stat(sock).st_mode
check(stat.S_ISSOCK(mode) and stat.S_IMODE(mode) == 0o600, "control.sock is a socket of mode 0600: %o" % mode)


def all_running():
    s = status_json(run, job_dir)
    ranks = s.get("ranks", [])
    return s if len(ranks) == 4 and all(r["state"] == "running" and r["step"] > 0 for r in ranks) else None


live = wait_for("every rank running and reporting", all_running, 30) or {}
check(live.get("state") == "running" and live.get("job") == os.path.basename(job_dir or ""),
      "status names the running job: %s" % live.get("job"))
check(all(r["pid"] > 0 and r["report_age_s"] is not None and r["report_age_s"] < 5 for r in live.get("ranks", [])),
      "each rank has its pid and a fresh report: %s" % live.get("ranks"))
check([r["node"] for r in live.get("ranks", [])] == [0, 0, 1, 1], "ranks 0-1 on node 0, 2-3 on node 1")


def straggler_named():
    s = status_json(run, job_dir)
    found = [d for d in s.get("diagnoses", []) if d["kind"] == "straggler"]
    return found or None


found = wait_for("the straggler in `dtrain status --json`", straggler_named, 40) or [{}]
check(found[0].get("ranks") == [2], "the straggler is rank 2: %s" % found)
check("rank 2 on node 1 (" in found[0].get("message", "") and "of its step was data wait" in found[0].get("message", ""),
      "named with its node and data wait as its cause: %s" % found[0].get("message"))
row = [r for r in status_json(run, job_dir).get("ranks", []) if r["rank"] == 2]
check(row and abs(row[0]["data_wait_ratio"] - 0.38) < 0.01, "rank 2's data wait ratio is 38%%: %s" % row)
table = status(run)
check(table.returncode == 0 and "diagnosis (straggler): rank 2 on node 1" in table.stdout and "tokens/s" in table.stdout,
      "`dtrain status` with no argument shows the newest job's table:\n" + table.stdout + table.stderr)

def watch(terminal, seconds=3.5):
    """`dtrain status --watch` for a few refreshes, its stdout a pseudo-terminal or a pipe; returns what it wrote."""
    if terminal:
        leader, follower = pty.openpty()
        proc = subprocess.Popen([DTRAIN, "status", "--watch", job_dir], stdout=follower, stderr=subprocess.PIPE,
                                env=dict(os.environ, TERM="xterm"))
        os.close(follower)
    else:
        proc = subprocess.Popen([DTRAIN, "status", "--watch", job_dir], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        leader = proc.stdout.fileno()
    out = b""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        ready, _, _ = select.select([leader], [], [], 0.2)
        if ready:
            try:
                out += os.read(leader, 65536)
            except OSError:
                break
    proc.kill()
    proc.wait()
    if terminal:
        os.close(leader)
    return out.decode("utf-8", "replace")


shown = watch(True)
frames = shown.count("\033[H")
check(frames >= 2 and shown.count("\033[2J") == 1 and "\033[K" in shown and "\033[J" in shown,
      "--watch on a terminal clears once, then redraws in place (%d frames): %r" % (frames, shown[:300]))
rank2 = [line for line in shown.split("\n") if line.lstrip().startswith("2 ")]
check(rank2 and "\033[1;31m\u2584" in rank2[-1] and rank2[-1].rstrip("\r").replace("\033[K", "").endswith("straggler"),
      "the straggler's sparkline is drawn in bold red and named: %r" % rank2[-1:])
rank0 = [line for line in shown.split("\n") if line.lstrip().startswith("0 ")]
check(rank0 and "\u2584\u2584\u2584" in rank0[-1] and "\033[1;31m" not in rank0[-1],
      "an even rank's recent steps are a flat sparkline, not red: %r" % rank0[-1:])
piped = watch(False, 2.5)
check("\033" not in piped and piped.count("recent steps") >= 2,
      "--watch into a pipe prints plain blocks one after another: %r" % piped[:300])
check(any(line.startswith("    2 ") and line.endswith(" straggler") and "~~~" in line for line in piped.splitlines()),
      "and names the straggler in words, its sparkline in ASCII:\n" + piped)

write(stop_file, "")
run.wait()
run.show()
check(run.code == 0, "the job succeeds, got %s" % run.code)
check("diagnosis (straggler): rank 2 on node 1 (" in run.err and "slower than the median: 38% of its step was data wait"
      in run.err, "the summary of a successful job names the straggler")
check("diagnosis (data_loading): data wait is 38% of rank 2" in run.err, "and the data loading diagnosis")
check(not os.path.exists(sock), "the control socket is removed at the end")
after = status_json(run, os.path.basename(job_dir))
check(after.get("state") == "succeeded", "after the end, status reads the snapshot: %s" % after.get("state"))
check(any(d["kind"] == "straggler" for d in after.get("diagnoses", [])), "with the diagnoses")

with open(os.path.join(job_dir, "events.jsonl")) as f:
    lines = f.read().splitlines()
events = []
for line in lines:
    try:
        events.append(json.loads(line))
    except ValueError:
        check(False, "events.jsonl line is JSON: %r" % line)
kinds = [e.get("event") for e in events]
check(kinds[0] == "job_start" and kinds[-1] == "job_end", "events start with job_start and end with job_end: %s"
      % kinds[:3])
check(kinds.count("worker_started") == 4 and kinds.count("worker_exited") == 4, "4 workers started and exited")
check(all("ts" in e for e in events), "every event has ts")
check(kinds.count("round_start") == 1 and kinds.count("round_end") == 1, "one round")
check("health" in kinds, "a health snapshot")
started = [e for e in events if e.get("event") == "worker_started"]
check(sorted((e["rank"], e["node"]) for e in started) == [(0, 0), (1, 0), (2, 1), (3, 1)] and
      all(e["pid"] > 0 for e in started), "worker_started has rank, node and pid: %s" % started)
diagnosis = [e for e in events if e.get("event") == "diagnosis" and e.get("kind") == "straggler"]
check(diagnosis and diagnosis[0]["ranks"] == [2], "the straggler diagnosis is an event")
end = events[-1] if events else {}
check(end.get("outcome") == "succeeded" and end.get("exit_code") == 0, "job_end says succeeded: %s" % end)
run.assert_no_leaks()

# ---- a failed job
failed = Run([], timeout=120)
failed.args += ["launch", write(os.path.join(failed.dir, "job.yaml"),
                                SPEC % ("fails", "[%s, -c, 'import sys; sys.exit(3)']" % PYTHON))]
failed.run()
check(failed.code == 3, "a worker that exits 3 fails the job with 3, got %s" % failed.code)
snapshot = status_json(failed)
check(snapshot.get("state") == "failed", "status of the failed job: %s" % snapshot.get("state"))
with open(os.path.join(failed.job_dirs()[0], "events.jsonl")) as f:
    events = [json.loads(line) for line in f]
exits = [e for e in events if e["event"] == "worker_exited" and e["outcome"] == "failed"]
check(exits and exits[0]["exit_code"] == 3, "a worker_exited event with outcome failed and its code")
check(events[-1]["event"] == "job_end" and events[-1]["outcome"] == "failed", "job_end says failed")
failed.assert_no_leaks()

finish()
