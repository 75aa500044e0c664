"""`dtrain tune` on ordinary PyTorch scripts (tests/integration/scripts/tune_train.py; real launcher, real agents,
Debian's torch 1.13 over gloo, 2 ranks unless said), with short trials (4 warm-up + 12 measured steps; 2 repeats for
slow data, 1 for the others, whose checks are not speeds; losses and the dataset that fails in workers, whose checks
are on the first losses and on failures, 2 warm-up + 3 measured: tune compares the first 5 steps' losses either way)
and a stop grace of 1 s where a trial ends by itself (--grace-s 1: with the default 10 s, a trial's launcher was seen
waiting those 10 s after both ranks had exited 0, about one trial in twenty):
  slow data   (--parts data) a dataset that waits 2 ms a sample (a read from slow storage) under a DataLoader with
              num_workers=0: the bottleneck is data, tune tries num_workers=1 (each rank may use 1 of the 2 CPUs),
              reports its speed-up with an interval that excludes 1, recommends it with the same losses, prints the
              DataLoader line and writes tune.yaml; tune.json, events.jsonl (a tune_trial line per trial) and
              report.html with its Tuning section are written; a later `dtrain run --tune tune.yaml` of the unchanged
              script is faster than a plain `dtrain run` (the script's own samples/s), by a ratio inside the interval
              tune reported, widened by the spread of the plain runs;
  buckets     (--parts communication,compute) a DDP model of 129 small layers with bucket_cap_mb=1: bucket sizes (5
              and 25 MB) and gradient_as_bucket_view are tried, each with its interval and a loss check of "same"
              (what they gain here is in BENCHMARKS.md, measured with 3 repeats);
  trainer     the job-spec form (`dtrain tune job.yaml --set ...`) with dtrain-trainer on 2 simulated nodes: its
              flags and the communication backend across nodes are the candidates, every trial is measured with the
              losses kept; a script-form option given with a spec is refused;
  tuned       one rank, no data wait, no communication, a thread per CPU: tune says the job is already tuned, recommends
              nothing and writes no tune.yaml, after one trial;
  losses      (1 rank, --parts data) the slow dataset adds noise from the global generator: in DataLoader workers that
              noise differs, so num_workers changes the losses; that candidate is reported as loss_changed and not
              recommended;
  (slow data, whose measure is a speed-up, runs alone as integration.tune_speedup: `--only speedup`; the others'
  checks do not depend on how fast the machine is at the moment, so after tuned, whose verdict rests on the shares of
  a step and which runs alone, buckets and trainer run beside losses and refused)
  refused     each a clear message and nothing left running: a script that never steps an optimizer (exit 2), one that
              ends before the warm-up (exit 2), one whose dataset fails in workers (1 rank, --parts data) (that
              candidate "failed", the tuning goes on, exit 0), a budget too small for one trial (exit 2), a program
              that is not Python."""

import concurrent.futures
import json
import os
import re
import statistics
import subprocess
import sys

from harness import DTRAIN, PYTHON, Run, check, finish, write

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "scripts", "tune_train.py")
SHORT = ["--warmup-steps", "4", "--trial-steps", "12"]
# For the checks on losses and failures, not speeds: tune compares the first min(5, warm-up + measured) steps'
# losses, so 2 + 3 (the fewest --trial-steps takes) compares as many as SHORT does.
FEWEST = ["--warmup-steps", "2", "--trial-steps", "3"]
# For the runs that end by themselves (the budget case, stopped at its deadline, keeps the default; see the docstring).
GRACE = ["--grace-s", "1"]


def tune(args, ranks=2, repeats=3, parts=None, timeout=240, steps=SHORT):
    run = Run(["tune"] + steps + GRACE + ["--budget", "4m", "--repeats", str(repeats)]
              + (["--parts", parts] if parts else []) + ["-n", str(ranks), "--", PYTHON, SCRIPT] + args,
              timeout=timeout)
    run.run()
    return run


def tune_dir(run):
    found = re.search(r"in (\S+-tune-\d{8}-\d{6})", run.out)
    return os.path.join(run.dir, found.group(1)) if found else None


def result_of(run):
    path = tune_dir(run)
    if path is None or not os.path.exists(os.path.join(path, "tune.json")):
        check(False, "tune.json written: %s %s" % (run.out[-800:], run.err[-800:]))
        return None
    with open(os.path.join(path, "tune.json")) as f:
        return json.load(f)


def named(result, name):
    return next((c for c in result["candidates"] if c["name"] == name), None)


def own_rate(dir, extra):
    """The script's own samples/s in a plain `dtrain run` (extra: dtrain's options)."""
    run = Run(extra + GRACE + ["-n", "2", "--", PYTHON, SCRIPT, "--delay-ms", "2", "--steps", "40"], cwd=dir,
              timeout=120)
    run.args[1:1] = ["run"]
    run.run()
    found = re.search(r"samples/s ([\d.]+)", run.out)
    check(run.code == 0 and found, "the later run works: %s %s" % (run.code, run.err[-400:]))
    return float(found.group(1)) if found else 0.0


def slow_data():
    run = tune(["--delay-ms", "2"], repeats=2, parts="data")
    check(run.code == 0, "slow data: tune exits 0, got %s: %s" % (run.code, run.err[-800:]))
    result = result_of(run)
    if result is None:
        return
    # (Alone it is the bottleneck, about 60% of a step; beside other tests their load lengthens the compute.)
    check(result["shares"]["data"] >= 0.10, "slow data: data wait is worth a candidate: %s" % result["shares"])
    best = named(result, "num_workers=1")
    check(best is not None and best["status"] == "measured" and best["ci"][0] > 1.0,
          "slow data: num_workers=1 is faster beyond the noise: %s" % best)
    chosen = result["candidates"][result["recommended"]] if result["recommended"] > 0 else None
    check(chosen is not None and chosen["knobs"].get("dataloader", {}).get("num_workers") == 1,
          "slow data: a num_workers=1 candidate is recommended: %s" % result["verdict"])
    check(chosen is not None and chosen["loss_check"] == "same", "slow data: its losses are the baseline's")
    check("DataLoader(dataset, ..., num_workers=1" in run.out, "slow data: the script's line is printed")
    progress = re.findall(r"^tune: trial \d+", run.out, re.M)
    check(len(progress) == result["trials_run"] == 6, "slow data: a progress line per trial, 6 trials (2 repeats of "
          "the baseline and the 2 data candidates: --parts data): %d lines, %d trials"
          % (len(progress), result["trials_run"]))
    check(all(c["name"] == "baseline" or "num_workers" in c["name"] for c in result["candidates"]),
          "slow data: --parts data tries the data part's candidates alone: %s"
          % [c["name"] for c in result["candidates"]])
    folder = tune_dir(run)
    with open(os.path.join(folder, "events.jsonl")) as f:
        trials = [json.loads(line) for line in f if '"tune_trial"' in line]
    check(len(trials) == result["trials_run"], "slow data: one tune_trial event per trial (%d)" % len(trials))
    with open(os.path.join(folder, "report.html")) as f:
        page = f.read()
    check('id="tuning"' in page and "num_workers=1" in page, "slow data: report.html has the Tuning section")
    overlay = os.path.join(folder, "tune.yaml")
    check(os.path.exists(overlay), "slow data: tune.yaml written")
    # The overlay reproduces the gain with no code change: plain and tuned runs interleaved, the script's own rates.
    plain, tuned = [], []
    for _ in range(2):
        plain.append(own_rate(run.dir, []))
        tuned.append(own_rate(run.dir, ["--tune", overlay]))
    ratio = statistics.median(tuned) / statistics.median(plain)
    spread = max(plain) / min(plain) if min(plain) > 0 else 2
    low, high = chosen["ci"] if chosen else (1, 1)
    print("later runs: plain %s, tuned %s samples/s: %.2fx; tune said %.2fx [%.2f, %.2f]"
          % (plain, tuned, ratio, chosen["speedup"] if chosen else 0, low, high), flush=True)
    check(low / spread <= ratio <= high * spread,
          "slow data: `dtrain run --tune` gives %.2fx (plain %s, tuned %s), inside [%.2f, %.2f] widened by the plain "
          "runs' spread %.2f" % (ratio, plain, tuned, low, high, spread))
    check(ratio > 1.0, "slow data: the overlay makes the later run faster: %.2fx" % ratio)
    run.assert_no_leaks()


def buckets():
    run = tune(["--model", "many-small", "--bucket-mb", "1"], repeats=1, parts="communication,compute")
    check(run.code == 0, "buckets: tune exits 0, got %s: %s" % (run.code, run.err[-800:]))
    result = result_of(run)
    if result is None:
        return
    tried = {c["name"]: c for c in result["candidates"]}
    for name in ("bucket_cap_mb=5", "bucket_cap_mb=25", "gradient_as_bucket_view"):
        c = tried.get(name)
        check(c is not None and c["status"] in ("measured", "loss_changed") and len(c["ci"]) == 2,
              "buckets: %s tried with an interval: %s (shares %s)" % (name, c, result["shares"]))
        check(c is not None and c["loss_check"] == "same", "buckets: %s keeps the losses: %s" % (name, c))
    if result["recommended"] > 0:
        check(result["candidates"][result["recommended"]]["ci"][0] > 1.0, "buckets: a recommendation excludes 1")


def already_tuned():
    run = tune([], ranks=1)
    check(run.code == 0, "tuned: exit 0, got %s: %s" % (run.code, run.err[-600:]))
    result = result_of(run)
    if result is None:
        return
    check(result["recommended"] == -1 and result["trials_run"] == 1, "tuned: one trial, nothing recommended")
    check("already tuned" in run.out, "tuned: it says so: %s" % run.out[-600:])
    check(not os.path.exists(os.path.join(tune_dir(run), "tune.yaml")), "tuned: no tune.yaml")


def losses_change():
    run = tune(["--delay-ms", "2", "--augment"], ranks=1, repeats=1, parts="data", steps=FEWEST)
    check(run.code == 0, "losses: exit 0, got %s: %s" % (run.code, run.err[-600:]))
    result = result_of(run)
    if result is None:
        return
    workers = named(result, "num_workers=1")
    check(workers is not None and workers["status"] == "loss_changed" and workers["loss_check"] == "differs",
          "losses: num_workers=1 changes the losses and is refused: %s" % workers)
    check(result["recommended"] == -1 or result["candidates"][result["recommended"]]["loss_check"] == "same",
          "losses: nothing that changes the losses is recommended")
    check("loss_changed" in run.out, "losses: the table says so")


TRAINER_SPEC = """
name: tiny-trainer
nodes: {provider: local, count: 2}
workers_per_node: 1
command: [%s, --model, tiny, --data, %s, --batch-size, 2, --seq-len, 32, --ddp-bucket-mb, 1, --steps, 3]
stop: {grace_s: 1}
logs: {dir: runs}
"""


def trainer_spec():
    """The job-spec form, with dtrain-trainer on 2 (simulated) nodes: its candidates are its flags and backend."""
    trainer = os.path.join(os.path.dirname(os.path.abspath(DTRAIN)), "dtrain-trainer")
    run = Run([], timeout=120)
    text = write(os.path.join(run.dir, "data.txt"), " ".join(["the model trains on bytes"] * 2000))
    shard = os.path.join(run.dir, "data.bin")
    subprocess.run([trainer, "prepare-text", text, shard], check=True, capture_output=True, timeout=60)
    spec = write(os.path.join(run.dir, "job.yaml"), TRAINER_SPEC % (trainer, shard))
    run.args += ["tune"] + SHORT + ["--repeats", "1", spec, "--set", "stop.grace_s=2"]
    run.run()
    check(run.code == 0, "trainer spec: exit 0, got %s: %s %s" % (run.code, run.out[-600:], run.err[-600:]))
    result = result_of(run)
    if result is None:
        return
    check(result["unit"] == "tokens" and result["ranks"] == 2, "trainer spec: 2 ranks, tokens/s: %s" % result["unit"])
    names = [c["name"] for c in result["candidates"]]
    if result["shares"]["communication"] >= 0.10:
        check("--ddp-bucket-mb 4" in names and "DTRAIN_COMM_BACKEND=hier" in names,
              "trainer spec: its bucket flag and the backend across nodes are tried: %s" % names)
    check(all(c["status"] in ("measured", "loss_changed") and c["loss_check"] in ("same", "n/a")
              for c in result["candidates"]), "trainer spec: every trial measured, losses kept: %s"
          % [(c["name"], c["status"], c["loss_check"], c["note"]) for c in result["candidates"]])
    run2 = Run(["tune", "job.yaml", "--nproc-per-node", "2"], cwd=run.dir, timeout=30).run()
    check(run2.code == 2 and "--nproc-per-node" in run2.err, "trainer spec: a script-form option is refused with a "
          "spec: %s" % run2.err)


def refused():
    never = os.path.join(Run([]).dir, "never.py")
    write(never, "import torch\nmodel = torch.nn.Linear(2, 2)\nprint(model(torch.ones(1, 2)).sum().item())\n")
    run = Run(["tune"] + SHORT + GRACE + ["-n", "1", "--", PYTHON, never], timeout=60).run()
    check(run.code == 2 and "without an optimizer step" in run.err, "never steps: exit 2 and why: %s" % run.err)
    run.assert_no_leaks()
    run = Run(["tune"] + SHORT + GRACE + ["-n", "2", "--", PYTHON, SCRIPT, "--steps", "4"], timeout=60).run()
    check(run.code == 2 and "after 4 optimizer step(s)" in run.err and "= 16" in run.err,
          "too few steps: exit 2 and why: %s" % run.err)
    run.assert_no_leaks()
    run = tune(["--delay-ms", "2", "--main-process-only"], ranks=1, repeats=1, parts="data", steps=FEWEST)
    result = result_of(run)
    failed = named(result, "num_workers=1") if result else None
    check(run.code == 0 and failed is not None and failed["status"] == "failed" and "exited with code" in
          failed["note"], "a candidate that fails is marked failed and the tuning goes on: %s" % failed)
    tried = result["candidates"][1:] if result else []
    check(len([c for c in tried if c["status"] == "failed"]) >= 2 and all(c["status"] != "not_run" for c in tried),
          "the tuning went on after the failure: every candidate tried, those with workers failed: %s"
          % [(c["name"], c["status"]) for c in tried])
    run.assert_no_leaks()
    run = Run(["tune"] + SHORT + ["--budget", "1s", "-n", "2", "--", PYTHON, SCRIPT, "--delay-ms", "50"],
              timeout=60).run()
    check(run.code == 2 and "the budget (1 s) ended before the baseline's first trial did" in run.err,
          "a budget too small: exit 2 and why: %s" % run.err)
    run.assert_no_leaks()
    run = Run(["tune", "--console", "all", "-n", "1", "--", PYTHON, SCRIPT], timeout=30).run()
    check(run.code == 2 and "do not apply" in run.err, "--console is refused, not ignored: %s" % run.err)
    run = Run(["tune", "-n", "1", "--", "/bin/sleep", "1"], timeout=30).run()
    check(run.code == 2 and "neither a PyTorch script" in run.err, "not Python: exit 2: %s" % run.err)


if sys.argv[1:] == ["--only", "speedup"]:
    slow_data()
else:
    # Tuned first, alone: its verdict rests on the shares of a step. Then two lines of cases side by side, each one
    # case after another (two jobs at once at most): their checks are on statuses, losses and messages.
    already_tuned()
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        beside = pool.submit(lambda: (losses_change(), refused()))
        buckets()
        trainer_spec()
        beside.result()
finish()
