"""dtrain-trainer's 2-rank DDP step with the default communicator (auto: both ranks on this node, so shared memory)
against Gloo over loopback, side by side in one run: rounds interleave the two so machine noise hits both alike.

Model and batch as trainer_vs_pytorch.py (GPT-2 L=4 C=256 NH=4 T=256 V=256, B=8 per rank, 1 thread per rank, default
DDP buckets). Per run: the median over steps after warm-up of step_ms, comm_ms (the step's collectives on the
communication thread), comm_exposed_ms (what the training thread waited for them) and comm_hidden; per case the
median of the runs. Prints one line per run and a summary with the auto/gloo ratios, and --json writes it all."""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from trainer_vs_pytorch import B, MODEL, T, make_shard  # noqa: E402

CASES = ("gloo", "auto")
KEYS = ("step_ms", "comm_ms", "comm_exposed_ms", "comm_hidden")


def one_run(args, work, backend, index):
    metrics = os.path.join(work, "%s-%d.jsonl" % (backend, index))
    cmd = [args.dtrain, "run", "-n", "2", "--logs-dir", os.path.join(work, "runs"), "--", args.trainer] + MODEL + [
        "--data", os.path.join(work, "data.bin"), "--batch-size", str(B), "--seq-len", str(T),
        "--steps", str(args.warmup + args.steps), "--threads", "1", "--metrics", metrics, "--log-every", "1000"]
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", DTRAIN_COMM_BACKEND=backend)
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        env.pop(name, None)
    proc = subprocess.run(cmd, env=env, cwd=work, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise RuntimeError("%s exited %d:\n%s" % (" ".join(cmd), proc.returncode, proc.stderr[-3000:]))
    comm = "shm" if backend == "auto" else "gloo"
    if ("comm " + comm) not in proc.stdout + proc.stderr:
        raise RuntimeError("the %s run did not use %s:\n%s" % (backend, comm, proc.stderr[-3000:]))
    with open(metrics) as f:
        steps = [json.loads(line) for line in f][args.warmup:]
    return {key: statistics.median(s[key] for s in steps if s.get(key) is not None) for key in KEYS}


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dtrain", required=True)
    parser.add_argument("--trainer", required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--json")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="dtrain-comm-auto-")
    make_shard(os.path.join(work, "data.bin"))
    runs = {case: [] for case in CASES}
    for round_index in range(args.rounds):
        for case in CASES:
            result = one_run(args, work, case, round_index)
            runs[case].append(result)
            print("round %d %-4s step %7.1f ms  comm %6.1f ms  exposed %6.1f ms  hidden %.2f" % (
                round_index + 1, case, result["step_ms"], result["comm_ms"], result["comm_exposed_ms"],
                result["comm_hidden"]), flush=True)
    summary = {case: {key: statistics.median(r[key] for r in runs[case]) for key in KEYS} for case in CASES}
    for case in CASES:
        s = summary[case]
        print("%-4s median: step %7.1f ms (%6.0f tokens/s)  comm %6.1f ms  exposed %6.1f ms  hidden %.2f" % (
            case, s["step_ms"], 2 * B * T / (s["step_ms"] / 1000), s["comm_ms"], s["comm_exposed_ms"],
            s["comm_hidden"]))
    ratio = {key: summary["auto"][key] / summary["gloo"][key] if summary["gloo"][key] else None
             for key in ("step_ms", "comm_ms", "comm_exposed_ms")}
    print("auto/gloo: step %.3f  comm %.3f  exposed %s" % (
        ratio["step_ms"], ratio["comm_ms"],
        "%.3f" % ratio["comm_exposed_ms"] if ratio["comm_exposed_ms"] is not None else "-"))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"runs": runs, "summary": summary, "ratio": ratio}, f, indent=1)


main()
