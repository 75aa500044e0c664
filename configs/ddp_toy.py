"""A small PyTorch DDP regression job for the quickstart: any script that works under torchrun works here."""

import argparse
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=50)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 1)))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    gen = torch.Generator().manual_seed(rank)
    for step in range(args.steps):
        x = torch.randn(16, 32, generator=gen)
        loss = torch.nn.functional.mse_loss(model(x), x.sum(dim=1, keepdim=True))
        opt.zero_grad()
        loss.backward()
        opt.step()
        if rank == 0 and (step % 10 == 0 or step == args.steps - 1):
            print(f"step {step:3d} loss {loss.item():.4f} (world {world}, node {os.environ['GROUP_RANK']})", flush=True)
    # torch 1.13: DDP (and ZeroRedundancyOptimizer) keep the process group alive past destroy_process_group(), and
    # gloo's threads left to the interpreter's teardown may abort the process ("terminate called without an active
    # exception"): drop them first, so its threads end here.
    del model
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
