"""8 workers on one node succeed; each sees the torchrun-compatible environment; logs land per rank."""

import glob
import os

from harness import Run, check, finish, write

WORKER = r"""
import os, sys
rank = os.environ["RANK"]
with open(os.path.join(sys.argv[1], "env_" + rank), "w") as f:
    for k, v in sorted(os.environ.items()):
        f.write(k + "=" + v + "\n")
    with open("/proc/self/status") as s:
        f.write("CPUS_ALLOWED=" + [l.split()[1] for l in s if l.startswith("Cpus_allowed_list")][0] + "\n")
    f.write("PGID_IS_PID=" + str(os.getpgid(0) == os.getpid()) + "\n")
print("hello from rank", rank)
print("rank", rank, "to stderr", file=sys.stderr)
"""

run = Run([])
out_dir = os.path.join(run.dir, "envs")
os.makedirs(out_dir)
script = write(os.path.join(run.dir, "worker.py"), WORKER)
run.args += ["run", "-n", "8", "--name", "envcheck", "--", "/usr/bin/python3", script, out_dir]
run.run()
run.show()
check(run.code == 0, "8 successful workers -> exit 0, got %s" % run.code)

required = ["RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE", "ROLE_RANK",
            "ROLE_NAME", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT",
            "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_ERROR_FILE",
            "TORCH_NCCL_ASYNC_ERROR_HANDLING", "OMP_NUM_THREADS", "DTRAIN_JOB_ID", "DTRAIN_NODE_RANK",
            "DTRAIN_STORE_ADDR", "DTRAIN_JOB_TOKEN", "DTRAIN_AGENT_ADDR"]
ports = set()
for rank in range(8):
    path = os.path.join(out_dir, "env_%d" % rank)
    if not check(os.path.exists(path), "rank %d wrote its environment" % rank):
        continue
    env = dict(line.rstrip("\n").split("=", 1) for line in open(path) if "=" in line)
    for key in required:
        check(key in env, "rank %d has %s" % (rank, key))
    check(env.get("RANK") == str(rank), "RANK of rank %d" % rank)
    check(env.get("LOCAL_RANK") == str(rank), "LOCAL_RANK of rank %d" % rank)
    check(env.get("WORLD_SIZE") == "8" and env.get("LOCAL_WORLD_SIZE") == "8", "world sizes of rank %d" % rank)
    check(env.get("GROUP_RANK") == "0" and env.get("GROUP_WORLD_SIZE") == "1", "group of rank %d" % rank)
    check(env.get("MASTER_ADDR") == "127.0.0.1", "MASTER_ADDR of rank %d: %s" % (rank, env.get("MASTER_ADDR")))
    check(env.get("TORCHELASTIC_RESTART_COUNT") == "0", "restart count 0")
    check(env.get("OMP_NUM_THREADS") == "1", "8 workers on %d cpus -> OMP_NUM_THREADS=1, got %s" %
          (os.cpu_count(), env.get("OMP_NUM_THREADS")))
    check(env.get("PGID_IS_PID") == "True", "rank %d leads its own process group" % rank)
    check(len(env.get("CPUS_ALLOWED", "").split(",")) == 1 and "-" not in env.get("CPUS_ALLOWED", "-"),
          "rank %d bound to one cpu, got %s" % (rank, env.get("CPUS_ALLOWED")))
    check(env.get("DTRAIN_TEST_TAG") == run.tag, "the launcher's own environment is inherited")
    ports.add(env.get("MASTER_PORT"))
check(len(ports) == 1 and list(ports)[0].isdigit() and int(list(ports)[0]) > 0, "one MASTER_PORT for all: %s" % ports)

# Console: rank 0 only by default, stdout lines on stdout with a [rank] prefix, stderr on stderr.
check("[0] hello from rank 0" in run.out, "rank 0's stdout on the console")
check("[0] rank 0 to stderr" in run.err, "rank 0's stderr on the console's stderr")
check("[3] hello from rank 3" not in run.out, "rank 3 not on the console with logs.console rank0")

# Per-rank log files: <logs.dir>/<job>-<timestamp>/attempt_0/rank_<r>.log
jobs = glob.glob(os.path.join(run.dir, "runs", "envcheck-*"))
check(len(jobs) == 1, "one job directory under runs/: %s" % jobs)
for rank in range(8):
    log = os.path.join(jobs[0], "attempt_0", "rank_%d.log" % rank) if jobs else ""
    text = open(log).read() if os.path.exists(log) else ""
    check("hello from rank %d" % rank in text and "rank %d to stderr" % rank in text, "rank %d's log file: %r" % (rank, text))

run.assert_no_leaks()
finish()
