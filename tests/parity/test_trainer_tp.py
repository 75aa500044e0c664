"""Tensor parallelism in dtrain-trainer (--tp) against the single-process PyTorch reference
(trainer/python/gpt_reference.py): both start from one llm.c checkpoint and train 10 AdamW steps in fp32 (warmup,
cosine schedule, clipping to 1.0, weight decay) on the same shard and global batch of 4 sequences. Every step's loss
must agree within 1e-5 relative, and the gradient norm (the whole model's: the split tensors' squares summed over
the tensor-parallel group, the replicated ones counted once) within 1e-5 of the 1-rank dtrain-trainer run's (the
reference does not write its norm). Layouts, through the real launcher:
  T=2             2 ranks, one tensor-parallel group, batch 4;
  T=2 x DP=2      4 ranks: two TP groups (ranks 0-1, 2-3), DDP between them over the data-parallel groups, batch 2
                  each (the launcher's ranks read the shard as 2 data-parallel ranks would);
  T=2 x DP=2, ZeRO-1  the same with AdamW's state sharded over each data-parallel group (the clip norm from the
                  owned shards, summed over both groups);
  T=2 x DP=2, ZeRO-2 and ZeRO-3  the gradients (and with 3 the parameters, all-gathered around each unit's use)
                  sharded over each data-parallel group too;
  T=4, selective  4 ranks, one head each, the vocabulary in slices of 64, attention's probabilities recomputed;
  T=2, full       2 ranks with full recomputation;
  T=2 and T=4, sequence parallel  the residual stream's tokens split over the group (T=4 with full recomputation);
  T=2, bf16       2 ranks in bf16 mixed precision: within 0.05 absolute of the reference's fp32 losses.
The refusals (--device cuda, --zero 2|3 with --pp) are in test_trainer_cli.py."""

import os

import trainer_harness as h

h.require_binaries(h.TRAINER, h.DTRAIN)
work = h.workdir()
shard = h.make_text_shard(work)
model = h.reference_init(work)
common = ["--init-from", model, "--data", shard, "--threads", "1"] + h.TEN_STEPS

reference, one_rank = h.reference_and_one_rank(work, common)

CASES = (("T=2", 2, 2, 4, []),
         ("T=2 x DP=2", 4, 2, 2, []),
         ("T=2 x DP=2, ZeRO-1", 4, 2, 2, ["--zero", "1"]),
         ("T=2 x DP=2, ZeRO-2", 4, 2, 2, ["--zero", "2"]),
         ("T=2 x DP=2, ZeRO-3", 4, 2, 2, ["--zero", "3"]),
         ("T=4, selective", 4, 4, 4, ["--recompute", "selective"]),
         ("T=2, full", 2, 2, 4, ["--recompute", "full"]),
         ("T=2, sequence parallel", 2, 2, 4, ["--sequence-parallel"]),
         ("T=4, sequence parallel, full", 4, 4, 4, ["--sequence-parallel", "--recompute", "full"]),
         ("T=2, bf16", 2, 2, 4, ["--precision", "bf16"]))
for label, ranks, tp, batch, extra in CASES:
    path = os.path.join(work, label.replace(" ", "").replace(",", "_").replace("=", "") + ".jsonl")
    run = h.launched(ranks, common + ["--tp", str(tp), "--batch-size", str(batch), "--metrics", path] + extra, work)
    h.check(run.code == 0, f"{label}: `dtrain run -n {ranks}` exits 0")
    if run.code != 0:
        continue
    ours = h.metrics(path)
    h.check_layout_run(label, ours, reference, one_rank, "bf16" in extra)
    said = f"tensor parallel {tp} x pipeline parallel 1 x data parallel {ranks // tp}"
    h.check(said in run.out + run.err, f"{label}: rank 0 says '{said}'")
h.finish()
