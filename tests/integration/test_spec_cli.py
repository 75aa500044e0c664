"""`dtrain validate`, `launch --dry-run` and `--set` from the command line: exit 2 with file:line:col on bad specs,
the full plan on a good one, and nothing started by a dry run; for dtrain-trainer with --tp / --pp, the dry run's
tensor/data/pipeline layout of its ranks, or the trainer's refusal (exit 2)."""

import os

from harness import Run, check, finish, tagged_pids, write

GOOD = """
name: tiny-gpt
nodes: {provider: local, count: 2}
workers_per_node: 2
command: [/bin/true]
env: {FOO: bar}
"""

BAD = """name: tiny-gpt
nodes:
  provider: local
  cuont: 2
workers_per_node: two
command: [/bin/true]
"""

run = Run([])
good = write(os.path.join(run.dir, "good.yaml"), GOOD)
bad = write(os.path.join(run.dir, "bad.yaml"), BAD)

r = Run(["validate", good], cwd=run.dir).run()
check(r.code == 0, "validate good spec -> 0, got %s: %s" % (r.code, r.err))

r = Run(["validate", bad], cwd=run.dir).run()
r.show()
check(r.code == 2, "validate bad spec -> exit 2, got %s" % r.code)
check("bad.yaml:4:3" in r.err and "nodes.cuont" in r.err, "unknown key named with file:line:col")
check("count" in r.err.split("nodes.cuont", 1)[-1], "did-you-mean suggests count")
check("bad.yaml:5:19" in r.err and "workers_per_node" in r.err, "bad workers_per_node named with its position")

r = Run(["validate", good, "--set", "nodes.cout=3"], cwd=run.dir).run()
r.show()
check(r.code == 2 and "nodes.cout" in r.err and "count" in r.err, "bad --set path refused with a suggestion")

r = Run(["launch", good, "--dry-run", "--set", "workers_per_node=3"], cwd=run.dir).run()
r.show()
check(r.code == 0, "dry run -> 0, got %s" % r.code)
for rank in range(6):
    check(("RANK=%d" % rank) in r.out, "dry run shows rank %d's environment" % rank)
check("FOO=bar" in r.out and "WORLD_SIZE=6" in r.out, "dry run shows user env and WORLD_SIZE from --set")
check(not os.path.exists(os.path.join(run.dir, "runs")), "dry run creates no log directory")
check(not tagged_pids(r.tag), "dry run leaves nothing running")

# dtrain-trainer with --tp / --pp: the dry run adds its tensor/data/pipeline layout (2 nodes x 4 ranks), or exits 2
# with the trainer's own refusal; another program gets no layout.
TRAINER = GOOD.replace("command: [/bin/true]", "command: [%s]").replace("workers_per_node: 2", "workers_per_node: 4")
for argv, want, tp in ((["dtrain-trainer", "--model", "tiny", "--tp", "2", "--pp=2"], 0, 2),
                       (["env", "OMP_NUM_THREADS=1", "/opt/bin/dtrain-trainer", "--tp=4", "--pp", "2"], 0, 4),
                       (["dtrain-trainer", "--tp", "3"], 2, 3),
                       (["dtrain-trainer", "--tp", "8"], 2, 8),
                       (["/bin/true", "--tp", "2"], 0, None)):
    spec = write(os.path.join(run.dir, "trainer.yaml"), TRAINER % ", ".join('"%s"' % a for a in argv))
    r = Run(["launch", spec, "--dry-run"], cwd=run.dir).run()
    check(r.code == want, "dry run of %s -> %d, got %s: %s" % (" ".join(argv), want, r.code, r.err.strip()[-300:]))
    grid = r.out.split("dtrain-trainer's tensor, data and pipeline layout", 1)[-1] if "layout (--tp" in r.out else ""
    if tp is None:
        check(not grid, "no layout for a program that is not dtrain-trainer")
    elif want == 0:
        rows = [line for line in grid.splitlines() if line.startswith("rank ")]
        group = "tp group %s " % ",".join(str(r) for r in range(tp))
        check(len(rows) == 8 and group in grid, "the layout of 8 ranks, TP groups of %d consecutive ranks: %s"
              % (tp, grid[:300]))
    else:
        check("dtrain-trainer would refuse this layout" in r.err and "--tp" in r.err,
              "the trainer's refusal, naming --tp: %s" % r.err.strip()[-300:])
check("node 1" in Run(["launch", write(os.path.join(run.dir, "t2.yaml"), TRAINER % '"dtrain-trainer", "--pp", "2"'),
                       "--dry-run"], cwd=run.dir).run().out.split("pipeline layout", 1)[-1],
      "pipeline stages on the second node")

r = Run(["run", "-n", "0", "--", "/bin/true"], cwd=run.dir).run()
check(r.code == 2, "dtrain run -n 0 -> exit 2, got %s" % r.code)
r = Run(["launch", os.path.join(run.dir, "missing.yaml")], cwd=run.dir).run()
check(r.code == 2 and "missing.yaml" in r.err, "missing spec file -> exit 2 naming it: %s" % r.err)
# Sizes, durations and bytes that used to crash, wrap or be cut short are refused up front, naming the key.
too_big = {
    "nodes.count": ["nodes.count=65536", "workers_per_node=65536"],
    "workers_per_node": ["workers_per_node=2147483647"],
    "nodes.count ": ["nodes.count=100000"],
    "stop.grace_s": ["stop.grace_s=1e300"],
    "stop.grace_s ": ["stop.grace_s=4294967.3"],
    "health.node_timeout_s": ["health.node_timeout_s=1e20"],
    "command[1]": ['command=[/bin/echo, "a\\0b"]'],
    "env.FOO": ['env.FOO="x\\0y"'],
}
for key, sets in too_big.items():
    args = [a for s in sets for a in ("--set", s)]
    for verb in (["validate", good], ["launch", good, "--dry-run"]):
        r = Run(verb + args, cwd=run.dir, timeout=30).run()
        check(r.code == 2 and ("--set: " + key.strip() + ":") in r.err,
              "%s %s -> exit 2 naming %s, got %s: %s" % (verb[0], " ".join(sets), key.strip(), r.code, r.err))
r = Run(["run", "--grace-s", "1e300", "--", "/bin/true"], cwd=run.dir).run()
check(r.code == 2 and "stop.grace_s" in r.err, "dtrain run --grace-s 1e300 -> exit 2: %s %s" % (r.code, r.err))
r = Run(["run", "--nodes", "65536", "-n", "65536", "--", "/bin/true"], cwd=run.dir).run()
check(r.code == 2 and "nodes.count" in r.err, "dtrain run --nodes 65536 -> exit 2: %s %s" % (r.code, r.err))

# A log directory that cannot be created: exit 2 before anything starts, naming the path and why.
a_file = write(os.path.join(run.dir, "a-file"), "not a directory\n")
long_name = "x" * 300
bad_dirs = {
    a_file: "Not a directory",
    os.path.join(a_file, "sub"): "Not a directory",
    "/proc/self": "",
    os.path.join(run.dir, long_name): "File name too long",
}
if os.geteuid() != 0:  # root writes anywhere: the unwritable case only means something for other users
    locked = os.path.join(run.dir, "locked")
    os.makedirs(locked, mode=0o500)
    bad_dirs[locked] = "Permission denied"
for path, why in bad_dirs.items():
    r = Run(["launch", good, "--set", "logs.dir=" + path], cwd=run.dir, timeout=30).run()
    check(r.code == 2 and "log directory " + path in r.err and why in r.err and "logs.dir" in r.err,
          "logs.dir=%s -> exit 2 naming it and why (%s), got %s: %s" % (path, why or "any", r.code, r.err))
    check(not tagged_pids(r.tag), "nothing started for an unusable logs.dir")
r = Run(["launch", good, "--set", "name=" + long_name], cwd=run.dir, timeout=30).run()
check(r.code == 2 and "name: is 300 characters long" in r.err, "a 300-character name -> exit 2: %s" % r.err)

r = Run(["run", "-n", "2", "--", "/no/such/program"], cwd=run.dir).run()
r.show()
check(r.code == 127 and "/no/such/program" in r.err, "a program that cannot start -> 127 and its name, got %s" % r.code)
r.assert_no_leaks()
finish()
