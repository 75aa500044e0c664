"""dtrain-trainer vs the PyTorch reference (trainer/python/gpt_reference.py, Debian's torch): both start from one
llm.c checkpoint and train 10 AdamW steps on the same token shard with warmup, a cosine schedule, gradient clipping
and weight decay; every step's loss must agree within 1e-4 relative, the learning rates within 1e-6. A second run
with --grad-accum 2 checks that micro-steps read the same data in both."""

import os

import trainer_harness as h

h.require_binaries(h.TRAINER)
work = h.workdir()
shard = h.make_text_shard(work)
model = h.reference_init(work)

common = ["--data", shard] + h.TEN_STEPS
for accum, batch in ((1, 4), (2, 2)):
    ours = os.path.join(work, f"ours_{accum}.jsonl")
    theirs = os.path.join(work, f"torch_{accum}.jsonl")
    run = h.trainer(["--init-from", model, "--batch-size", str(batch), "--grad-accum", str(accum), "--threads", "1",
                     "--metrics", ours] + common, work)
    h.check(run.code == 0, f"dtrain-trainer (grad accum {accum}) exits 0")
    ref = h.run([h.PYTHON, h.REFERENCE, "train", "--init-from", model, "-B", str(batch), "--grad-accum", str(accum),
                 "--threads", "1", "--metrics", theirs] + common, work, timeout=240)
    h.check(ref.code == 0, f"the PyTorch reference (grad accum {accum}) exits 0")
    if run.code != 0 or ref.code != 0:
        continue
    a, b = h.metrics(ours), h.metrics(theirs)
    h.compare_losses(f"10 steps, grad accum {accum}: loss vs PyTorch", [m["loss"] for m in a],
                     [m["loss"] for m in b], 1e-4)
    lr_err = max(abs(x["lr"] - y["lr"]) / y["lr"] for x, y in zip(a, b))
    h.check(lr_err <= 1e-6, f"learning rates follow the same schedule (worst relative difference {lr_err:.1e})")
    h.check(a[-1]["loss"] < a[0]["loss"] - 0.1, f"the loss falls ({a[0]['loss']:.3f} -> {a[-1]['loss']:.3f})")
h.finish()
