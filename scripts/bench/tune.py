"""`dtrain tune` measured on each case: the job as it is (the baseline) and the recommended candidate, side by side
in the same run of trials (interleaved, --repeats each), with the 95% interval of the speed-up, the trials run and the
wall time the tuning took. Cases:
  slow-data     tests/integration/scripts/tune_train.py --delay-ms 2 (2 ms a sample, num_workers=0), 2 ranks
  buckets       the same script's 129-layer model with bucket_cap_mb=1, 2 ranks
  tuned         the same script on 1 rank, no delay: nothing to gain
  trainer-comm  dtrain-trainer (4 layers, 256 channels) on 2 ranks with --ddp-bucket-mb 1 and the gloo backend
  trainer-threads  dtrain-trainer on 1 rank with --threads 1 (the rank may use both CPUs)
Prints one Markdown row per case."""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "tests", "integration", "scripts", "tune_train.py")


def cases(dtrain, work):
    trainer = os.path.join(os.path.dirname(dtrain), "dtrain-trainer")
    text = os.path.join(work, "data.txt")
    with open(text, "w") as f:
        f.write(" ".join(["the model trains on bytes"] * 20000))
    shard = os.path.join(work, "data.bin")
    subprocess.run([trainer, "prepare-text", text, shard], check=True, capture_output=True)
    model = [trainer, "--data", shard, "--layers", "4", "--channels", "256", "--heads", "4", "--vocab", "256",
             "--max-seq-len", "64", "--batch-size", "4"]
    py = ["/usr/bin/python3", SCRIPT]
    return [("slow-data", ["-n", "2", "--"] + py + ["--delay-ms", "2"], {}),
            ("buckets", ["-n", "2", "--"] + py + ["--model", "many-small", "--bucket-mb", "1"], {}),
            ("tuned", ["-n", "1", "--"] + py, {}),
            ("trainer-comm", ["-n", "2", "--"] + model + ["--ddp-bucket-mb", "1"], {"DTRAIN_COMM_BACKEND": "gloo"}),
            ("trainer-threads", ["-n", "1", "--"] + model + ["--threads", "1"], {})]


def run_case(dtrain, work, name, args, env, options):
    began = time.monotonic()
    proc = subprocess.run([dtrain, "tune", "--repeats", str(options.repeats), "--budget", options.budget,
                           "--logs-dir", os.path.join(work, name)] + args, cwd=work, capture_output=True, text=True,
                          env=dict(os.environ, **env))
    took = time.monotonic() - began
    found = re.search(r"in (\S+-tune-\d{8}-\d{6})", proc.stdout)
    if proc.returncode != 0 or not found:
        sys.exit("%s: dtrain tune failed (%d):\n%s\n%s" % (name, proc.returncode, proc.stdout[-2000:],
                                                            proc.stderr[-2000:]))
    if options.verbose:
        print(proc.stdout, file=sys.stderr)
    with open(os.path.join(found.group(1), "tune.json")) as f:
        result = json.load(f)
    base = result["candidates"][0]
    best = result["candidates"][result["recommended"]] if result["recommended"] > 0 else None
    unit = result["unit"] + "/s"
    tuned = "%.0f %s (%s)" % (best["rate"], unit, best["name"]) if best else "none recommended"
    speed = "%.2fx [%.2f, %.2f]" % (best["speedup"], best["ci"][0], best["ci"][1]) if best else "-"
    tried = ", ".join("%s %.2fx [%.2f, %.2f] %s" % (c["name"], c["speedup"], c["ci"][0], c["ci"][1], c["status"])
                      for c in result["candidates"][1:]) or "none"
    print("| %s | %s | %.0f %s | %s | %s | %d | %.0f s | %s |" % (
        name, result["bottleneck"], base["rate"], unit, tuned, speed, result["trials_run"], took, tried), flush=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--dtrain", required=True)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--budget", default="10m")
    parser.add_argument("--only", action="append", help="run only these cases")
    parser.add_argument("--verbose", action="store_true")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="dtrain-bench-tune-") as work:
        print("| case | bottleneck | baseline | tuned | speed-up [95% CI] | trials | tuning took | every candidate |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- |")
        for name, args, env in cases(options.dtrain, work):
            if not options.only or name in options.only:
                run_case(options.dtrain, work, name, args, env, options)


main()
