"""An ordinary PyTorch training script, as people write them, that knows nothing of dtrain and prints its own numbers
(test_script_numbers.py compares dtrain's with them): gloo DDP over a tiny language model (a frozen position table
beside trainable layers), gradient accumulation over K micro-batches with loss / K, optionally a GradScaler, and
batches from a DataLoader or, nanoGPT's way, cut from a memmap of token ids.

    script_numbers_train.py OUT_DIR --accum K [--scaler] [--no-loader] [--steps N]

Each rank writes OUT_DIR/numbers-rank<R>.jsonl: per optimizer step its loss (the sum of its micro-batches' loss / K
as .item() gave them, before any scaling: the mean over the micro-batches), its token ids and samples, and its step
time (from the end of the previous optimizer step to the end of this one); and a first line with its model's trainable
parameters.

GradScaler: torch.cuda.amp.GradScaler disables itself where CUDA is not available (Debian's CPU torch), and its scale()
asserts a CUDA tensor. Then this uses StandInScaler, a subclass with the same scale()/step()/update() arithmetic on
CPU (loss x scale; gradients / scale, the step skipped on inf; the scale x2 every GROWTH_INTERVAL clean steps), so the
scale changes during the run as it would on a GPU."""

import argparse
import json
import os
import tempfile
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

VOCAB, DIM, BATCH, SEQUENCE = 64, 16, 4, 12
GROWTH_INTERVAL = 3


class StandInScaler(torch.cuda.amp.GradScaler):
    def __init__(self, init_scale=2.0 ** 16):
        super().__init__(enabled=False)   # (enabled=True would warn and disable itself without CUDA)
        self.scale_value = torch.tensor(init_scale)
        self.clean_steps = 0
        self.found_inf = False

    def scale(self, outputs):
        return outputs * self.scale_value

    def step(self, optimizer):
        grads = [p.grad for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        for grad in grads:
            grad.div_(self.scale_value)
        self.found_inf = not all(torch.isfinite(grad).all() for grad in grads)
        if not self.found_inf:
            optimizer.step()

    def update(self):
        self.clean_steps = 0 if self.found_inf else self.clean_steps + 1
        if self.found_inf:
            self.scale_value = self.scale_value * 0.5
        elif self.clean_steps == GROWTH_INTERVAL:
            self.scale_value, self.clean_steps = self.scale_value * 2.0, 0


class TinyLM(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.tokens = torch.nn.Embedding(VOCAB, DIM)
        self.positions = torch.nn.Parameter(torch.randn(SEQUENCE, DIM), requires_grad=False)
        self.mix = torch.nn.Linear(DIM, DIM)
        self.head = torch.nn.Linear(DIM, VOCAB)

    def forward(self, idx):
        return self.head(torch.tanh(self.mix(self.tokens(idx) + self.positions)))


class Windows(torch.utils.data.Dataset):
    def __init__(self, data):
        self.data = data

    def __len__(self):
        return len(self.data) - SEQUENCE - 1

    def __getitem__(self, i):
        chunk = torch.from_numpy(self.data[i:i + SEQUENCE + 1].astype(np.int64))
        return chunk[:-1], chunk[1:]


def memmap_tokens(rank):
    path = os.path.join(tempfile.mkdtemp(), "train.bin")
    np.random.default_rng(rank).integers(0, VOCAB, 20000, dtype=np.uint16).tofile(path)
    return np.memmap(path, dtype=np.uint16, mode="r")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--accum", type=int, default=1)
    parser.add_argument("--scaler", action="store_true")
    parser.add_argument("--no-loader", action="store_true")
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(rank)
    model = DDP(TinyLM())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scaler = torch.cuda.amp.GradScaler() if args.scaler else None
    if scaler is not None and not scaler.is_enabled():
        scaler = StandInScaler()
    data = memmap_tokens(rank)
    batches = iter(torch.utils.data.DataLoader(Windows(data), batch_size=BATCH, shuffle=True))
    out = open(os.path.join(args.out, "numbers-rank%d.jsonl" % rank), "w")
    out.write(json.dumps({"model_params": sum(p.numel() for p in model.parameters() if p.requires_grad)}) + "\n")
    last = time.perf_counter()
    for step in range(1, args.steps + 1):
        step_loss, tokens, samples = 0.0, 0, 0
        for _ in range(args.accum):
            if args.no_loader:
                ix = torch.randint(len(data) - SEQUENCE - 1, (BATCH,))
                x = torch.stack([torch.from_numpy(data[i:i + SEQUENCE].astype(np.int64)) for i in ix])
                y = torch.stack([torch.from_numpy(data[i + 1:i + 1 + SEQUENCE].astype(np.int64)) for i in ix])
            else:
                x, y = next(batches)
            time.sleep(0.01)   # (a step long enough that its time is measured well against the clocks' reads)
            loss = F.cross_entropy(model(x).view(-1, VOCAB), y.view(-1)) / args.accum
            step_loss += loss.item()
            tokens, samples = tokens + x.numel(), samples + x.shape[0]
            (scaler.scale(loss) if scaler is not None else loss).backward()
        if scaler is not None:
            scaler.step(opt)
        else:
            opt.step()
        now = time.perf_counter()
        out.write(json.dumps({"step": step, "loss": step_loss, "tokens": tokens, "samples": samples,
                              "step_s": now - last}) + "\n")
        out.flush()
        if scaler is not None:
            scaler.update()
        opt.zero_grad(set_to_none=True)
        last = now   # (dtrain's step, too, runs from the end of one optimizer step to the end of the next)
    out.close()
    del model, opt   # (torch 1.13 with gloo: drop the DDP model before the process group, see README)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
