"""Shared by the model parity tests: a small model with every parameter perturbed away from its initial value (so a
swapped LayerNorm weight/bias or a missing bias shows up), batch files, running dtrain-model-dump, comparisons."""

import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "trainer", "python"))
import gpt_reference as ref  # noqa: E402

# V = 250 < Vp = 256 exercises the padded vocabulary; T < maxT leaves wpe rows without gradient; the tests use
# T > 64 so that the CPU attention runs more than one row block, the last one partial.
CONFIG = ref.GptConfig(max_seq_len=96, vocab_size=250, padded_vocab_size=256, num_layers=2, num_heads=4,
                       channels=64)
TINY = 1e-30


def dump_tool():
    path = os.environ.get("DTRAIN_MODEL_DUMP")
    if not path or not os.path.exists(path):
        print(f"DTRAIN_MODEL_DUMP={path!r} is not a built dtrain-model-dump", file=sys.stderr)
        sys.exit(1)
    return path


def make_model(seed=1234):
    torch.manual_seed(seed)
    model = ref.Gpt(CONFIG)
    model.init_weights(seed)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, _, p in model.named_tensors():
            # LayerNorm weights around 1, everything else (biases, padded wte rows too) moved off its init value.
            p.add_(torch.randn(p.shape, generator=g) * (0.1 if name.startswith("ln") else 0.02))
    return model


def make_batches(count, B, T, seed=99):
    g = torch.Generator().manual_seed(seed)
    data = torch.randint(0, CONFIG.vocab_size, (count, B, T + 1), generator=g)
    return [(data[i, :, :-1].contiguous(), data[i, :, 1:].contiguous()) for i in range(count)]


def write_batches(batches, path):
    B, T = batches[0][0].shape
    parts = [np.array([len(batches), B, T], dtype=np.int32)]
    for x, y in batches:
        parts += [x.numpy().astype(np.int32).ravel(), y.numpy().astype(np.int32).ravel()]
    with open(path, "wb") as f:
        for p in parts:
            f.write(p.tobytes())


def read_dump(path):
    out = {}
    with open(path, "rb") as f:
        while True:
            head = f.read(4)
            if not head:
                return out
            n = int(np.frombuffer(head, np.int32)[0])
            name = f.read(n).decode()
            count = int(np.frombuffer(f.read(8), np.int64)[0])
            out[name] = np.frombuffer(f.read(count * 4), np.float32).astype(np.float64)


def run_dump(model, batches, *extra):
    """Writes the checkpoint and batches, runs dtrain-model-dump with extra arguments, returns its sections."""
    with tempfile.TemporaryDirectory() as tmp:
        ckpt, data, out = (os.path.join(tmp, n) for n in ("model.bin", "batches.bin", "out.bin"))
        ref.write_checkpoint(model, ckpt)
        write_batches(batches, data)
        cmd = [dump_tool(), "--checkpoint", ckpt, "--batches", data, "--out", out, *map(str, extra)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        if proc.returncode != 0:
            print(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr}", file=sys.stderr)
            sys.exit(1)
        return read_dump(out)


def rel_error(a, b):
    """max |a - b| / max |b| over a tensor (max |a - b| when b is all zero)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)) / max(float(np.max(np.abs(b))), TINY)) if b.size else 0.0


class Checker:
    """Collects comparisons, prints one line each, and exits non-zero at the end if any failed."""

    def __init__(self):
        self.failures = []

    def check(self, what, actual, expected, tol):
        err = rel_error(actual, expected)
        ok = err <= tol
        print(f"{'ok  ' if ok else 'FAIL'} {what}: rel err {err:.3e} (tolerance {tol:.0e})")
        if not ok:
            self.failures.append(what)

    def require(self, what, condition):
        print(f"{'ok  ' if condition else 'FAIL'} {what}")
        if not condition:
            self.failures.append(what)

    def finish(self):
        if self.failures:
            print(f"{len(self.failures)} check(s) failed: {', '.join(self.failures[:10])}")
            sys.exit(1)
        print("all checks passed")


def split_tensors(model, flat_values):
    """(label, values) per tensor of a buffer in llm.c order."""
    at = 0
    for name, layer, p in model.named_tensors():
        yield (f"{name}[{layer}]" if layer >= 0 else name), flat_values[at:at + p.numel()]
        at += p.numel()
