"""A tune overlay (`--tune tune.yaml`, cli/tune/overlay.h) applied to an unmodified PyTorch script (real launcher,
real agents, Debian's torch 1.13 over gloo, 2 ranks):
  applied   `dtrain run --standalone --nproc_per_node=2 --tune tune.yaml worker.py`: the script builds a DataLoader
            with num_workers=0 and DDP with bucket_cap_mb=1; each rank prints what torch holds, and every value is
            the overlay's (num_workers, pin_memory, prefetch_factor, persistent_workers, bucket_bytes_cap,
            gradient_as_bucket_view, torch.get_num_threads(), NCCL_ALGO); a DataLoader built with a batch_sampler and
            one over an IterableDataset (which keeps num_workers=0) still load their batches; rank 0 says once what
            the overlay changed; the job trains a step and exits 0;
  own       the same without --tune: the script's own values;
  launch    `dtrain launch --tune tune.yaml job.yaml --dry-run`: every rank's environment holds DTRAIN_TUNE and the
            env knob;
  refused   exit 2 with a message naming the file, the key and what is accepted, nothing left running: an unknown
            key, a value of the wrong type, an env name off the allow-list, a numerics knob without and with
            allow_numerics, the Python knobs with --instrument off or for a program that is not Python; an overlay of
            env knobs alone is accepted with --instrument off."""

import os
import re

from harness import PYTHON, Run, check, finish, write

WORKER = r"""
import os
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

class Stream(torch.utils.data.IterableDataset):
    def __iter__(self):
        return iter(torch.arange(8.0).view(4, 2))

dist.init_process_group("gloo")
rank = dist.get_rank()
data = torch.utils.data.TensorDataset(torch.randn(16, 4), torch.randn(16, 1))
loader = torch.utils.data.DataLoader(data, batch_size=4, num_workers=0)
sampled = torch.utils.data.DataLoader(data, batch_sampler=torch.utils.data.BatchSampler(
    torch.utils.data.SequentialSampler(data), batch_size=8, drop_last=False))
stream = torch.utils.data.DataLoader(Stream(), batch_size=None, num_workers=0)
model = DDP(torch.nn.Linear(4, 1), bucket_cap_mb=1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    opt.step()
print("rank %d: num_workers=%s pin_memory=%s prefetch_factor=%s persistent_workers=%s bucket_bytes_cap=%s "
      "gradient_as_bucket_view=%s threads=%s omp=%s nccl_algo=%s sampled=%d stream_workers=%d stream=%d"
      % (rank, loader.num_workers, loader.pin_memory, loader.prefetch_factor, loader.persistent_workers,
         model.bucket_bytes_cap, model.gradient_as_bucket_view, torch.get_num_threads(),
         os.environ.get("OMP_NUM_THREADS"), os.environ.get("NCCL_ALGO", "-"), len(list(sampled)),
         stream.num_workers, len(list(stream))), flush=True)
del model, opt
dist.destroy_process_group()
"""

TUNE = """
tune:
  dataloader: {num_workers: 2, pin_memory: true, prefetch_factor: 3, persistent_workers: true}
  ddp: {bucket_cap_mb: 5, gradient_as_bucket_view: true}
  threads: {intra_op: 3}
  env: {NCCL_ALGO: Ring}
"""

LINE = re.compile(r"rank (\d): num_workers=(\S+) pin_memory=(\S+) prefetch_factor=(\S+) persistent_workers=(\S+) "
                  r"bucket_bytes_cap=(\S+) gradient_as_bucket_view=(\S+) threads=(\S+) omp=(\S+) nccl_algo=(\S+) "
                  r"sampled=(\d+) stream_workers=(\d+) stream=(\d+)")
FIELDS = ("num_workers", "pin_memory", "prefetch_factor", "persistent_workers", "bucket_bytes_cap",
          "gradient_as_bucket_view", "threads", "omp", "nccl_algo", "sampled", "stream_workers", "stream")


def run_worker(extra):
    run = Run([], timeout=120, env={"DTRAIN_PYTHON": PYTHON})
    script = write(run.dir + "/worker.py", WORKER)
    write(run.dir + "/tune.yaml", TUNE)
    run.args += ["run", "--standalone", "--nproc_per_node=2", "--console", "all"] + extra + [script]
    run.run()
    run.show()
    ranks = {}
    for match in LINE.finditer(run.out + run.err):
        ranks[int(match.group(1))] = dict(zip(FIELDS, match.groups()[1:]))
    check(run.code == 0, "%s: the job trains and exits 0, got %s" % (extra, run.code))
    check(sorted(ranks) == [0, 1], "%s: both ranks printed their values: %s" % (extra, sorted(ranks)))
    run.assert_no_leaks()
    return run, ranks


def expect(ranks, case, **wanted):
    for rank, values in sorted(ranks.items()):
        for name, value in wanted.items():
            check(values[name] == str(value), "%s: rank %d: %s is %s, got %s" % (case, rank, name, value,
                                                                                 values[name]))


run, ranks = run_worker(["--tune", "tune.yaml"])
expect(ranks, "--tune", num_workers=2, pin_memory=True, prefetch_factor=3, persistent_workers=True,
       bucket_bytes_cap=5 * 1024 * 1024, gradient_as_bucket_view=True, threads=3, nccl_algo="Ring", sampled=2,
       stream_workers=0, stream=4)
said = run.out + run.err
check("dtrain: tune.yaml: DataLoader num_workers 0 -> 2, pin_memory False -> True, prefetch_factor 2 -> 3, "
      "persistent_workers False -> True" in said, "rank 0 says what the overlay changed in its DataLoaders")
check("dtrain: tune.yaml: DDP bucket_cap_mb 1 -> 5, gradient_as_bucket_view False -> True" in said,
      "rank 0 says what the overlay changed in DDP")
check(re.search(r"dtrain: tune.yaml: threads intra_op \d+ -> 3", said), "rank 0 says the thread count it set")
check(said.count("dtrain: tune.yaml: DataLoader") == 1, "said once, by rank 0 only, for the first DataLoader")
check("every worker gets NCCL_ALGO=Ring" in said, "the launcher names the env knobs it sets")

run, ranks = run_worker([])
for rank, values in sorted(ranks.items()):
    check(values["threads"] == values["omp"], "own: rank %d keeps dtrain's thread count (OMP_NUM_THREADS %s), got %s"
          % (rank, values["omp"], values["threads"]))
expect(ranks, "own", num_workers=0, pin_memory=False, prefetch_factor=2, persistent_workers=False,
       bucket_bytes_cap=1024 * 1024, gradient_as_bucket_view=False, nccl_algo="-", sampled=2, stream=4)
check("dtrain: tune.yaml" not in run.out + run.err, "own: nothing said about an overlay")

launch = Run([], timeout=60)
write(launch.dir + "/tune.yaml", TUNE)
write(launch.dir + "/job.yaml", "name: tuned\nnodes: {provider: local, count: 1}\nworkers_per_node: 2\n"
      "command: [%s, train.py]\n" % PYTHON)
launch.args += ["launch", "--tune", "tune.yaml", "job.yaml", "--dry-run"]
launch.run()
check(launch.code == 0, "launch --dry-run with --tune exits 0, got %s" % launch.code)
check(launch.out.count('DTRAIN_TUNE=\'{"file":"tune.yaml","dataloader":{"num_workers":2,"pin_memory":true,'
                       '"prefetch_factor":3,"persistent_workers":true},"ddp":{"bucket_cap_mb":5,'
                       '"gradient_as_bucket_view":true},"threads":{"intra_op":3}}\'') == 2,
      "launch: both ranks get DTRAIN_TUNE:\n" + launch.out)
check(launch.out.count("NCCL_ALGO=Ring") == 2, "launch: both ranks get the env knob")

REFUSALS = [
    ("unknown key", "tune:\n  dataloader: {num_worker: 2}\n", [],
     ["bad.yaml:2:16: tune.dataloader.num_worker: unknown key.", "num_workers, pin_memory"]),
    ("wrong type", "tune:\n  dataloader: {pin_memory: 3}\n", [],
     ["bad.yaml:2:28: tune.dataloader.pin_memory: invalid value '3'.", "Accepted: true or false."]),
    ("out of range", "tune:\n  ddp: {bucket_cap_mb: 0}\n", [],
     ["tune.ddp.bucket_cap_mb: invalid value '0'", "a number above 0"]),
    ("env name", "tune:\n  env: {LD_PRELOAD: /tmp/x.so}\n", [],
     ["tune.env.LD_PRELOAD: not a variable a tune overlay may set.", "NCCL_<NAME> and PYTORCH_CUDA_ALLOC_CONF"]),
    ("numerics", "tune:\n  numerics: {tf32: true}\n", [],
     ["tune.numerics.tf32: changes the numbers", "allow_numerics: true"]),
    ("numerics allowed", "tune:\n  allow_numerics: true\n  numerics: {tf32: true}\n", [],
     ["tune.numerics.tf32: no numerics knob is implemented yet."]),
    ("instrument off", "tune:\n  threads: {intra_op: 2}\n", ["--instrument", "off"],
     ["bad.yaml: its dataloader, ddp and threads knobs", "health.instrument: off"]),
    ("not Python", "tune:\n  threads: {intra_op: 2}\n", ["--no-python"],
     ["bad.yaml: its dataloader, ddp and threads knobs", "does not", "dtrain-trainer"]),
]
for case, text, extra, messages in REFUSALS:
    run = Run([], timeout=30)
    write(run.dir + "/bad.yaml", text)
    program = ["/bin/true"] if "--no-python" in extra else [write(run.dir + "/worker.py", WORKER)]
    run.args += ["run", "--standalone", "--nproc_per_node=2", "--tune", "bad.yaml"] + extra + program
    run.run()
    check(run.code == 2, "%s: exit 2, got %s (%s)" % (case, run.code, run.err.strip()))
    for message in messages:
        check(message in run.err, "%s: says %r: %r" % (case, message, run.err))
    check("Traceback" not in run.err and not os.path.isdir(os.path.join(run.dir, "runs")),
          "%s: refused before anything started" % case)
    run.assert_no_leaks()

env_only = Run([], timeout=30)
write(env_only.dir + "/env.yaml",
      "tune:\n  env: {NCCL_ALGO: Tree, PYTORCH_CUDA_ALLOC_CONF: 'expandable_segments:True'}\n")
env_only.args += ["run", "--standalone", "--nproc_per_node=2", "--instrument", "off", "--tune", "env.yaml",
                  "--dry-run", "--no-python", "/bin/true"]
env_only.run()
check(env_only.code == 0, "env knobs alone work with --instrument off and any program, got %s: %s"
      % (env_only.code, env_only.err))
check(env_only.out.count("NCCL_ALGO=Tree") == 2 and "DTRAIN_TUNE" not in env_only.out,
      "env knobs alone reach every rank, without DTRAIN_TUNE:\n" + env_only.out)
finish()
