"""Pipeline parallelism in dtrain-trainer (--pp, with --tp and data parallelism) against the single-process PyTorch
reference (trainer/python/gpt_reference.py): both start from one llm.c checkpoint of a 4-layer model and train 10
AdamW steps in fp32 (warmup, cosine schedule, clipping to 1.0, weight decay) on the same shard and global batch of 4
sequences, the pipeline's micro-batches being --grad-accum's. Every step's loss must agree within 1e-5 relative with
the reference's, and the gradient norm (the whole model's: the stages' sums of squares added over the pipeline group,
the tied wte counted once) within 1e-5 of the 1-rank dtrain-trainer run's. Layouts, through the real launcher:
  P=2, 1f1b          2 ranks, 4 micro-batches of 1 sequence;
  P=2, gpipe         the same with every forward before the backwards;
  P=4, 1f1b          4 ranks, one layer each (the middle stages hold neither embedding nor head);
  P=4, gpipe, full   with full recomputation;
  P=2 x DP=2         4 ranks: two pipelines, DDP between their stages, 2 micro-batches each;
  P=2, V=2           interleaved 1F1B: 2 chunks of one layer per stage (stage 0 holds layers 0 and 2);
  P=2, V=2 x DP=2, ZeRO-1   the chunks' gradients reduce-scattered as each chunk's last backward ends;
  T=2 x P=2, selective   4 ranks: each stage split over a tensor-parallel pair, attention recomputed;
  T=2 x P=2, sequence parallel   the stages' activations sent as each TP rank's half of the tokens;
  T=2 x P=2 x DP=2, ZeRO-1   8 ranks, AdamW's state sharded over each data-parallel group;
  T=2 x P=2, bf16    within 0.05 absolute of the reference's fp32 losses;
  P=2, 1f1b, gloo    DTRAIN_COMM_BACKEND=gloo: the stages' sends over TCP, where the others go through shared memory;
  T=2 x P=2, 2 nodes two simulated nodes of 2 ranks, one stage each: the TP groups in shared memory, the stages'
                     sends over gloo between the nodes.
Every run's rank 0 names its layout and its groups' backends: shm for every group on one node (all ranks are on this
node but in the 2-node case), gloo across nodes and when asked for. The refusals are in test_trainer_cli.py."""

import os

import trainer_harness as h

h.require_binaries(h.TRAINER, h.DTRAIN)
work = h.workdir()
shard = h.make_text_shard(work)
MODEL = ["--layers", "4", "--channels", "64", "--heads", "4", "--max-seq-len", "64", "--vocab", "256"]
model = h.reference_init(work, MODEL)
common = ["--init-from", model, "--data", shard, "--threads", "1"] + h.TEN_STEPS

reference, one_rank = h.reference_and_one_rank(work, common)

# label, ranks, tp, pp, batch, micro-batches, extra flags
CASES = (("P=2, 1f1b", 2, 1, 2, 1, 4, []),
         ("P=2, gpipe", 2, 1, 2, 1, 4, ["--pp-schedule", "gpipe"]),
         ("P=4, 1f1b", 4, 1, 4, 1, 4, []),
         ("P=4, gpipe, full", 4, 1, 4, 2, 2, ["--pp-schedule", "gpipe", "--recompute", "full"]),
         ("P=2 x DP=2", 4, 1, 2, 1, 2, []),
         ("P=2, V=2", 2, 1, 2, 1, 4, ["--pp-virtual", "2"]),
         ("P=2, V=2 x DP=2, ZeRO-1", 4, 1, 2, 1, 2, ["--pp-virtual", "2", "--zero", "1"]),
         ("P=2 x DP=2, ZeRO-1, bf16", 4, 1, 2, 1, 2, ["--zero", "1", "--precision", "bf16"]),
         ("T=2 x P=2, selective", 4, 2, 2, 1, 4, ["--recompute", "selective"]),
         ("T=2 x P=2, sequence parallel", 4, 2, 2, 1, 4, ["--sequence-parallel"]),
         ("T=2 x P=2 x DP=2, ZeRO-1", 8, 2, 2, 1, 2, ["--zero", "1"]),
         ("T=2 x P=2, bf16", 4, 2, 2, 1, 4, ["--precision", "bf16"]),
         ("P=2, 1f1b, gloo", 2, 1, 2, 1, 4, []),
         ("T=2 x P=2, 2 nodes", 4, 2, 2, 1, 4, []))
for label, ranks, tp, pp, batch, micro, extra in CASES:
    backend = "gloo" if label.endswith("gloo") else "shm"
    nodes = 2 if label.endswith("2 nodes") else 1
    path = os.path.join(work, "".join(c for c in label if c.isalnum()) + ".jsonl")
    args = ["--tp", str(tp), "--pp", str(pp), "--batch-size", str(batch), "--grad-accum", str(micro)]
    run = h.launched(ranks // nodes, common + args + ["--metrics", path] + extra, work, timeout=240,
                     launcher_args=["--nodes", str(nodes)],
                     env={"DTRAIN_COMM_BACKEND": backend} if backend == "gloo" else None)
    h.check(run.code == 0, f"{label}: `dtrain run -n {ranks // nodes} --nodes {nodes}` exits 0")
    if run.code != 0:
        print((run.out + run.err)[-3000:])
        continue
    ours = h.metrics(path)
    said = f"tensor parallel {tp} x pipeline parallel {pp}"
    h.check(said in run.out + run.err, f"{label}: rank 0 says '{said}'")
    pp_backend = "gloo" if nodes > 1 else backend
    groups = (f"groups over tp {'local' if tp == 1 else backend}, dp {'local' if ranks == tp * pp else backend}, "
              f"pp {pp_backend}")
    h.check(groups in run.out + run.err, f"{label}: rank 0 says '{groups}'")
    h.check_layout_run(label, ours, reference, one_rank, "bf16" in extra)
h.finish()
