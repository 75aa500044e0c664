"""Checkpoints across tensor-parallel layouts: a --tp run's checkpoint holds the whole model and its AdamW moments in
the logical layout (the files a run without --tp writes), so it resumes at another --tp and data-parallel split of the
same global batch, and a checkpoint written without --tp resumes with it. Against an uninterrupted T=2 run of 10
AdamW steps (warmup, cosine schedule, clipping, weight decay; 2 ranks, batch 4) that saves at steps 5 and 10, every
resumed run's steps 6-10 must have its losses and gradient norms within 1e-5 relative:
  T=2 -> T=1 x DP=2   2 ranks, batch 2 each
  T=2 -> T=2 x DP=2   4 ranks, batch 2 each
  T=2 -> 1 rank       batch 4
  DP=2 -> T=2         the step-5 checkpoint of a 2-rank DDP run (batch 2 each), resumed on one TP group of 2
  T=2 -> T=2 x DP=2, ZeRO-1   the moments sharded over each data-parallel group as they are loaded
  T=2 x DP=2, ZeRO-1 -> 1 rank   the checkpoint of a ZeRO-1 tensor-parallel run (its moments gathered from the
                      shards, then summed over the TP group), resumed without either;
  T=2 x DP=2, ZeRO-3 -> 1 rank   the same with the parameters sharded too (gathered for the write)."""

import os

import trainer_harness as h

h.require_binaries(h.TRAINER, h.DTRAIN)
work = h.workdir()
shard = h.make_text_shard(work)
common = h.MODEL + ["--data", shard, "--seed", "3", "--threads", "1", "--save-every", "5"] + h.TEN_STEPS


def launch(ranks, label, flags):
    return h.trained(work, ranks, label, common + flags)


def checkpoint_at_5(source, label):
    return h.checkpoint_at(work, source, 5, label)


tp_dir = os.path.join(work, "ckpt-tp2")
whole = launch(2, "tp2", ["--tp", "2", "--batch-size", "4", "--checkpoint-dir", tp_dir])
dp_dir = os.path.join(work, "ckpt-dp2")
ddp = launch(2, "dp2", ["--batch-size", "2", "--checkpoint-dir", dp_dir])
zero_dir = os.path.join(work, "ckpt-tp2-zero1")
zero = launch(4, "tp2-zero1", ["--tp", "2", "--zero", "1", "--batch-size", "2", "--checkpoint-dir", zero_dir])
zero3_dir = os.path.join(work, "ckpt-tp2-zero3")
zero3 = launch(4, "tp2-zero3", ["--tp", "2", "--zero", "3", "--batch-size", "2", "--checkpoint-dir", zero3_dir])
if whole is None or ddp is None or zero is None or zero3 is None:
    h.finish()
h.check(sorted(os.listdir(tp_dir)) == ["model_10.bin", "model_5.bin", "state_10.bin", "state_5.bin"],
        f"the T=2 run saves at steps 5 and 10: {sorted(os.listdir(tp_dir))}")
h.compare_steps("uninterrupted T=2 vs DDP on 2 ranks", whole, ddp, 1e-5)
h.compare_steps("uninterrupted T=2 x DP=2 with ZeRO-1 vs T=2", zero, whole, 1e-5)
h.compare_steps("uninterrupted T=2 x DP=2 with ZeRO-3 vs T=2", zero3, whole, 1e-5)

CASES = (("T=2 -> T=1 x DP=2", tp_dir, 2, ["--batch-size", "2"]),
         ("T=2 -> T=2 x DP=2", tp_dir, 4, ["--tp", "2", "--batch-size", "2"]),
         ("T=2 -> 1 rank", tp_dir, 1, ["--batch-size", "4"]),
         ("DP=2 -> T=2", dp_dir, 2, ["--tp", "2", "--batch-size", "4"]),
         ("T=2 -> T=2 x DP=2, ZeRO-1", tp_dir, 4, ["--tp", "2", "--zero", "1", "--batch-size", "2"]),
         ("T=2 x DP=2, ZeRO-1 -> 1 rank", zero_dir, 1, ["--batch-size", "4"]),
         ("T=2 x DP=2, ZeRO-3 -> 1 rank", zero3_dir, 1, ["--batch-size", "4"]))
for index, (label, source, ranks, flags) in enumerate(CASES):
    directory = checkpoint_at_5(source, str(index))
    resumed = launch(ranks, f"resumed{index}", flags + ["--resume", "--checkpoint-dir", directory])
    if resumed is None:
        continue
    h.check([m["step"] for m in resumed] == list(range(6, 11)), f"{label}: resumes at step 6")
    h.compare_steps(f"{label}: steps 6-10 vs uninterrupted T=2", resumed, whole[5:], 1e-5)
h.finish()
