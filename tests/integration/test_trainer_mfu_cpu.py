"""A CPU rank's MFU is over its node's measured GEMM rate: `dtrain doctor` measures it (dtrain-trainer gemm-rate) and
caches it under $XDG_STATE_HOME/dtrain/cpu_gemm.json (here a directory of this test's, removed after), the agent
reads the cache as it starts and sends it in its hello, and a 2-rank dtrain-trainer job's status.json then gives
each CPU rank an MFU between 0 and 1 over its share of that rate (one thread of the node's measured ones), labelled
as measured, and the job one over the node's whole rate. A cache of another CPU is refused: MFU null again, and
`dtrain status` says to run `dtrain doctor`."""

import json
import os
import shutil
import subprocess
import tempfile

from harness import DTRAIN, Run, check, finish, tiny_trainer_job, write

state = tempfile.mkdtemp(prefix="dtrain-it-state-")
env = {"XDG_STATE_HOME": state}
cache = os.path.join(state, "dtrain", "cpu_gemm.json")

doctor = Run(["doctor", "--json", "--log-dir", "/tmp"], env=env).run()
checks = {c["id"]: c for c in json.loads(doctor.out)["checks"]} if doctor.out.startswith("{") else {}
gemm = checks.get("cpu.gemm", {})
check(gemm.get("status") == "pass" and cache in gemm.get("message", ""), "doctor measured and cached: %s" % gemm)
with open(cache) as f:
    cached = json.load(f)
check(cached["format"] == "dtrain-cpu-gemm/1" and cached["flops_per_s"] > 0 and cached["threads"] >= 1,
      "the cache holds a rate, its threads and the CPU: %s" % cached)

FLAGS = "--batch-size 2 --seq-len 32 --steps 8"
run, job, status = tiny_trainer_job("mfucpu", FLAGS, env=env)
ranks = status.get("ranks", [])
check(len(ranks) == 2, "status.json has both ranks: %s" % ranks)
threads = cached["threads"]
for row in ranks:
    mfu, peak = row.get("mfu"), row.get("peak_flops_per_s")
    check(row.get("device_name") == "cpu" and mfu is not None and 0 < mfu < 1,
          "rank %d: a CPU rank's MFU is known, between 0 and 1: %s" % (row["rank"], mfu))
    check(row.get("peak_basis") == "measured fp32 GEMM of the node's CPUs", "rank %d: basis %s" % (
        row["rank"], row.get("peak_basis")))
    # Two workers share the node's CPUs: each has max(1, threads / 2) of the threads measured.
    share = max(1, threads // 2) / float(threads)
    check(peak is not None and abs(peak - cached["flops_per_s"] * share) <= 1e-6 * peak,
          "rank %d: its peak %s is its share %.2f of the node's %s" % (row["rank"], peak, share,
                                                                        cached["flops_per_s"]))
    if mfu is not None and peak:
        check(abs(mfu - row["model_flops_per_s"] / peak) <= 1e-9, "rank %d: mfu is model FLOP/s over its peak")
check(status.get("mfu") is not None and 0 < status["mfu"] < 1, "the job's MFU: %s" % status.get("mfu"))
check(status.get("peak_basis") == "measured fp32 GEMM of the node's CPUs", "job basis: %s" % status.get("peak_basis"))
shown = subprocess.run([DTRAIN, "status", job], capture_output=True, text=True, timeout=30, env=dict(os.environ, **env))
check("MFU" in shown.stdout and "measured fp32 GEMM" in shown.stdout, "dtrain status shows it: " + shown.stdout[:400])

# A cache of another CPU is stale: no MFU, and dtrain status says how to get one.
cached["cpu_model"] = "Some Other CPU"
write(cache, json.dumps(cached))
run, job, status = tiny_trainer_job("mfucpu", FLAGS, env=env)
check(all(r.get("mfu") is None for r in status.get("ranks", [])), "a stale cache gives no MFU: %s" % [
    r.get("mfu") for r in status.get("ranks", [])])
shown = subprocess.run([DTRAIN, "status", job], capture_output=True, text=True, timeout=30, env=dict(os.environ, **env))
check("run `dtrain doctor`" in shown.stdout, "dtrain status says to run dtrain doctor: " + shown.stdout[:400])
shutil.rmtree(state, ignore_errors=True)
finish()
