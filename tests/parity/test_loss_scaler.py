"""fp16 dynamic loss scaling against torch.cuda.amp.GradScaler's update rule. With infinities injected into the
gradients of steps 2, 3, 7 and 8 (--inject-inf-steps, on rank 0 only) and a growth interval of 3, the
(loss_scale, skipped) sequence in the metrics file must equal the rule's, transcribed below from
aten/src/ATen/native/cpu/AmpGradScalerKernels.cpp (Debian's CPU-only torch disables GradScaler itself):
    found_inf: scale *= backoff_factor (0.5), tracker = 0
    else:      tracker += 1; if tracker == growth_interval: scale *= growth_factor (2) if finite; tracker = 0
Run as one process and on 2 ranks under the real launcher (rank 1's gradients stay finite, so it learns of the
overflow only through the combined flag); the 2-rank losses must equal the 1-process losses within 1e-4 relative,
which they would not if rank 1 had taken a step rank 0 skipped."""

import math
import os

import trainer_harness as h

h.require_binaries(h.TRAINER, h.DTRAIN)
work = h.workdir()
shard = h.make_text_shard(work)
INJECT, INTERVAL, STEPS, INIT = [2, 3, 7, 8], 3, 12, 1024.0
common = h.MODEL + ["--data", shard, "--seq-len", "64", "--steps", str(STEPS), "--lr", "1e-3", "--threads", "1",
                    "--precision", "fp16", "--loss-scale-init", str(int(INIT)), "--loss-scale-growth-interval",
                    str(INTERVAL), "--inject-inf-steps", ",".join(map(str, INJECT))]


def grad_scaler_rule(steps, inject, init, interval):
    """[(scale used by step s, skipped)] for s = 1..steps."""
    scale, tracker, out = init, 0, []
    for step in range(1, steps + 1):
        found_inf = step in inject
        out.append((scale, found_inf))
        if found_inf:
            scale, tracker = scale * 0.5, 0
        else:
            tracker += 1
            if tracker == interval:
                if math.isfinite(scale * 2.0):
                    scale *= 2.0
                tracker = 0
    return out


expected = grad_scaler_rule(STEPS, INJECT, INIT, INTERVAL)
results = {}
for world in (1, 2):
    path = os.path.join(work, f"n{world}.jsonl")
    args = common + ["--batch-size", str(4 // world), "--metrics", path]
    run = h.trainer(args, work) if world == 1 else h.launched(world, args, work)
    if not h.check(run.code == 0, f"{world} rank(s): dtrain-trainer --precision fp16 exits 0"):
        continue
    steps = h.metrics(path)
    got = [(m["loss_scale"], m["skipped"]) for m in steps]
    h.check(got == expected, f"{world} rank(s): (loss_scale, skipped) per step {got} equals GradScaler's rule "
                             f"{expected}")
    h.check(all(math.isfinite(m["loss"]) for m in steps), f"{world} rank(s): every loss is finite")
    results[world] = [m["loss"] for m in steps]
if 1 in results and 2 in results:
    h.compare_losses("2 ranks vs 1 process with the same overflows", results[2], results[1], 1e-4)
h.finish()
