"""The files and data order of the PyTorch GPT-2 reference (gpt_reference.py, whose docstring gives the formats): llm.c's
fp32 checkpoint (read_checkpoint, write_checkpoint; flat and load_flat, the parameters as one array in its order),
its token shards (read_shard, write_shard), and the batches of trainer/data/loader.h (DataLoader).
"""

import glob

import numpy as np
import torch

from gpt_reference_model import Gpt, GptConfig

CHECKPOINT_MAGIC = 20240326
CHECKPOINT_VERSION = 3
SHARD_MAGIC = 20240520
SHARD_VERSION = 1
HEADER_INTS = 256


def read_checkpoint(path, model_class=Gpt):
    with open(path, "rb") as f:
        header = np.frombuffer(f.read(HEADER_INTS * 4), dtype=np.int32)
        if header[0] != CHECKPOINT_MAGIC or header[1] != CHECKPOINT_VERSION:
            raise ValueError(f"{path}: not an llm.c fp32 checkpoint (magic {header[0]}, version {header[1]}; "
                             f"want {CHECKPOINT_MAGIC}, {CHECKPOINT_VERSION})")
        cfg = GptConfig(max_seq_len=int(header[2]), vocab_size=int(header[3]), num_layers=int(header[4]),
                        num_heads=int(header[5]), channels=int(header[6]), padded_vocab_size=int(header[7]))
        model = model_class(cfg)
        data = np.frombuffer(f.read(), dtype=np.float32)
    load_flat(model, data, path)
    return model


def load_flat(model, data, what="buffer"):
    """Fills the model from fp32 values in llm.c's checkpoint order."""
    total = sum(p.numel() for _, _, p in model.named_tensors())
    if data.size != total:
        raise ValueError(f"{what}: {data.size} floats, the model needs {total}")
    at = 0
    with torch.no_grad():
        for _, _, p in model.named_tensors():
            p.copy_(torch.from_numpy(data[at:at + p.numel()].copy()).view_as(p))
            at += p.numel()


def flat(model, grads=False):
    """Parameters (or gradients) in llm.c's checkpoint order as one fp32 array."""
    parts = []
    for _, _, p in model.named_tensors():
        t = p.grad if grads else p
        parts.append(torch.zeros_like(p) if t is None else t.detach())
    return torch.cat([t.reshape(-1) for t in parts]).numpy()


def write_checkpoint(model, path):
    cfg = model.cfg
    header = np.zeros(HEADER_INTS, dtype=np.int32)
    header[:8] = [CHECKPOINT_MAGIC, CHECKPOINT_VERSION, cfg.max_seq_len, cfg.vocab_size, cfg.num_layers,
                  cfg.num_heads, cfg.channels, cfg.padded_vocab_size]
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(flat(model).astype(np.float32).tobytes())


def read_shard(path):
    with open(path, "rb") as f:
        header = np.frombuffer(f.read(HEADER_INTS * 4), dtype=np.int32)
        if header[0] != SHARD_MAGIC or header[1] != SHARD_VERSION:
            raise ValueError(f"{path}: not an llm.c token shard (magic {header[0]}, version {header[1]})")
        tokens = np.frombuffer(f.read(), dtype=np.uint16)
    if tokens.size != header[2]:
        raise ValueError(f"{path}: header says {header[2]} tokens, file holds {tokens.size}")
    return tokens


def write_shard(tokens, path):
    header = np.zeros(HEADER_INTS, dtype=np.int32)
    header[:3] = [SHARD_MAGIC, SHARD_VERSION, len(tokens)]
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(np.asarray(tokens, dtype=np.uint16).tobytes())


class DataLoader:
    """The data order of trainer/data/loader.h (see the module docstring)."""

    def __init__(self, pattern, B, T, rank=0, world=1, grad_accum=1):
        files = sorted(glob.glob(pattern))
        if not files:
            raise ValueError(f"--data {pattern!r} matches no file")
        self.B, self.T, self.rank, self.world, self.K = B, T, rank, world, grad_accum
        S = B * T * world * grad_accum
        self.shards = []
        for path in files:
            tokens = read_shard(path)
            steps = (tokens.size - 1) // S
            if steps > 0:
                self.shards.append((tokens, steps))
        if not self.shards:
            raise ValueError(f"no shard matching {pattern!r} holds one step of {S} + 1 tokens")
        self.steps_per_epoch = sum(steps for _, steps in self.shards)

    def batch(self, step, micro):
        j = step % self.steps_per_epoch
        for tokens, steps in self.shards:
            if j < steps:
                break
            j -= steps
        BT = self.B * self.T
        start = ((j * self.K + micro) * self.world + self.rank) * BT
        buf = torch.from_numpy(tokens[start:start + BT + 1].astype(np.int64))
        return buf[:-1].view(self.B, self.T), buf[1:].view(self.B, self.T)
