"""One rank of the PyTorch side of zero.sh: DDP + ZeroRedundancyOptimizer (ZeRO-1: AdamW's state sharded over the
ranks, the updated parameters broadcast by their owners) on trainer/python's GPT, Gloo, started by torchrun.

One step is what dtrain-trainer times: zero_grad, forward, backward (DDP's bucketed allreduce overlapped with it),
global-norm clip, AdamW (weight decay on the 2-D tensors only, as make_optimizer's groups). Every rank trains on its
own random batch, reused every step (as gpt_reference.py bench). Rank 0 writes one JSON line to --out with every
step's wall time."""

import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "trainer", "python"))
import gpt_reference as ref  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    ref.add_model_args(parser)
    parser.add_argument("-B", "--batch-size", type=int, default=8)
    parser.add_argument("-T", "--seq-len", type=int, default=256)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    args.model = None

    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = ref.Gpt(ref.config_from_args(args))
    model.init_weights(0)
    ddp = DistributedDataParallel(model)
    decay, no_decay = model.decay_groups()
    opt = ZeroRedundancyOptimizer([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                                  optimizer_class=torch.optim.AdamW, lr=6e-4, betas=(0.9, 0.95), eps=1e-8)
    gen = torch.Generator().manual_seed(1 + rank)
    data = torch.randint(0, model.cfg.vocab_size, (args.batch_size, args.seq_len + 1), generator=gen)
    inputs, targets = data[:, :-1], data[:, 1:]
    params = list(model.parameters())
    times = []
    for step in range(args.warmup + args.steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=False)
        _, loss = ddp(inputs, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        if step >= args.warmup:
            times.append((time.perf_counter() - t0) * 1000.0)
    if rank == 0:
        with open(args.out, "w") as f:
            f.write(json.dumps({"torch": torch.__version__, "world": world, "step_ms": times,
                                "loss": loss.item()}) + "\n")
    # torch 1.13: DDP (and ZeroRedundancyOptimizer) keep the process group alive past destroy_process_group(), and
    # gloo's threads left to the interpreter's teardown may abort the process ("terminate called without an active
    # exception"): drop them first, so its threads end here.
    del ddp, opt
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
