"""--precision bf16 and fp16 against PyTorch: over 10 AdamW steps (warmup, cosine schedule, clipping, weight decay)
from one llm.c checkpoint the reference wrote, every step's loss must be
  - within 0.05 absolute of the fp32 PyTorch reference (trainer/python/gpt_reference.py; llm.c's bf16 criterion),
  - within 1e-3 relative of the PyTorch reference that rounds the matrix products' inputs as dtrain-trainer does
    (trainer/python/mixed_reference.py; fp16 with the same dynamic loss scale),
as one process (--zero 0) and on 2 ranks under the real launcher with --zero 0, 1, 2 and 3. From --zero 1 the fp32
master is sharded and the parameter all-gathers carry 16 bits: comm_bytes less the fp32 reduce-scatters (which
send mem_grads_bytes * (W - 1) per step) is half that of fp32, and mem_optim_bytes is the ZeRO paper's 12P/W
(3 x mem_grads_bytes at stage 2 on 2 ranks). --param-dtype fp32 keeps the whole fp32 master: its all-gathers are
fp32's and the losses of --zero 3 equal those of --zero 2 with the same flag bit for bit. --reduce-dtype bf16/fp16
reduce-scatters in 16 bits: half the bytes, losses within the same tolerances, also with gradient accumulation
(K=2 within 1e-3 relative of K=1 with 2B). --param-dtype and --reduce-dtype with --zero 0, or --param-dtype other
than fp32 or the --precision, are refused. The worst differences are printed per precision and stage."""

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

def gather_bytes(steps, stage):
    """Per step of a 2-rank run with K = 1 and fp32 reduce-scatters: comm_bytes less those (each rank sends the
    other half of the fp32 gradient, 2P: mem_grads_bytes from stage 2 (4P/W), half of it at stage 1 (4P))."""
    fp32_reduce = (lambda m: m["mem_grads_bytes"] // 2) if stage == 1 else (lambda m: m["mem_grads_bytes"])
    return [m["comm_bytes"] - fp32_reduce(m) for m in steps or []]


def file_of(name):
    return os.path.join(work, name.replace(" ", "_").replace("-", "") + ".jsonl")


def recorded(name):
    """The metrics of the earlier run `name` (as the loop above names its files), or [] when it failed."""
    path = os.path.join(work, name + ".jsonl")
    return h.metrics(path) if os.path.exists(path) else []


def launched_run(name, flags):
    """A 2-rank run with the global batch; flags come last, so they override (--batch-size with --grad-accum)."""
    path = file_of(name)
    run = h.launched(2, h.MODEL + ["--batch-size", str(GLOBAL_B // 2), "--metrics", path] + common + flags, work)
    return h.metrics(path) if h.check(run.code == 0, f"{name}: dtrain-trainer exits 0") else None


fp32_runs = {stage: launched_run(f"fp32 -n 2 --zero {stage}", ["--zero", str(stage)]) for stage in (1, 3)}
for stage, fp32_steps in fp32_runs.items():
    full = gather_bytes(fp32_steps, stage)
    for precision in ("bf16", "fp16"):
        half = gather_bytes(recorded(f"{precision}_n2_z{stage}"), stage)
        h.check(len(half) == len(full) == 10 and all(2 * x == y and x > 0 for x, y in zip(half, full)),
                f"{precision} -n 2 --zero {stage}: the parameter all-gathers send half the bytes of fp32 "
                f"({half[0] if half else None} vs {full[0] if full else None} per step)")

# The ZeRO paper's accounting (shards.h, mixed_zero_memory): optimizer = fp32 master + m + v = 12P/W once the master
# is sharded, 4P + 8P/W when --param-dtype fp32 keeps it whole; gradients fp32.
steps = recorded("bf16_n2_z2")
h.check(bool(steps) and all(m["mem_optim_bytes"] == 3 * m["mem_grads_bytes"] for m in steps),
        "bf16 -n 2 --zero 2: mem_optim_bytes = 12P/W = 3 x mem_grads_bytes (the fp32 master sharded)")
steps = recorded("bf16_n2_z3")
h.check(bool(steps) and all(2 * m["mem_params_bytes"] == m["mem_grads_bytes"] for m in steps),
        "bf16 -n 2 --zero 3: mem_params_bytes = 2P/W, half of mem_grads_bytes = 4P/W")

# --param-dtype fp32: the whole fp32 master on every rank, gathered in fp32, so --zero 2 and --zero 3 compute alike.
whole = {stage: launched_run(f"bf16 -n 2 --zero {stage} --param-dtype fp32",
                             ["--precision", "bf16", "--zero", str(stage), "--param-dtype", "fp32"]) for stage in (2, 3)}
if whole[2] and whole[3]:
    two, three = [m["loss"] for m in whole[2]], [m["loss"] for m in whole[3]]
    h.check(len(three) == 10 and three == two, f"bf16 --param-dtype fp32: --zero 3's losses equal --zero 2's bit "
            f"for bit (worst difference {worst_abs(three, two):.1e})")
    h.check(all(m["mem_optim_bytes"] == 4 * m["mem_grads_bytes"] for m in whole[2]),
            "bf16 --zero 2 --param-dtype fp32: mem_optim_bytes = 4P + 8P/W = 4 x mem_grads_bytes")
    if fp32_runs[3]:
        h.check(gather_bytes(whole[3], 3) == gather_bytes(fp32_runs[3], 3),
                "bf16 --zero 3 --param-dtype fp32: the all-gathers send fp32's bytes")

# --reduce-dtype: 16-bit reduce-scatters, half their bytes; K = 2 accumulates the reduced sums in fp32.
reduced = {}
for precision, stage in (("bf16", 2), ("fp16", 1), ("bf16", 3)):
    name = f"{precision} -n 2 --zero {stage} --reduce-dtype {precision}"
    steps = launched_run(name, ["--precision", precision, "--zero", str(stage), "--reduce-dtype", precision])
    reduced[stage] = steps
    base = recorded(f"{precision}_n2_z{stage}")
    if not steps or not base:
        continue
    ours = [m["loss"] for m in steps]
    diff = worst_abs(ours, fp32) if fp32 else 0
    h.check(len(ours) == 10 and diff <= 0.05, f"{name}: worst |loss - PyTorch fp32| {diff:.2e} (tolerance 0.05)")
    h.compare_losses(f"{name}: loss vs the fp32-reduce run", ours, [m["loss"] for m in base], 1e-3)
    saved = [b["comm_bytes"] - m["comm_bytes"] for m, b in zip(steps, base)]
    fp32_reduce = [x["comm_bytes"] - y for x, y in zip(base, gather_bytes(base, stage))]
    h.check(saved == [r // 2 for r in fp32_reduce] and all(r > 0 for r in fp32_reduce),
            f"{name}: the reduce-scatters send half the bytes ({saved[0]} fewer per step)")
steps = launched_run("bf16 -n 2 --zero 2 --reduce-dtype bf16 K=2",
                     ["--precision", "bf16", "--zero", "2", "--reduce-dtype", "bf16", "--grad-accum", "2",
                      "--batch-size", str(GLOBAL_B // 4)])
single = [m["loss"] for m in reduced[2] or []]
if steps and single:
    h.compare_losses("bf16 --zero 2 --reduce-dtype bf16: K=2 with B/2 vs K=1 with B", [m["loss"] for m in steps],
                     single, 1e-3)

for flags, why in ((["--precision", "bf16", "--param-dtype", "bf16"], "applies to --zero 1, 2 and 3"),
                   (["--precision", "bf16", "--reduce-dtype", "bf16"], "has --ddp-comm-dtype"),
                   (["--precision", "bf16", "--zero", "3", "--param-dtype", "fp16"], "gathered in fp32 or in the")):
    refused = h.trainer(flags + ["--batch-size", "4"] + common, work)
    h.check(refused.code == 2 and why in refused.err, f"{' '.join(flags)}: refused with exit code 2 and says why")
h.finish()
