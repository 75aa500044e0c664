"""A PyTorch DDP script that reads its data through a DataLoader, as most training scripts do: a map-style Dataset,
a DistributedSampler that gives each rank its own part of every epoch, and set_epoch so each epoch is shuffled anew.
Run by configs/torch_dataloader.yaml; it works unchanged under torchrun. NCCL on GPUs when every rank has one,
else gloo on CPU.

The data is a fixed synthetic regression set (y = a noisy linear function of x) so the example needs no download;
swap SyntheticRegression for your own Dataset."""

import argparse
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, DistributedSampler


class SyntheticRegression(Dataset):
    """`size` samples of 32 features and a target, the same on every rank (seeded)."""

    def __init__(self, size, features=32):
        gen = torch.Generator().manual_seed(1234)
        self.x = torch.randn(size, features, generator=gen)
        weights = torch.randn(features, 1, generator=gen)
        self.y = self.x @ weights + 0.01 * torch.randn(size, 1, generator=gen)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, index):
        return self.x[index], self.y[index]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--samples", type=int, default=4096)
    parser.add_argument("--batch-size", type=int, default=64, help="per rank")
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--loader-workers", type=int, default=0, help="DataLoader worker processes per rank")
    args = parser.parse_args()

    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    use_cuda = torch.cuda.is_available() and torch.cuda.device_count() > local_rank
    dist.init_process_group("nccl" if use_cuda else "gloo")
    device = torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(device)
    rank, world = dist.get_rank(), dist.get_world_size()

    dataset = SyntheticRegression(args.samples)
    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True, seed=0, drop_last=True)
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler, num_workers=args.loader_workers,
                        pin_memory=use_cuda, drop_last=True)

    torch.manual_seed(0)  # the same initial weights on every rank (DDP also broadcasts rank 0's)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 1)).to(device)
    model = DDP(model, device_ids=[local_rank] if use_cuda else None)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)

    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)  # a new shuffle each epoch, the same on every rank
        total, batches = torch.zeros(1, device=device), 0
        for x, y in loader:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.detach()
            batches += 1
        dist.all_reduce(total)
        if rank == 0:
            print(f"epoch {epoch} mean loss {total.item() / (batches * world):.4f} "
                  f"({batches} batches of {args.batch_size} per rank, world {world})", flush=True)
    # torch 1.13: DDP (and ZeroRedundancyOptimizer) keep the process group alive past destroy_process_group(), and
    # gloo's threads left to the interpreter's teardown may abort the process ("terminate called without an active
    # exception"): drop them first, so its threads end here.
    del model
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
