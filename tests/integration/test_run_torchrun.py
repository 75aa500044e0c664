"""`dtrain run` with torchrun's options on one node, side by side with Debian's torchrun 1.13 (`/usr/bin/python3 -m
torch.distributed.run`, the same flags, the same environment, the same directory; torchrun also gets
--monitor_interval=0.1, so that it exits when its workers have, not up to 5 s later):
  script    `--redirects 1 --tee 1 --log_dir DIR --standalone --nproc_per_node=2 --max_restarts=1 --role default
            envdump.py OUT a --b`: each rank's argv and environment (names and values) are torchrun's, but for the
            known differences listed in KNOWN below (a new difference fails the test); both ranks' output is on the
            console (--tee 1); --log_dir holds the same files as torchrun's (<run id>_<random>/attempt_0/<local
            rank>/stdout.log, each with its rank's output);
  no-python `--standalone --nproc-per-node 2 --no-python envdump.sh OUT x`: the program runs as it is, same
            environment as torchrun's;
  module    `--standalone --nproc-per-node=2 -m pkg.mod OUT y`: python -m, same environment and sys.argv[0];
            (these two give dtrain the dashed spellings, torchrun the underscores, the only ones torch 1.13 knows, and
            both --redirects 1 --tee 1 --log-dir: torch 1.13's torchrun fails on this Python without them)
  --monitor-interval is taken and said once on stderr;
  cpu       `--nproc-per-node cpu --dry-run`: as many workers as online CPUs (os.cpu_count(), torchrun 1.13's rule);
  old form  `-n 2 --console all -- /bin/sh -c ...` still runs the command as it is;
  console   3 ranks: --local-ranks-filter 1 shows rank 1's output only, 0,2 those two, --redirects 3 nobody's,
            --redirects 3 --tee 3 everybody's;
  bad input exit 2, and stderr names the option: an unknown option, --standalone with --nnodes 2, -m with
            --no-python, --nnodes 2 without an endpoint (names --rdzv-endpoint), --node-rank 1 without --nnodes
            (test_run_nodes.py runs the multi-node jobs), an endpoint that
            does not resolve, an endpoint with a bad port, --rdzv-endpoint and --master-port on a port in use, an
            unknown --rdzv-conf key, --rdzv-backend etcd, --role other, --nproc-per-node gpu without GPUs, a per-rank
            --redirects map, --console with --tee."""

import json
import os
import re
import socket
import subprocess

from harness import PYTHON, Run, check, finish, write

ENVDUMP = """import json, os, sys
out = sys.argv[1]
print("rank %s says hello" % os.environ["RANK"], flush=True)
with open(os.path.join(out, "rank_%s.json" % os.environ["RANK"]), "w") as f:
    json.dump({"argv": sys.argv, "env": dict(os.environ)}, f)
"""

ENVDUMP_SH = """#!/bin/sh
exec %s -c 'import json, os, sys
with open(os.path.join(sys.argv[1], "rank_%%s.json" %% os.environ["RANK"]), "w") as f:
    json.dump({"argv": sys.argv, "env": dict(os.environ)}, f)' "$@"
""" % PYTHON

# Variables that differ between torchrun 1.13 and dtrain, and why. A name listed here may differ in value or be
# missing on one side; every other variable must be present on both sides with the same value.
KNOWN = {
    "MASTER_PORT": "a free port chosen per run by each",
    "MASTER_ADDR": "torchrun --standalone: localhost; dtrain: 127.0.0.1",
    "TORCHELASTIC_RUN_ID": "torchrun: a uuid (or --rdzv-id); dtrain: its job id (DTRAIN_JOB_ID, checked below)",
    "TORCHELASTIC_ERROR_FILE": "torchrun: under its log dir; dtrain: under its run directory (checked below)",
    "OMP_NUM_THREADS": "torchrun: 1; dtrain: the worker's share of the CPUs",
    "NCCL_ASYNC_ERROR_HANDLING": "torch 1.13's name, set by torchrun; dtrain sets TORCH_NCCL_ASYNC_ERROR_HANDLING",
    "TORCH_NCCL_ASYNC_ERROR_HANDLING": "dtrain's (the name newer torch reads)",
    "GLOO_SOCKET_IFNAME": "dtrain: lo on one machine",
    "NCCL_SOCKET_IFNAME": "dtrain: lo on one machine",
    "PYTHONPATH": "dtrain: the PyTorch bootstrap first (health.instrument auto)",
    "_": "the shell's last command, inherited differently",
}
KNOWN_PREFIXES = ("DTRAIN_",)  # dtrain's own variables


def known(name):
    return name in KNOWN or name.startswith(KNOWN_PREFIXES)


def read_ranks(out, n):
    ranks = {}
    for r in range(n):
        path = os.path.join(out, "rank_%d.json" % r)
        if check(os.path.exists(path), "%s missing" % path):
            with open(path) as f:
                ranks[r] = json.load(f)
    return ranks


def compare(case, theirs, ours):
    for r in sorted(theirs):
        if not check(r in ours, "%s: rank %d did not run under dtrain" % (case, r)):
            continue
        t, o = theirs[r], ours[r]
        # argv[1] is each side's own output directory.
        check(t["argv"][:1] + t["argv"][2:] == o["argv"][:1] + o["argv"][2:],
              "%s rank %d argv: torchrun %s, dtrain %s" % (case, r, t["argv"], o["argv"]))
        for name in sorted(set(t["env"]) | set(o["env"])):
            if known(name):
                continue
            check(name in o["env"], "%s rank %d: %s=%r under torchrun, not under dtrain" % (case, r, name,
                                                                                           t["env"].get(name)))
            check(name in t["env"], "%s rank %d: %s=%r under dtrain, not under torchrun" % (case, r, name,
                                                                                           o["env"].get(name)))
            if name in o["env"] and name in t["env"]:
                check(t["env"][name] == o["env"][name], "%s rank %d: %s torchrun %r, dtrain %r" % (
                    case, r, name, t["env"][name], o["env"][name]))
        oe = o["env"]
        check(oe.get("TORCHELASTIC_RUN_ID") == oe.get("DTRAIN_JOB_ID"),
              "%s rank %d: TORCHELASTIC_RUN_ID %r is not the job id %r" % (case, r, oe.get("TORCHELASTIC_RUN_ID"),
                                                                           oe.get("DTRAIN_JOB_ID")))
        check(oe.get("MASTER_PORT", "").isdigit() and t["env"].get("MASTER_PORT", "").isdigit(),
              "%s rank %d: MASTER_PORT is a port on both sides" % (case, r))
        check(oe.get("MASTER_ADDR") == "127.0.0.1" and t["env"].get("MASTER_ADDR") == "localhost",
              "%s rank %d: MASTER_ADDR dtrain %r torchrun %r" % (case, r, oe.get("MASTER_ADDR"),
                                                                 t["env"].get("MASTER_ADDR")))
        check("TORCH_NCCL_ASYNC_ERROR_HANDLING" in oe and "NCCL_ASYNC_ERROR_HANDLING" in t["env"],
              "%s rank %d: the NCCL error handling variable on both sides" % (case, r))


def underscores(flag):
    """torch 1.13's torchrun knows the underscore spellings only."""
    if not flag.startswith("--"):
        return flag
    name, eq, value = flag.partition("=")
    return "--" + name[2:].replace("-", "_") + eq + value


def run_pair(case, flags, program, dtrain_extra=()):
    """Runs torchrun (flags in underscores) and dtrain run (flags as given) with `flags` + `program` (OUT
    substituted); returns the directory and each side's (ranks, stdout, stderr)."""
    base = Run([])
    write(os.path.join(base.dir, "envdump.py"), ENVDUMP)
    sh = write(os.path.join(base.dir, "envdump.sh"), ENVDUMP_SH)
    os.chmod(sh, 0o755)
    write(os.path.join(base.dir, "pkg", "__init__.py"), "")
    write(os.path.join(base.dir, "pkg", "mod.py"), ENVDUMP)
    results = {}
    for side in ("torchrun", "dtrain"):
        out = os.path.join(base.dir, "out-" + side)
        os.makedirs(out)
        args = [a.replace("OUT", out).replace("LOGDIR", os.path.join(base.dir, "logs-" + side)) for a in flags]
        args += [a.replace("OUT", out) for a in program]
        if side == "torchrun":
            env = dict(base.env)
            # --monitor_interval: torchrun's agent looks at its workers every 5 s by default, so it would exit up
            # to 5 s after they did; the interval changes neither their argv nor their environment.
            p = subprocess.run([PYTHON, "-m", "torch.distributed.run", "--monitor_interval=0.1"] +
                               [underscores(a) for a in args[:len(flags)]] + args[len(flags):], cwd=base.dir, env=env,
                               capture_output=True, text=True, timeout=120)
            code, stdout, stderr = p.returncode, p.stdout, p.stderr
        else:
            r = Run(["run"] + list(dtrain_extra) + args, cwd=base.dir, env={"DTRAIN_PYTHON": PYTHON}).run()
            r.assert_no_leaks()
            code, stdout, stderr = r.code, r.out, r.err
        if not check(code == 0, "%s %s: exit %s\n%s\n%s" % (case, side, code, stdout[-2000:], stderr[-2000:])):
            continue
        results[side] = (read_ranks(out, 2), stdout, stderr)
    return base.dir, results


# --- script: the flags of the issue, with torchrun 1.13's log directory.
flags = ["--redirects", "1", "--tee", "1", "--log_dir", "LOGDIR", "--standalone", "--nproc_per_node=2",
         "--max_restarts=1", "--role", "default"]
cwd, res = run_pair("script", flags, ["envdump.py", "OUT", "a", "--b"])
if "torchrun" in res and "dtrain" in res:
    compare("script", res["torchrun"][0], res["dtrain"][0])
    for r in (0, 1):
        check("rank %d says hello" % r in res["dtrain"][1], "script: --tee 1 shows rank %d on dtrain's console:\n%s" % (
            r, res["dtrain"][1][-2000:]))

    def layout(side):
        top = os.path.join(cwd, "logs-" + side)
        runs = os.listdir(top) if os.path.isdir(top) else []
        if not check(len(runs) == 1, "%s: one run directory under --log_dir, got %s" % (side, runs)):
            return None, {}
        check(re.fullmatch(r".+_[a-z0-9_]{8}", runs[0]) is not None, "%s: run directory %s" % (side, runs[0]))
        files = {}
        for dirpath, _, names in os.walk(os.path.join(top, runs[0])):
            for n in names:
                path = os.path.join(dirpath, n)
                with open(path) as f:
                    files[os.path.relpath(path, os.path.join(top, runs[0]))] = f.read()
        return runs[0], files

    _, theirs = layout("torchrun")
    dtrain_run, ours = layout("dtrain")
    check(sorted(theirs) == sorted(ours), "--log_dir files: torchrun %s, dtrain %s" % (sorted(theirs), sorted(ours)))
    for r in (0, 1):
        rel = os.path.join("attempt_0", str(r), "stdout.log")
        check("rank %d says hello" % r in ours.get(rel, ""), "dtrain %s holds rank %d's output: %r" % (
            rel, r, ours.get(rel)))
    if dtrain_run:
        check(dtrain_run.startswith(res["dtrain"][0][0]["env"].get("DTRAIN_JOB_ID", "?") + "_"),
              "dtrain's --log_dir run directory %s is named by the job id" % dtrain_run)

# --- no-python: the program itself.
# torch 1.13's torchrun fails on this Python without --redirects and --tee (None where it wants a map), so every
# pair gives them.
OUTPUT = ["--redirects", "1", "--tee", "1", "--log-dir", "LOGDIR"]
_, res = run_pair("no-python", OUTPUT + ["--standalone", "--nproc-per-node", "2", "--no-python"],
                  ["./envdump.sh", "OUT", "x"])
if "torchrun" in res and "dtrain" in res:
    compare("no-python", res["torchrun"][0], res["dtrain"][0])

# --- module: python -m.
_, res = run_pair("module", OUTPUT + ["--standalone", "--nproc-per-node=2", "-m"], ["pkg.mod", "OUT", "y"])
if "torchrun" in res and "dtrain" in res:
    compare("module", res["torchrun"][0], res["dtrain"][0])
    check(res["dtrain"][0].get(0, {}).get("argv", [""])[0].endswith(os.path.join("pkg", "mod.py")),
          "module: sys.argv[0] is the module's file under dtrain: %s" % res["dtrain"][0].get(0, {}).get("argv"))

# --- cpu: torchrun 1.13's count.
r = Run(["run", "--nproc-per-node", "cpu", "--dry-run", "x.py"]).run()
check(r.code == 0 and ("x %d workers" % os.cpu_count()) in r.out, "--nproc-per-node cpu: %d workers: %s %s" % (
    os.cpu_count(), r.out[:300], r.err))
check(r.code == 0 and "argv:        python3 -u x.py" in r.out, "a script runs under python3 -u: %s" % r.out[:600])

# --- torchrun's environment defaults: PET_<OPTION> for an option not on the command line; the command line wins.
r = Run(["run", "--dry-run", "x.py"], env={"PET_NPROC_PER_NODE": "3", "PET_MODULE": "1"}).run()
check(r.code == 0 and "x 3 workers" in r.out and "argv:        python3 -u -m x.py" in r.out,
      "PET_NPROC_PER_NODE=3 PET_MODULE=1: %s %s" % (r.out[:600], r.err))
r = Run(["run", "-n", "2", "--dry-run", "x.py"], env={"PET_NPROC_PER_NODE": "3"}).run()
check(r.code == 0 and "x 2 workers" in r.out, "-n 2 beats PET_NPROC_PER_NODE=3: %s %s" % (r.out[:300], r.err))
r = Run(["run", "--dry-run", "x.py"], env={"PET_STANDALONE": "yes"}).run()
check(r.code == 2 and "PET_STANDALONE='yes'" in r.err, "PET_STANDALONE=yes refused: %s %s" % (r.code, r.err))

# --- old form: `-- CMD ARGS` runs as it is.
r = Run(["run", "-n", "2", "--console", "all", "--", "/bin/sh", "-c", "echo old-form $RANK"]).run()
r.assert_no_leaks()
check(r.code == 0 and "old-form 0" in r.out and "old-form 1" in r.out, "-- CMD form: %s %s %s" % (r.code, r.out,
                                                                                                 r.err))

# --- the console: --local-ranks-filter shows only those local ranks, --redirects 3 nobody, --tee 3 everybody.
for flags, shown in ((["--local-ranks-filter", "1"], {1}), (["--local_ranks_filter=0,2"], {0, 2}),
                     (["--redirects", "3"], set()), (["--redirects", "3", "--tee", "3"], {0, 1, 2})):
    r = Run(["run", "-n", "3"] + flags + ["--no-python", "/bin/sh", "-c", "echo console-check-$LOCAL_RANK"]).run()
    seen = {int(m) for m in re.findall(r"console-check-(\d)", r.out)}
    check(r.code == 0 and seen == shown, "%s: console shows local ranks %s, want %s: %s %s" % (
        flags, sorted(seen), sorted(shown), r.out[-800:], r.err[-800:]))

# --- bad input: exit 2 naming the option.
busy = socket.socket()
busy.bind(("127.0.0.1", 0))
busy.listen(1)
busy_port = str(busy.getsockname()[1])
BAD = [
    (["--bogus-option", "1", "x.py"], ["--bogus-option"]),
    (["--standalone", "--nnodes", "2", "x.py"], ["--standalone", "--nnodes"]),
    (["-m", "--no-python", "x"], ["-m/--module", "--no-python"]),
    (["--nnodes", "2", "x.py"], ["--nnodes 2", "--rdzv-endpoint"]),
    (["--nnodes=1:4", "x.py"], ["--nnodes 1:4", "--rdzv-endpoint"]),
    (["--node_rank", "1", "x.py"], ["--node-rank 1", "--nnodes"]),
    (["--rdzv-endpoint", "no-such-host.invalid:29400", "x.py"], ["--rdzv-endpoint", "no-such-host.invalid"]),
    (["--rdzv_endpoint=localhost:99999", "x.py"], ["--rdzv-endpoint", "99999"]),
    (["--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:" + busy_port, "x.py"], ["--rdzv-endpoint", "in use"]),
    (["--master-port", busy_port, "x.py"], ["--master-port", "in use"]),
    (["--rdzv-conf", "join_timeout=5,frobnicate=1", "x.py"], ["--rdzv-conf", "frobnicate"]),
    (["--rdzv-backend", "etcd", "x.py"], ["--rdzv-backend etcd", "c10d"]),
    (["--role", "trainer", "x.py"], ["--role trainer", "default"]),
    (["--redirects", "0:1,1:2", "x.py"], ["--redirects", "per-rank"]),
    (["--console", "all", "--tee", "3", "x.py"], ["--console", "--tee"]),
    (["--standalone"], ["no program"]),
]
if not os.path.isdir("/proc/driver/nvidia/gpus"):
    BAD.append((["--nproc-per-node", "gpu", "x.py"], ["--nproc-per-node gpu", "no GPUs"]))
for args, words in BAD:
    r = Run(["run", "--dry-run"] + args).run()
    check(r.code == 2, "%s: exit %s (want 2): %s" % (args, r.code, r.err))
    for w in words:
        check(w in r.err, "%s: stderr names %r: %s" % (args, w, r.err))
busy.close()

# --- a note, once: --monitor-interval.
r = Run(["run", "--dry-run", "--monitor_interval=5", "x.py"]).run()
check(r.code == 0 and r.err.count("does not poll") == 1, "--monitor-interval said once: %s %s" % (r.code, r.err))

finish()
