"""Gradient accumulation: K micro-steps of B/K give the same per-step losses as one step of B (within 1e-5
relative, and so do the gradient norms), for K = 2 and 4, on one process. The loss of a step is the mean over
its micro-steps."""

import os

import trainer_harness as h

h.require_binaries(h.TRAINER)
work = h.workdir()
shard = h.make_text_shard(work)
common = h.MODEL + ["--data", shard, "--seq-len", "64", "--steps", "6", "--lr", "1e-3", "--seed", "3",
                    "--threads", "1"]

results = {}
for batch, accum in ((4, 1), (2, 2), (1, 4)):
    path = os.path.join(work, f"accum_{accum}.jsonl")
    run = h.trainer(common + ["--batch-size", str(batch), "--grad-accum", str(accum), "--metrics", path], work)
    if h.check(run.code == 0, f"{accum} micro-steps x B={batch} exits 0"):
        results[accum] = h.metrics(path)
if 1 in results:
    for accum in (2, 4):
        if accum in results:
            h.compare_steps(f"{accum} micro-steps x B={4 // accum} vs 1 x B=4", results[accum], results[1], 1e-5)
    h.check(results[1][-1]["loss"] < results[1][0]["loss"] - 0.5, "the loss falls")
h.finish()
