"""--ddp-comm-dtype bf16 and fp16 (PyTorch's compress hooks) on 2 ranks under the real launcher: comm_bytes per step
is exactly half of the fp32 run's (ring accounting, 2 bytes instead of 4 per gradient), and the per-step losses stay
within 1e-3 relative of the fp32 allreduce's over 10 steps. --zero 1 refuses a 16-bit DDP dtype."""

import os

import trainer_harness as h

h.require_binaries(h.TRAINER, h.DTRAIN)
work = h.workdir()
shard = h.make_text_shard(work)
common = h.MODEL + ["--data", shard, "--seq-len", "64", "--steps", "10", "--lr", "1e-3", "--warmup-steps", "3",
                    "--grad-clip", "1.0", "--threads", "1", "--batch-size", "2", "--seed", "5"]
runs = {}
for dtype in ("fp32", "bf16", "fp16"):
    path = os.path.join(work, dtype + ".jsonl")
    run = h.launched(2, common + ["--ddp-comm-dtype", dtype, "--metrics", path], work)
    if h.check(run.code == 0, f"--ddp-comm-dtype {dtype}: `dtrain run -n 2` exits 0"):
        runs[dtype] = h.metrics(path)
if "fp32" in runs:
    fp32 = runs["fp32"]
    for dtype in ("bf16", "fp16"):
        if dtype not in runs:
            continue
        half = runs[dtype]
        h.check(all(a["comm_bytes"] * 2 == b["comm_bytes"] for a, b in zip(half, fp32)),
                f"--ddp-comm-dtype {dtype}: comm_bytes {half[0]['comm_bytes']} per step = half of fp32's "
                f"{fp32[0]['comm_bytes']}")
        h.compare_losses(f"--ddp-comm-dtype {dtype} vs fp32", [m["loss"] for m in half], [m["loss"] for m in fp32],
                         1e-3)
refused = h.trainer(common + ["--ddp-comm-dtype", "bf16", "--zero", "1"], work)
h.check(refused.code == 2 and "applies to DDP (--zero 0) only" in refused.err,
        "--ddp-comm-dtype bf16 --zero 1 is refused with exit code 2 and says why")
h.finish()
