"""An ordinary DDP training script for `dtrain tune`'s tests: a dataset read from "slow storage" (--delay-ms a sample),
a DataLoader, an MLP or a deep stack of small layers, AdamW, a loop over epochs. Nothing in it knows of dtrain. Rank 0
prints its own samples/s over the steps after the tenth, and its first losses."""

import argparse
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

parser = argparse.ArgumentParser()
parser.add_argument("--delay-ms", type=float, default=0.0, help="the wait to read one sample")
parser.add_argument("--batch", type=int, default=8)
parser.add_argument("--workers", type=int, default=0)
parser.add_argument("--bucket-mb", type=float, default=25.0)
parser.add_argument("--model", choices=["mlp", "many-small"], default="mlp")
parser.add_argument("--augment", action="store_true", help="noise from the global generator on every sample")
parser.add_argument("--main-process-only", action="store_true", help="a dataset that cannot load in workers")
parser.add_argument("--steps", type=int, default=100000)
args = parser.parse_args()

# The MLP's samples are long and its layers narrow: its compute is about the 16 ms a batch of 8 takes to read at
# --delay-ms 2, and its gradients (0.5 MB) cost little to reduce. The stack of small layers has 1M parameters in 129
# tensors.
SEQ, DIM = (64, 128) if args.model == "mlp" else (16, 128)


class Samples(torch.utils.data.Dataset):
    def __len__(self):
        return 1 << 16

    def __getitem__(self, index):
        if args.main_process_only and torch.utils.data.get_worker_info() is not None:
            raise RuntimeError("this dataset reads through a handle only the main process has")
        if args.delay_ms:
            time.sleep(args.delay_ms / 1000.0)
        x = torch.randn(SEQ, DIM, generator=torch.Generator().manual_seed(index))
        if args.augment:
            x = x + 0.5 * torch.randn(SEQ, DIM)
        return x, x.mean(dim=-1, keepdim=True)


def make_model():
    if args.model == "mlp":
        return torch.nn.Sequential(torch.nn.Linear(DIM, 256), torch.nn.GELU(), torch.nn.Linear(256, DIM),
                                   torch.nn.GELU(), torch.nn.Linear(DIM, 256), torch.nn.GELU(),
                                   torch.nn.Linear(256, DIM), torch.nn.Linear(DIM, 1))
    layers = []
    for _ in range(64):
        layers += [torch.nn.Linear(DIM, DIM), torch.nn.LayerNorm(DIM)]
    return torch.nn.Sequential(*layers, torch.nn.Linear(DIM, 1))


dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = DDP(make_model(), bucket_cap_mb=args.bucket_mb)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
data = Samples()
sampler = torch.utils.data.distributed.DistributedSampler(data, shuffle=True, seed=0)
loader = torch.utils.data.DataLoader(data, batch_size=args.batch, sampler=sampler, num_workers=args.workers)
step, began, losses = 0, None, []
for epoch in range(1000):
    sampler.set_epoch(epoch)
    for x, y in loader:
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        step += 1
        if step <= 5:
            losses.append(loss.item())
        if step == 10:
            began = time.perf_counter()
        if step >= args.steps:
            break
    if step >= args.steps:
        break
if rank == 0 and began is not None and step > 10:
    print("samples/s %.1f" % ((step - 10) * args.batch * dist.get_world_size() / (time.perf_counter() - began)))
    print("losses %s" % " ".join(repr(v) for v in losses))
dist.destroy_process_group()
