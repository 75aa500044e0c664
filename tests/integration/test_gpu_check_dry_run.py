"""scripts/gpu-check.sh --dry-run lists every step the GPU run takes (from the same step definitions the real run
uses), with its command, its timeout and its pass rule, starts nothing and writes nothing, also for a bundle
(--dry-run --run DIR); an unknown option exits 2. The real run with a budget of 0 s starts no step either: it lists
the same steps as NOT RUN, fails, and writes its three files in $OUT."""

import os
import subprocess
import tempfile
import time

from harness import DTRAIN, SOURCE_DIR, check, finish

SCRIPT = os.path.join(SOURCE_DIR, "scripts", "gpu-check.sh")
# topo and doctor, the NCCL unit tests, bench allreduce over NCCL, the kernel check and perf probe, then the
# trainer: its data, fp32 on the GPU against the CPU, bf16 and fp16 against fp32, ZeRO-3 on one GPU, checkpoints moving
# between the devices, GPT-2 124M, DDP and ZeRO-3 over NCCL.
STEPS = ["topo-doctor", "nccl-unit", "nccl-bench", "kernel-check", "kernel-perf", "trainer-data", "trainer-cpu-fp32",
         "trainer-gpu-fp32", "gpu-vs-cpu-fp32", "trainer-gpu-bf16", "bf16-vs-fp32", "trainer-gpu-fp16",
         "fp16-vs-fp32", "trainer-gpu-zero3", "zero3-vs-ddp", "trainer-cpu-const", "ckpt-gpu-to-cpu", "ckpt-cpu-to-gpu",
         "resumed-vs-cpu", "gpt2-124m",
         "gpt2-124m-rate", "ddp-nccl", "zero3-nccl"]


def dry_run(*args):
    """(exit status, stdout, stderr, seconds) of `gpu-check.sh --dry-run ARGS`."""
    started = time.monotonic()
    p = subprocess.run([SCRIPT, "--dry-run", *args], capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout, p.stderr, time.monotonic() - started


def steps_of(out):
    """{step name: (its line, its pass rule)} in the order listed."""
    lines = out.splitlines()
    return {line.split()[1]: (line, lines[i + 1] if i + 1 < len(lines) else "")
            for i, line in enumerate(lines) if line.startswith("step ")}


before = set(os.listdir("/tmp"))
rc, out, err, took = dry_run()
check(rc == 0, f"--dry-run exits 0 (got {rc}: {err[-300:]})")
check(took < 10, f"--dry-run starts nothing heavy ({took:.1f} s)")
listed = steps_of(out)
check(list(listed) == STEPS, f"every step is listed, in order: {list(listed)}")
for name, (line, rule) in listed.items():
    check(rule.startswith("     pass: ") and len(rule) > len("     pass: "), f"{name} has its pass rule: {rule!r}")
    check(" [" in line and "s] " in line, f"{name} shows its timeout: {line[:80]}")


def command(name):
    return listed.get(name, ("", ""))[0]


check("gpu-topo-check.sh" in command("topo-doctor"), "topo-doctor runs scripts/gpu-topo-check.sh")
check("unit_comm" in command("nccl-unit") and "nccl" in command("nccl-unit"), "nccl-unit runs unit_comm's NCCL cases")
check("bench allreduce --backend nccl" in command("nccl-bench"), "nccl-bench runs dtrain bench over NCCL")
check("dtrain-kernel-check" in command("kernel-check") and "dtrain-kernel-perf" in command("kernel-perf"),
      "the kernel check and perf probe are run")
check("prepare-text" in open(os.path.join(SOURCE_DIR, "scripts", "gpu", "tokens.sh")).read()
      and "tokens.sh" in command("trainer-data"), "trainer-data makes a shard with prepare-text")
small = "--layers 2 --channels 128 --heads 4 --vocab 256 --max-seq-len 64 --seq-len 64 --batch-size 4 --steps 10 --seed 1"
for name, device in (("trainer-cpu-fp32", "--device cpu"), ("trainer-gpu-fp32", "--device cuda"),
                     ("trainer-gpu-bf16", "--device cuda --precision bf16"),
                     ("trainer-gpu-fp16", "--device cuda --precision fp16")):
    check(small in command(name) and device in command(name) and "--metrics" in command(name),
          f"{name}: the small model, {device}, with --metrics")
check("NVIDIA_TF32_OVERRIDE=0" in command("trainer-gpu-fp32"), "the GPU fp32 run turns TF32 off")
check("rel 1e-4" in command("gpu-vs-cpu-fp32") and "abs 0.05" in command("bf16-vs-fp32")
      and "abs 0.05" in command("fp16-vs-fp32"),
      "the tolerances: 1e-4 relative (GPU vs CPU), 0.05 absolute (16-bit vs fp32)")
check(all("DTRAIN_SYNC_DEBUG=error" in command(n) for n in ("trainer-gpu-fp32", "trainer-gpu-fp16", "gpt2-124m")),
      "the GPU runs fail on a host wait inside a step")
check("--model gpt2-124m --seq-len 1024 --batch-size 8 --steps 20 --precision bf16 --device cuda" in command("gpt2-124m"),
      "GPT-2 124M at T=1024, batch 8, bf16 on the GPU")
check("124475904" in command("gpt2-124m-rate") and "989e12" in command("gpt2-124m-rate"),
      "MFU from the trainer's parameter count against 989 TFLOP/s")
for name in ("ddp-nccl", "zero3-nccl"):
    check("run -n 2" in command(name) and "--device cuda" in command(name) and "shared-gpu.sh" in command(name),
          f"{name}: 2 ranks on the GPU, skipped when they would share one")
check("--zero 3" in command("zero3-nccl") and "--zero" not in command("ddp-nccl"), "ZeRO-3 in zero3-nccl alone")
check(not [n for n in set(os.listdir("/tmp")) - before if "gpu-check" in n],
      "--dry-run leaves no work directory in /tmp")

# For a bundle: the same steps, each tool from the bundle's directory (no bundle needs to exist for the listing).
rc, out, err, _ = dry_run("--run", "/nonexistent/gpu")
check(rc == 0 and list(steps_of(out)) == STEPS, f"--dry-run --run DIR lists the same steps ({rc}: {err[-200:]})")
check("/nonexistent/gpu/dtrain-trainer " in out and "/nonexistent/gpu/unit_comm " in out,
      "--dry-run --run DIR runs the bundle's tools")

for args in (["--bogus"], ["--dry-run", "--bogus"]):
    bad = subprocess.run([SCRIPT, *args], capture_output=True, text=True, timeout=30)
    check(bad.returncode == 2 and "usage" in bad.stderr, f"{args} exits 2 with the usage ({bad.returncode})")

# The real run with no time left: no step starts; the same list, each NOT RUN; exit 1; the files that come back.
with tempfile.TemporaryDirectory() as out_dir:
    env = dict(os.environ, OUT=out_dir, GPU_CHECK_BUDGET_S="0", DTRAIN_BIN=DTRAIN, TMPDIR=tempfile.gettempdir())
    started = time.monotonic()
    real = subprocess.run([SCRIPT], capture_output=True, text=True, timeout=60, env=env)
    took = time.monotonic() - started
    check(real.returncode == 1, f"a run whose budget is spent fails ({real.returncode}: {real.stderr[-300:]})")
    check(took < 10, f"it starts no step ({took:.1f} s)")
    files = sorted(os.listdir(out_dir))
    check(files == ["gpu-check-files.tar.gz", "gpu-check.log", "gpu-results.md"], f"three files under $OUT: {files}")
    table = open(os.path.join(out_dir, "gpu-results.md")).read() if "gpu-results.md" in files else ""
    rows = [line.split("|")[1].strip() for line in table.splitlines() if line.startswith("| ")][2:]
    check(rows == STEPS, f"the results table has the dry run's steps: {rows}")
    check(table.count("NOT RUN (the 0 s budget was spent)") == len(STEPS), "each is NOT RUN, saying why")
finish()
