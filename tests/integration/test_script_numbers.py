"""Zero-code observation (health.instrument: auto) reports the numbers an unmodified PyTorch script prints itself:
scripts/script_numbers_train.py (gloo DDP, 2 ranks, a tiny language model with a frozen parameter, AdamW) runs under
`dtrain run --standalone --nproc_per_node=2` and writes, per rank and optimizer step, its own loss (the mean of its
micro-batches' losses, before scaling), token ids, samples and step time. Cases:
  K=1             one micro-batch per step, batches from a DataLoader ((x, y) of int64 [B, T]);
  K=4             gradient accumulation, loss / K, the DataLoader: the loss is the sum of the 4 backward()s' (not the
                  last one's, a quarter of it), and tokens are not counted twice (the DataLoader's batch is also the
                  DDP model's first forward argument);
  K=4 scaler      the same with a GradScaler (a CPU stand-in with GradScaler's arithmetic where CUDA is missing: the
                  script says why) whose scale doubles every 3 steps, batches cut from a memmap, no DataLoader: the
                  loss is the unscaled one, and tokens/samples come from the int64 [B, T] the DDP model takes;
  K=1 scaler      one micro-batch with the scaler, no DataLoader.
While each job runs, `dtrain status --json` is read over and over; after it, status.json and events.jsonl's health
events: every rank row at a step past the first (the first step starts where each side begins counting) must
match the script's line for that rank and step: loss to 1e-6 (relative), tokens/s and samples/s to the script's
counts over its step time within 2% (or 5 ms of step time: JITTER_S), and model_params (once the launcher carries
the field) to the script's sum(p.numel() for p in model.parameters() if p.requires_grad), and MFU to 6N x the
script's tokens over its step time, over the rank's peak (its node's fp32 GEMM rate, measured by `dtrain doctor`
into this test's own $XDG_STATE_HOME first), within the same bounds.
The samples events' per-step points (what the report's curves draw): a point for at least 25 of each rank's 30
steps, each with the script's loss (to the 4 significant digits the samples keep) and, from step 3, tokens/s (as
above; their step times summed within 2% of the script's).
  direct          the K=4 scaler case on 1 rank without a launcher, its reports read from the health socket: the
                  report body carries model_params (N, as the script counts it), model_flops_per_token (6N) and
                  device_name ("cpu"), whatever the launcher does with them."""

import glob
import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time

from harness import BOOTSTRAP_DIRS, HELPER_DIR, DTRAIN, PYTHON, Run, check, finish, health_env

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripts", "script_numbers_train.py")
CASES = (("K=1", ["--accum", "1"]), ("K=4", ["--accum", "4"]),
         ("K=4 scaler", ["--accum", "4", "--scaler", "--no-loader"]),
         ("K=1 scaler", ["--accum", "1", "--scaler", "--no-loader"]))


def script_numbers(directory, rank):
    """(model_params, {step: its line}) of the script's rank."""
    with open(os.path.join(directory, "numbers-rank%d.jsonl" % rank)) as f:
        lines = [json.loads(line) for line in f if line.strip()]
    return lines[0]["model_params"], {line["step"]: line for line in lines[1:]}


def close(ours, theirs, relative):
    return theirs != 0 and abs(ours - theirs) <= relative * abs(theirs)


# A step's time as dtrain measured it may differ from the script's by the wait for the GIL: the instrument reads the
# clock at the end of the optimizer step and the script just after, in the same thread, and the reporter thread can
# hold the GIL between the two reads for up to sys.getswitchinterval() (5 ms); the next step's times differ by the
# same amount the other way. So a per-step rate is held to the script's within 2% or 5 ms of step time, and the sum of
# the step times over every compared step within 2%.
JITTER_S = 0.005


def rate_close(rate, count, step_s):
    """Whether a rate (count per second) is count over the script's step time within 2% or JITTER_S."""
    return rate > 0 and step_s > 0 and abs(count / rate - step_s) <= max(0.02 * step_s, JITTER_S)


def compare(name, row, params, own):
    """One rank row of dtrain's (status or a health event) against the script's line for its step; whether compared."""
    line = own.get(row.get("step"))
    if line is None or row["step"] < 2 or row.get("loss") is None:
        return False
    what = "%s: rank %d step %d" % (name, row["rank"], row["step"])
    check(close(row["loss"], line["loss"], 1e-6), "%s: loss %r is the script's %r" % (what, row["loss"], line["loss"]))
    for key, count in (("tokens_per_s", "tokens"), ("samples_per_s", "samples")):
        check(rate_close(row.get(key, 0), line[count], line["step_s"]),
              "%s: %s %r is the script's %d %s over its %.4f s step (%r)" %
              (what, key, row.get(key), line[count], count, line["step_s"], line[count] / line["step_s"]))
    if "model_params" in row:
        check(row["model_params"] == params, "%s: model_params %r is the script's %d" % (what, row["model_params"], params))
    if "mfu" in row:  # dtrain status --json, status.json (a health event carries no peak)
        peak = row.get("peak_flops_per_s") or 0
        own = 6.0 * params * line["tokens"] / line["step_s"] / peak if peak else None
        check(own is not None and row["mfu"] is not None and
              rate_close(row["mfu"], own * line["step_s"], line["step_s"]),
              "%s: MFU %r is 6N x the script's tokens/s over the peak %r: %r" % (what, row.get("mfu"), peak, own))
    return True


def status_rows(directory):
    done = subprocess.run([DTRAIN, "status", "--json"], cwd=directory, capture_output=True, text=True, timeout=30)
    try:
        return json.loads(done.stdout).get("ranks", [])
    except ValueError:
        return []   # (not started yet, or ended)


def launched(name, flags):
    run = Run([], env=STATE_ENV, timeout=180)
    run.args += ["run", "--standalone", "--nproc_per_node=2", "--no-python", "--", PYTHON, SCRIPT, run.dir] + flags
    run.start()
    rows = []
    while run.proc.poll() is None:
        rows += status_rows(run.dir)
        time.sleep(0.1)
    run.wait()
    points = []   # the samples events' per-step points: [rank, step, loss, step_ms, tokens_per_s]
    if not check(run.code == 0, "%s: the job succeeds: %s %s" % (name, run.code, run.err[-2000:])):
        run.show()
        return
    for job in run.job_dirs():
        with open(os.path.join(job, "status.json")) as f:
            rows += json.load(f).get("ranks", [])
        with open(os.path.join(job, "events.jsonl")) as f:
            for event in (json.loads(line) for line in f if line.strip()):
                rows += event.get("ranks", []) if event.get("event") == "health" else []
                if event.get("event") == "samples":
                    points += event.get("points", [])
    numbers = {rank: script_numbers(run.dir, rank) for rank in (0, 1)}
    compared = {rank: set() for rank in numbers}
    for row in rows:
        if row.get("rank") in numbers and compare(name, row, *numbers[row["rank"]]):
            compared[row["rank"]].add(row["step"])
    print("%s: steps compared per rank: %s" % (name, {r: sorted(s) for r, s in compared.items()}), flush=True)
    check(all(30 in steps for steps in compared.values()),
          "%s: each rank's last step (30) was compared: %s" % (name, compared))
    # Every step reaches the report's curves, coalesced reports or not: each rank's points are the script's steps.
    for rank, (_, own) in numbers.items():
        mine = {p[1]: p for p in points if p[0] == rank}
        check(len(mine) >= 25, "%s: rank %d has a point for most of its 30 steps: %s" % (name, rank, sorted(mine)))
        timed = [(own[step]["tokens"] / p[4], own[step]["step_s"]) for step, p in mine.items()
                 if step >= 3 and step in own and p[4] > 0]
        ours, theirs = sum(t[0] for t in timed), sum(t[1] for t in timed)
        check(close(ours, theirs, 0.02), "%s: rank %d's points add up to %.4f s over %d steps, the script's %.4f s" %
              (name, rank, ours, len(timed), theirs))
        for step, (_, _, loss, _, tokens_per_s) in mine.items():
            line = own.get(step)
            # Losses in the samples events keep 4 significant digits (cli/report/model/samples.cpp): 5e-4. Step 2 is
            # measured from the end of the first step's report, which the script does not count: its rate from step 3.
            check(line is not None and close(loss, line["loss"], 5e-4) and
                  (step < 3 or rate_close(tokens_per_s, line["tokens"], line["step_s"])),
                  "%s: rank %d step %d's point (loss %r, %r tokens/s) is the script's %s" %
                  (name, rank, step, loss, tokens_per_s, line))
    run.assert_no_leaks()


class Sink:
    """The agent's side of a health socket: keeps every report."""

    def __init__(self, path):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(path)
        self.sock.settimeout(0.1)
        self.reports, self.stop = [], False
        self.thread = threading.Thread(target=self.drain, daemon=True)
        self.thread.start()

    def drain(self):
        while not self.stop:
            try:
                self.reports.append(json.loads(self.sock.recv(65536)))
            except socket.timeout:
                pass

    def close(self):
        time.sleep(0.3)
        self.stop = True
        self.thread.join(timeout=5)
        self.sock.close()


def direct(work, wrappers):
    name = "direct, the %s wrappers" % wrappers
    path = os.path.join(work, wrappers + ".sock")
    sink = Sink(path)
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    env = health_env(path, [BOOTSTRAP_DIRS[wrappers], HELPER_DIR], WORLD_SIZE="1", LOCAL_RANK="0",
                     MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), DTRAIN_HEALTH_INTERVAL_MS="100")
    out = os.path.join(work, wrappers)
    os.makedirs(out)
    done = subprocess.run([PYTHON, SCRIPT, out, "--accum", "4", "--scaler", "--no-loader", "--steps", "6"], env=env,
                          capture_output=True, text=True, timeout=120)
    sink.close()
    if not check(done.returncode == 0 and "dtrain:" not in done.stderr,
                 "%s: the script ran: %d %s" % (name, done.returncode, done.stderr[-2000:])):
        return
    params, own = script_numbers(out, 0)
    last = sink.reports[-1] if sink.reports else {}
    print("%s: last report %s" % (name, json.dumps(last, sort_keys=True)), flush=True)
    check(last.get("model_params") == params and last.get("model_flops_per_token") == 6.0 * params and
          last.get("device_name") == "cpu", "%s: the report carries model_params %d, model_flops_per_token %d and "
          "device_name cpu: %s" % (name, params, 6 * params, last))
    check(last.get("step") == 6 and close(last.get("loss", 0), own[6]["loss"], 1e-6),
          "%s: the last report's loss is step 6's unscaled mean %r: %s" % (name, own[6]["loss"], last.get("loss")))


# The node's GEMM rate, the CPU ranks' peak for MFU, cached where only this test's jobs look.
STATE = tempfile.mkdtemp(prefix="dtrain-it-state-")
STATE_ENV = {"XDG_STATE_HOME": STATE}
measured = subprocess.run([DTRAIN, "doctor", "--json", "--log-dir", "/tmp"], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ, **STATE_ENV))
check(os.path.exists(os.path.join(STATE, "dtrain", "cpu_gemm.json")),
      "dtrain doctor cached the node's GEMM rate: %s" % measured.stdout[-500:])
for name, flags in CASES:
    print("---- " + name, flush=True)
    launched(name, flags)
shutil.rmtree(STATE, ignore_errors=True)
work = Run([]).dir
for wrappers in BOOTSTRAP_DIRS:
    print("---- direct, the %s wrappers" % wrappers, flush=True)
    direct(work, wrappers)
finish()
