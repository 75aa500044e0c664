"""ZeRO checkpoints are consolidated (rank 0 writes the llm.c model file and one state file with AdamW's moments
gathered from every rank's shards, the same files as --zero 0), so a run resumes with the same world size and
stage, and also with another world size or stage (each rank takes its shards of the moments):
  - a 4-rank --zero 3 run of 10 steps saves at step 5; resumed from that checkpoint
  - on 4 ranks, --zero 3: steps 6..10 equal the uninterrupted run's bit for bit;
  - on 2 ranks, --zero 3 (B doubled: same global batch) and on 2 ranks, --zero 1: within 1e-5 relative of it
    (the sums over ranks are grouped differently)."""

import os
import shutil

import trainer_harness as h

h.require_binaries(h.TRAINER, h.DTRAIN)
MODEL = ["--layers", "2", "--channels", "129", "--heads", "3", "--max-seq-len", "64", "--vocab", "256"]
work = h.workdir()
shard = h.make_text_shard(work)
common = MODEL + ["--data", shard, "--seq-len", "64", "--steps", "10", "--lr", "2e-3", "--seed", "9", "--threads",
                  "1", "--save-every", "5", "--lr-schedule", "cosine", "--warmup-steps", "3"]

full_ck = os.path.join(work, "ck_full")
full = os.path.join(work, "full.jsonl")
run = h.launched(4, common + ["--zero", "3", "--batch-size", "1", "--checkpoint-dir", full_ck, "--metrics", full],
                 work)
if not h.check(run.code == 0, "the uninterrupted 4-rank --zero 3 run exits 0"):
    h.finish()
reference = h.metrics(full)

for world, zero, batch, tolerance in ((4, 3, 1, 0.0), (2, 3, 2, 1e-5), (2, 1, 2, 1e-5)):
    label = f"resumed at step 5 on {world} ranks with --zero {zero}"
    ck = os.path.join(work, f"ck_{world}_{zero}")
    shutil.copytree(full_ck, ck)
    for name in ("model_10.bin", "state_10.bin"):
        os.remove(os.path.join(ck, name))
    path = os.path.join(work, f"resumed_{world}_{zero}.jsonl")
    shutil.copy(full, path)
    run = h.launched(world, common + ["--zero", str(zero), "--batch-size", str(batch), "--checkpoint-dir", ck,
                                      "--metrics", path, "--resume"], work)
    if not h.check(run.code == 0, f"{label}: exits 0"):
        continue
    h.check("resuming from step 5: model_5.bin + state_5.bin, checksums ok" in run.err,
            f"{label}: it says it resumed from the step-5 pair")
    after = h.metrics(path)
    h.check([m["step"] for m in after] == list(range(1, 11)), f"{label}: the metrics file holds steps 1..10 once")
    if tolerance == 0.0:
        h.check([m["loss"] for m in after] == [m["loss"] for m in reference],
                f"{label}: every loss equals the uninterrupted run's, bit for bit")
    else:
        h.compare_losses(label, [m["loss"] for m in after[5:]], [m["loss"] for m in reference[5:]], tolerance)
h.finish()
