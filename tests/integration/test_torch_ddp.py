"""A real PyTorch DDP job (Debian's torch, gloo backend) on 2 local nodes x 2 workers: trains a small model, and
every rank ends with identical parameters that differ from the initial ones."""

import os

from harness import PYTHON, Run, check, finish, write

TRAIN = r"""
import hashlib, os, sys
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")  # env:// from MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE
rank, world = dist.get_rank(), dist.get_world_size()
assert world == int(os.environ["WORLD_SIZE"]) == 4
torch.manual_seed(1234)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
initial = [p.detach().clone() for p in model.parameters()]
ddp = DDP(model)
opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
gen = torch.Generator().manual_seed(100 + rank)  # each rank sees different data
for step in range(20):
    x = torch.randn(8, 16, generator=gen)
    y = x.sum(dim=1, keepdim=True)
    loss = torch.nn.functional.mse_loss(ddp(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
flat = torch.cat([p.detach().flatten() for p in model.parameters()])
moved = any(not torch.equal(a, b) for a, b in zip(initial, model.parameters()))
digest = hashlib.sha256(flat.numpy().tobytes()).hexdigest()
with open(os.path.join(sys.argv[1], "params_%d" % rank), "w") as f:
    f.write("%s %s %s\n" % (digest, moved, os.environ["GROUP_RANK"]))
print("rank", rank, "loss", float(loss))
# torch 1.13: DDP (and ZeroRedundancyOptimizer) keep the process group alive past destroy_process_group(), and
# gloo's threads left to the interpreter's teardown may abort the process ("terminate called without an active
# exception"): drop them first, so its threads end here.
del ddp
dist.destroy_process_group()
"""

SPEC = """
name: torch-ddp
nodes: {provider: local, count: 2}
workers_per_node: 2
command: [%s, %s, %s]
logs: {console: all}
"""

run = Run([], timeout=240)
out = os.path.join(run.dir, "out")
os.makedirs(out)
script = write(os.path.join(run.dir, "train.py"), TRAIN)
spec = write(os.path.join(run.dir, "job.yaml"), SPEC % (PYTHON, script, out))
run.args += ["launch", spec]
run.run()
run.show()
check(run.code == 0, "PyTorch DDP job exits 0, got %s" % run.code)
results = {}
for rank in range(4):
    path = os.path.join(out, "params_%d" % rank)
    if check(os.path.exists(path), "rank %d wrote its parameters" % rank):
        results[rank] = open(path).read().split()
digests = {r[0] for r in results.values()}
check(len(results) == 4 and len(digests) == 1, "all ranks end with identical parameters: %s" % results)
check(all(r[1] == "True" for r in results.values()), "training changed the parameters")
check(sorted(r[2] for r in results.values()) == ["0", "0", "1", "1"], "ranks spread over 2 nodes (GROUP_RANK)")
run.assert_no_leaks()
finish()
