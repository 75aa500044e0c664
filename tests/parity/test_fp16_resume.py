"""fp16 checkpoints carry the loss scaler and AdamW's step count, so a resumed fp16 run continues exactly.
With a growth interval of 4 and infinities injected into steps 3, 4 and 8 (--inject-inf-steps), the checkpoint of
step 10 is taken after three skipped steps (AdamW has taken 7 updates, so t != step) with the scale at 128 and the
growth tracker mid-way (2 of 4); the one of step 5 has t = 3 and the tracker at 1. Resumed from either (a copy of
the uninterrupted run's checkpoints, newer pairs removed), on one process with --zero 0 and on 2 ranks with
--zero 1 (same world size as the uninterrupted run), every step's loss and (loss_scale, skipped) equal the
uninterrupted run's bit for bit. Restoring t as the step, or the scaler afresh, would change both.
A checkpoint whose growth tracker does not fit a smaller --loss-scale-growth-interval is refused with exit code 2."""

import os
import shutil

import trainer_harness as h

h.require_binaries(h.TRAINER, h.DTRAIN)
work = h.workdir()
shard = h.make_text_shard(work)
STEPS, INTERVAL, INIT, INJECT = 14, 4, 1024, [3, 4, 8]


def fp16_flags(interval):
    return h.MODEL + ["--data", shard, "--seq-len", "64", "--steps", str(STEPS), "--lr", "2e-3", "--seed", "9",
                      "--threads", "1", "--save-every", "5", "--lr-schedule", "cosine", "--warmup-steps", "3",
                      "--precision", "fp16", "--loss-scale-init", str(INIT), "--loss-scale-growth-interval",
                      str(interval), "--inject-inf-steps", ",".join(map(str, INJECT))]


def step_record(m):
    return (m["step"], m["loss"], m["loss_scale"], m["skipped"])


for world, zero in ((1, 0), (2, 1)):
    label = f"{world} rank(s), --zero {zero}"
    flags = fp16_flags(INTERVAL) + ["--zero", str(zero), "--batch-size", str(4 // world)]

    def start(args):
        return h.trainer(args, work) if world == 1 else h.launched(world, args, work)

    full_ck = os.path.join(work, f"ck_full_{world}")
    full = os.path.join(work, f"full_{world}.jsonl")
    run = start(flags + ["--checkpoint-dir", full_ck, "--metrics", full])
    if not h.check(run.code == 0, f"{label}: the uninterrupted fp16 run with --save-every exits 0"):
        continue
    reference = [step_record(m) for m in h.metrics(full)]
    skipped = [s for (s, _, _, skip) in reference if skip]
    h.check(skipped == INJECT, f"{label}: the uninterrupted run skipped steps {skipped} (expected {INJECT})")

    for at, adam_steps, scale, tracker in ((5, 3, 256.0, 1), (10, 7, 128.0, 2)):
        ck = os.path.join(work, f"ck_{world}_{at}")
        shutil.copytree(full_ck, ck)
        for later in range(at + 1, STEPS + 1):
            for name in (f"model_{later}.bin", f"state_{later}.bin"):
                if os.path.exists(os.path.join(ck, name)):
                    os.remove(os.path.join(ck, name))
        path = os.path.join(work, f"resumed_{world}_{at}.jsonl")
        shutil.copy(full, path)
        resumed = start(flags + ["--checkpoint-dir", ck, "--metrics", path, "--resume"])
        what = f"{label}, resumed at step {at}"
        if not h.check(resumed.code == 0, f"{what}: exits 0"):
            continue
        h.check(f"resuming from step {at}: model_{at}.bin + state_{at}.bin, checksums ok" in resumed.err,
                f"{what}: it says it resumed from the step-{at} pair")
        said = (f"AdamW has taken {adam_steps} of the {at} steps; loss scale {scale:.6f}, {tracker} finite steps "
                f"since it last changed")
        h.check(said in resumed.err, f"{what}: it says it restored t and the scaler ('{said}')")
        got = [step_record(m) for m in h.metrics(path)]
        h.check([r[0] for r in got] == list(range(1, STEPS + 1)), f"{what}: the metrics file holds steps 1..14 once")
        h.check(got == reference, f"{what}: every step's loss and (loss_scale, skipped) equal the uninterrupted "
                                  f"run's bit for bit\n  resumed  {got[at:]}\n  expected {reference[at:]}")

    if world == 1:
        ck = os.path.join(work, "ck_refused")
        shutil.copytree(full_ck, ck)
        for name in ("model_14.bin", "state_14.bin"):
            os.remove(os.path.join(ck, name))
        refused = h.trainer(fp16_flags(2) + ["--batch-size", "4", "--checkpoint-dir", ck, "--resume"], work)
        h.check(refused.code == 2 and "--loss-scale-growth-interval 2" in refused.err,
                "a checkpoint with 2 finite steps in a row resumed with --loss-scale-growth-interval 2: refused with "
                "exit code 2, naming the flag")
h.finish()
