"""--precision bf16 and fp16 against PyTorch: over 10 AdamW steps (warmup, cosine schedule, clipping, weight decay)
from one llm.c checkpoint the reference wrote, every step's loss must be
  - within 0.05 absolute of the fp32 PyTorch reference (trainer/python/gpt_reference.py; llm.c's bf16 criterion),
  - within 1e-3 relative of the PyTorch reference that rounds the matrix products' inputs as dtrain-trainer does
    (trainer/python/mixed_reference.py; fp16 with the same dynamic loss scale),
as one process (--zero 0) and on 2 ranks under the real launcher with --zero 0, 1, 2 and 3. With --zero 3 the
parameters are all-gathered in 16 bits: the all-gathers' share of comm_bytes (comm_bytes less the fp32
reduce-scatters, which send mem_params_bytes * (W - 1) per step) is half that of an fp32 --zero 3 run; with
--param-dtype fp32 they are fp32's and the losses equal --zero 2's bit for bit. --param-dtype without --zero 3, or
other than fp32 or the --precision, is refused. The worst differences are printed per precision and stage."""

import os

import trainer_harness as h

h.require_binaries(h.TRAINER, h.DTRAIN)
MIXED = os.path.join(h.SOURCE_DIR, "trainer", "python", "mixed_reference.py")
work = h.workdir()
shard = h.make_text_shard(work)
init = h.reference_init(work)
GLOBAL_B = 4
common = ["--init-from", init, "--data", shard] + h.TEN_STEPS + ["--threads", "1"]


def reference(script, extra, name):
    path = os.path.join(work, name + ".jsonl")
    ref = h.run([h.PYTHON, script, "train", "-B", str(GLOBAL_B), "--metrics", path] + extra + common, work,
                timeout=240)
    h.check(ref.code == 0, f"{name}: the PyTorch reference exits 0")
    return h.losses(path) if ref.code == 0 else None


def worst_abs(a, b):
    return max(abs(x - y) for x, y in zip(a, b))


fp32 = reference(h.REFERENCE, [], "torch_fp32")
for precision in ("bf16", "fp16"):
    rounded = reference(MIXED, ["--precision", precision], f"torch_{precision}")
    runs = [("1 process", 1, 0)] + [(f"-n 2 --zero {z}", 2, z) for z in (0, 1, 2, 3)]
    for label, world, zero in runs:
        path = os.path.join(work, f"{precision}_n{world}_z{zero}.jsonl")
        args = ["--precision", precision, "--zero", str(zero), "--batch-size", str(GLOBAL_B // world),
                "--metrics", path] + common
        run = h.trainer(args, work) if world == 1 else h.launched(world, h.MODEL + args, work)
        if not h.check(run.code == 0, f"{precision} {label}: dtrain-trainer exits 0") or not fp32 or not rounded:
            continue
        steps = h.metrics(path)
        ours = [m["loss"] for m in steps]
        diff = worst_abs(ours, fp32)
        h.check(len(ours) == 10 and diff <= 0.05,
                f"{precision} {label}: worst |loss - PyTorch fp32| {diff:.2e} (tolerance 0.05)")
        h.compare_losses(f"{precision} {label}: loss vs PyTorch with rounded matmul inputs", ours, rounded, 1e-3)
        if precision == "fp16":
            h.check(all(m["loss_scale"] == 65536 and m["skipped"] is False for m in steps),
                    f"{precision} {label}: loss scale 65536 throughout, no step skipped")
        h.check(ours[-1] < ours[0] - 0.1, f"{precision} {label}: the loss falls ({ours[0]:.3f} -> {ours[-1]:.3f})")

def gather_bytes(path):
    """Per step of a 2-rank --zero 3 run: comm_bytes less its fp32 reduce-scatters (each rank sends its shard's
    bytes, mem_params_bytes * (W - 1), with K = 1)."""
    if not os.path.exists(path):
        return []
    return [m["comm_bytes"] - m["mem_params_bytes"] for m in h.metrics(path)]


fp32_path = os.path.join(work, "fp32_n2_z3.jsonl")
fp32_run = h.launched(2, h.MODEL + ["--zero", "3", "--batch-size", str(GLOBAL_B // 2), "--metrics", fp32_path] +
                      common, work)
if h.check(fp32_run.code == 0, "fp32 -n 2 --zero 3: dtrain-trainer exits 0"):
    full = gather_bytes(fp32_path)
    for precision in ("bf16", "fp16"):
        half = gather_bytes(os.path.join(work, f"{precision}_n2_z3.jsonl"))
        h.check(len(half) == len(full) == 10 and all(2 * x == y and x > 0 for x, y in zip(half, full)),
                f"{precision} -n 2 --zero 3: the parameter all-gathers send half the bytes of fp32 "
                f"({half[0] if half else None} vs {full[0] if full else None} per step)")

    # --param-dtype fp32: the fp32 master is gathered and rounded per unit, so the model computes as --zero 2 does.
    path = os.path.join(work, "bf16_n2_z3_fp32_gathers.jsonl")
    run = h.launched(2, h.MODEL + ["--precision", "bf16", "--zero", "3", "--param-dtype", "fp32", "--batch-size",
                                   str(GLOBAL_B // 2), "--metrics", path] + common, work)
    if h.check(run.code == 0, "bf16 -n 2 --zero 3 --param-dtype fp32: dtrain-trainer exits 0"):
        stage2 = h.losses(os.path.join(work, "bf16_n2_z2.jsonl"))
        ours = h.losses(path)
        h.check(len(ours) == 10 and ours == stage2,
                f"bf16 --zero 3 --param-dtype fp32: losses equal --zero 2's bit for bit "
                f"(worst difference {worst_abs(ours, stage2):.1e})")
        h.check(gather_bytes(path) == full, "bf16 --zero 3 --param-dtype fp32: the all-gathers send fp32's bytes")

for flags, why in ((["--precision", "bf16", "--zero", "2", "--param-dtype", "bf16"], "applies to --zero 3 only"),
                   (["--precision", "bf16", "--zero", "3", "--param-dtype", "fp16"], "gathered in fp32 or in the")):
    refused = h.trainer(flags + ["--batch-size", "4"] + common, work)
    h.check(refused.code == 2 and why in refused.err, f"{' '.join(flags)}: refused with exit code 2 and says why")
h.finish()
