"""scripts/gpu-check.sh --dry-run lists every step the GPU run takes (from the same step definitions the real run
uses), with its command and pass rule, starts nothing and writes nothing; an unknown option exits 2."""

import os
import subprocess
import time

from harness import SOURCE_DIR, check, finish

SCRIPT = os.path.join(SOURCE_DIR, "scripts", "gpu-check.sh")
STEPS = ["topo-doctor", "nccl-unit", "nccl-bench", "kernel-check", "kernel-perf", "trainer-cpu-fp32",
         "trainer-gpu-fp32", "gpu-vs-cpu-fp32", "trainer-gpu-bf16", "bf16-vs-fp32", "gpt2-124m", "gpt2-124m-rate",
         "ddp-nccl", "zero3-nccl"]

before = set(os.listdir("/tmp"))
started = time.monotonic()
p = subprocess.run([SCRIPT, "--dry-run"], capture_output=True, text=True, timeout=60)
took = time.monotonic() - started
check(p.returncode == 0, f"--dry-run exits 0 (got {p.returncode}: {p.stderr[-300:]})")
check(took < 10, f"--dry-run starts nothing heavy ({took:.1f} s)")
listed = [line.split()[1] for line in p.stdout.splitlines() if line.startswith("step ")]
check(listed == STEPS, f"every step is listed, in order: {listed}")
check(p.stdout.count("     pass: ") == len(STEPS), "each step has its pass rule")
check("--device cuda" in p.stdout and "--model gpt2-124m --seq-len 1024" in p.stdout and "--zero 3" in p.stdout,
      "the trainer steps show their command lines")
check(not [n for n in set(os.listdir("/tmp")) - before if "gpu-check" in n],
      "--dry-run leaves no work directory in /tmp")
bad = subprocess.run([SCRIPT, "--bogus"], capture_output=True, text=True, timeout=30)
check(bad.returncode == 2 and "usage" in bad.stderr, f"an unknown option exits 2 with the usage ({bad.returncode})")
finish()
