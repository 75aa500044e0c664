"""dtrain-trainer --recompute none|selective|full (trainer/model/gpt.h's Recompute): backward recomputes instead of
keeping, from the same inputs with the same ops, so every step's loss and gradient norm must be --recompute none's to
the bit, while the activations kept (the --metrics line's mem_activations_bytes, with --zero 1) shrink: selective
drops attention's L x (B, NH, T, T) probabilities to one layer's, full keeps one layer of everything but the residual
stream. Cases: 1 rank fp32 and bf16, 2 ranks ZeRO-3 (whose gathers and releases around each unit must also hold
while a block's forward runs again inside its backward), and the device stand-in with full recompute (no host waits
inside a step: DTRAIN_SYNC_DEBUG=error). The numbers of mem_activations_bytes against `dtrain plan
--trainer-accounting` are checked in tests/integration/test_plan_cli.py.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import trainer_harness as h  # noqa: E402

h.require_binaries(h.TRAINER, h.DTRAIN)
work = h.workdir()
data = h.make_text_shard(work)
BASE = ["--layers", "3", "--channels", "64", "--heads", "4", "--max-seq-len", "32", "--vocab", "256",
        "--seq-len", "32", "--batch-size", "2", "--steps", "5", "--lr", "1e-3", "--grad-clip", "1.0",
        "--threads", "1", "--data", data]
STANDIN = {"DTRAIN_DEVICE_STANDIN": "1", "DTRAIN_SYNC_DEBUG": "error"}


def run(name, recompute, extra=(), nproc=1, env=None):
    """(losses and norms of each step, the last line's mem_activations_bytes) of a run, or ([], None)."""
    path = os.path.join(work, f"{name}-{recompute}.jsonl")
    args = BASE + ["--recompute", recompute, "--metrics", path] + list(extra)
    result = h.trainer(args, work, env=env) if nproc == 1 else h.launched(nproc, args, work, env=env)
    if not h.check(result.code == 0, f"{name} --recompute {recompute}: exit {result.code}"):
        print(result.out[-2000:], result.err[-2000:])
        return [], None
    lines = h.metrics(path)
    return [(m["loss"], m["grad_norm"]) for m in lines], lines[-1].get("mem_activations_bytes")


for name, extra, nproc, env in (
        ("fp32", ["--zero", "1"], 1, None),
        ("bf16", ["--zero", "1", "--precision", "bf16"], 1, None),
        ("zero3", ["--zero", "3"], 2, None),
        ("standin", ["--zero", "1", "--device", "cuda"], 1, STANDIN)):
    kept = {}
    steps, kept["none"] = run(name, "none", extra, nproc, env)
    for recompute in ("selective", "full"):
        again, kept[recompute] = run(name, recompute, extra, nproc, env)
        h.check(len(steps) == 5 and again == steps,
                f"{name} --recompute {recompute}: every step's loss and norm is --recompute none's, to the bit")
    h.check(None not in kept.values() and kept["full"] < kept["selective"] < kept["none"],
            f"{name}: fewer activations kept with more recomputation: {kept}")

h.finish()
