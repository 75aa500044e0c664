"""dtrain-trainer --device: option handling and error paths, and the device/host plumbing on the host stand-in for a
GPU. No GPU here: the CUDA kernels themselves are checked by scripts/gpu-check.sh on a GPU machine.

1. --device cuda on a machine without a GPU (or a build without CUDA) exits 2 naming why and what to check;
   --device with another value exits 2; --device auto trains on the CPU, says so once, and its losses are
   --device cpu's to the bit.
2. DTRAIN_DEVICE_STANDIN=1 makes --device cuda compute on the stand-in (trainer/kernels/standin/backend.h): host
   memory that faults when host code touches it outside the backend's ops and copies, and a communicator that refuses
   any buffer not of that memory. This checks PLUMBING, not kernels: the numbers are the CPU backend's, so every
   run below must give --device cpu's losses and gradient norms to the bit -- 1 rank fp32 and bf16, 2 ranks DDP
   (fp32 and bf16 gradients), 3 ranks DDP with bf16 gradients, ZeRO-1/2/3, fp16 with an injected overflow, and
   checkpoints written on one device and resumed on the other. Every stand-in run has DTRAIN_SYNC_DEBUG=error: a
   host wait for the device inside a step fails it (the step's results are read once per --log-every window).
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import trainer_harness as h  # noqa: E402

h.require_binaries(h.TRAINER, h.DTRAIN)
work = h.workdir()
data = h.make_text_shard(work)
# --log-every 3: on the stand-in the host reads the losses and norms after steps 3 and 4 (the window's end, the
# last step), not after each (trainer/train/step_window.h).
STEPS = ["--seq-len", "32", "--batch-size", "2", "--steps", "4", "--lr", "1e-3", "--grad-clip", "1.0",
         "--threads", "1", "--log-every", "3", "--data", data]
MODEL = ["--layers", "2", "--channels", "64", "--heads", "4", "--max-seq-len", "32", "--vocab", "256"]
# DTRAIN_SYNC_DEBUG=error: a host wait for the "device" inside a step fails the run (trainer/common/host_wait.h).
STANDIN = {"DTRAIN_DEVICE_STANDIN": "1", "DTRAIN_SYNC_DEBUG": "error"}


def steps(name, device, extra=(), nproc=1, env=None, expect=0):
    """Trains and returns the (loss, grad_norm) of each step from the --metrics file ([] when it failed)."""
    path = os.path.join(work, name + ".jsonl")
    args = MODEL + STEPS + ["--device", device, "--metrics", path] + list(extra)
    result = h.trainer(args, work, env=env) if nproc == 1 else h.launched(nproc, args, work, env=env)
    h.check(result.code == expect, f"{name}: exit {result.code} (want {expect})")
    if result.code != 0 or not os.path.exists(path):
        return [], result
    return [(m["loss"], m["grad_norm"]) for m in h.metrics(path)], result


def same(what, actual, expected):
    h.check(len(expected) > 0 and actual == expected,
            f"{what}: the same losses and norms as --device cpu, to the bit ({len(actual)} steps)")
    if actual != expected:
        for step, (a, e) in enumerate(zip(actual, expected), 1):
            print(f"     step {step}: {a} vs {e}")


# 1. Option handling.
_, r = steps("cuda-no-gpu", "cuda", expect=2, env={"CUDA_VISIBLE_DEVICES": ""})
text = r.out + r.err
h.check("--device cuda" in text and ("no CUDA GPU is visible" in text or "built without CUDA" in text),
        "--device cuda without a GPU says why: " + text.strip().splitlines()[-1][:200] if text.strip() else "(none)")
h.check("CUDA_VISIBLE_DEVICES" in text or "built without CUDA" in text, "and names CUDA_VISIBLE_DEVICES to check")
_, r = steps("bogus", "tpu", expect=2)
h.check("--device" in r.err and "tpu" in r.err, "--device tpu is refused naming the flag and the value")
cpu, _ = steps("cpu", "cpu")
auto, r = steps("auto", "auto")
same("--device auto (no GPU here)", auto, cpu)
h.check(r.err.count("--device auto:") + r.out.count("--device auto:") == 1 and "computing on the CPU" in r.out + r.err,
        "--device auto says once that it computes on the CPU")

# 2. The stand-in: every path that moves data between host and device.
standin, r = steps("standin", "cuda", env=STANDIN)
same("stand-in, 1 rank fp32", standin, cpu)
h.check("device cuda-standin" in r.out + r.err, "the first log line names the device (cuda-standin)")
same("stand-in, 1 rank bf16", steps("standin-bf16", "cuda", ["--precision", "bf16"], env=STANDIN)[0],
     steps("cpu-bf16", "cpu", ["--precision", "bf16"])[0])
fp16 = ["--precision", "fp16", "--inject-inf-steps", "2"]
same("stand-in, fp16 with an overflow at step 2", steps("standin-fp16", "cuda", fp16, env=STANDIN)[0],
     steps("cpu-fp16", "cpu", fp16)[0])
for name, extra in (("ddp", []), ("ddp-bf16", ["--precision", "bf16", "--ddp-comm-dtype", "bf16"]),
                    ("zero1", ["--zero", "1"]), ("zero2", ["--zero", "2", "--grad-accum", "2"]),
                    ("zero3", ["--zero", "3"]), ("zero3-bf16", ["--zero", "3", "--precision", "bf16"])):
    same(f"stand-in, 2 ranks {name}", steps("standin-" + name, "cuda", extra, nproc=2, env=STANDIN)[0],
         steps("cpu-" + name, "cpu", extra, nproc=2)[0])

# 3 ranks, bf16 gradients: DDP divides each 16-bit bucket by the world in 16 bits, as PyTorch's hook does
# (Backend::to_half_divided), on the device as on the host; with a world that is not a power of two, dividing before
# rounding would change the last bit of some values.
bf16_ddp = ["--precision", "bf16", "--ddp-comm-dtype", "bf16"]
same("stand-in, 3 ranks ddp-bf16", steps("standin-ddp3-bf16", "cuda", bf16_ddp, nproc=3, env=STANDIN)[0],
     steps("cpu-ddp3-bf16", "cpu", bf16_ddp, nproc=3)[0])

# Checkpoints: the same files on both devices. Save at step 2 on one, resume to step 4 on the other.
for first, second in (("cpu", "cuda"), ("cuda", "cpu")):
    ckpt = os.path.join(work, f"ckpt-{first}")
    save = ["--save-every", "2", "--checkpoint-dir", ckpt]
    half = [a if a != "4" else "2" for a in STEPS]  # --steps 2
    args = MODEL + half + ["--device", first] + save
    r = h.trainer(args, work, env=STANDIN)
    h.check(r.code == 0, f"--device {first} saves a checkpoint at step 2")
    resumed, _ = steps(f"resume-{first}-{second}", second, save + ["--resume"], env=STANDIN)
    same(f"saved on {first}, resumed on {second} (steps 3-4)", resumed, cpu[2:])
h.finish()
