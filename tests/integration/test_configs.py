"""Every example under configs/ works as it is. The examples are found by glob (configs/*.yaml), so a new one is
checked without touching this file, and each case copies configs/ and README.md unchanged into a fresh directory, as
a newcomer has them at the repository root:
  listed     the glob finds at least the examples the README lists, and each starts with a comment (when to use it);
  scripts    every configs/ path a command names exists;
  validate   `dtrain validate` accepts every example (exit 0, "valid");
  dry-run    `dtrain launch --dry-run` plans every example: the rank count its nodes and workers give, and for ssh and
             slurm the agent commands it would run (ssh per host, one srun). Where this machine has no GPU,
             `workers_per_node: gpu` is dry-run as 2 workers (the dry run places ranks by this machine's GPUs); the
             Slurm template is dry-run as inside a 2-node allocation (SLURM_JOB_NUM_NODES=2: with no nodes.count the
             dry run takes the allocation's count, as a launch does);
  run        every example with `provider: local` is launched for real (2 ranks, or the quickstart's 2 x 2), after the
             setup lines its header gives (`dtrain-trainer prepare-text ...`) run as written, with dtrain-trainer on
             PATH: it exits 0 and leaves no process behind; a dtrain-trainer job's --metrics file ends at its --steps
             (and at ZeRO-3 shows a rank holding a shard of the parameters) and its --checkpoint-dir holds the last
             step's model; the DataLoader script's rank 0 prints its last epoch.
"""

import glob
import json
import os
import re
import shutil
import subprocess
import tempfile

import yaml

from harness import BUILD_DIR, DTRAIN, SOURCE_DIR, Run, check, finish

CONFIGS = os.path.join(SOURCE_DIR, "configs")
BIN = os.path.join(BUILD_DIR, "bin")
# The examples the README lists; more may come, and each is checked.
LISTED = ["quickstart.yaml", "trainer_ddp_text.yaml", "trainer_zero3_bf16.yaml", "torch_dataloader.yaml",
          "multinode_static.yaml", "multinode_join.yaml", "multinode_ssh.yaml", "multinode_slurm.yaml"]


def env_with_bin():
    env = dict(os.environ)
    env["PATH"] = BIN + os.pathsep + env.get("PATH", "")
    return env


def checkout():
    """A fresh directory holding configs/ and README.md as the repository has them."""
    root = tempfile.mkdtemp(prefix="dtrain-configs-")
    shutil.copytree(CONFIGS, os.path.join(root, "configs"))
    shutil.copy(os.path.join(SOURCE_DIR, "README.md"), root)
    return root


def has_gpu():
    return any(os.path.exists("/dev/nvidia%d" % i) for i in range(8))


def argv_value(argv, flag):
    return argv[argv.index(flag) + 1] if flag in argv and argv.index(flag) + 1 < len(argv) else None


paths = sorted(glob.glob(os.path.join(CONFIGS, "*.yaml")))
names = [os.path.basename(p) for p in paths]
check(all(name in names for name in LISTED), "configs/ holds every listed example: %s" % names)

examples = {}
for path in paths:
    name = os.path.basename(path)
    with open(path) as f:
        text = f.read()
    check(text.startswith("# "), "%s starts with a comment saying when to use it" % name)
    try:
        spec = yaml.safe_load(text)
    except yaml.YAMLError as e:
        check(False, "%s is YAML: %s" % (name, e))
        continue
    examples[name] = (text, spec)
    command = spec.get("command", []) if isinstance(spec, dict) else []
    for word in command if isinstance(command, list) else []:
        if isinstance(word, str) and word.startswith("configs/"):
            check(os.path.exists(os.path.join(SOURCE_DIR, word)), "%s: its command's %s exists" % (name, word))

# --- validate and dry-run, every example ---
root = checkout()
for name, (text, spec) in examples.items():
    rel = os.path.join("configs", name)
    done = subprocess.run([DTRAIN, "validate", rel], cwd=root, capture_output=True, text=True, timeout=30)
    check(done.returncode == 0 and "valid" in done.stdout,
          "dtrain validate %s: exit %d %s%s" % (rel, done.returncode, done.stdout, done.stderr))

    nodes = spec.get("nodes", {})
    provider = nodes.get("provider", "local")
    args, env = [], env_with_bin()
    workers = spec.get("workers_per_node", 1)
    if workers == "gpu" and not has_gpu():
        args += ["--set", "workers_per_node=2"]
        workers = 2
    if provider == "slurm":
        env["SLURM_JOB_NUM_NODES"] = "2"
    count = {"static": len(nodes.get("agents", [])), "ssh": len(nodes.get("hosts", [])), "slurm": 2}.get(
        provider, str(nodes.get("count", 1)).split(":")[-1])
    dry = subprocess.run([DTRAIN, "launch", "--dry-run", rel] + args, cwd=root, env=env, capture_output=True,
                         text=True, timeout=60)
    ok = dry.returncode == 0
    check(ok, "dtrain launch --dry-run %s: exit %d %s" % (rel, dry.returncode, dry.stderr))
    if ok and isinstance(workers, int):
        ranks = int(count) * workers
        check(re.search(r"^job %s: .* = %d ranks" % (re.escape(spec["name"]), ranks), dry.stdout, re.M),
              "the dry run of %s plans %d ranks: %s" % (rel, ranks, dry.stdout.splitlines()[:1]))
    if ok and provider == "ssh":
        for host in nodes["hosts"]:
            check(re.search(r"^  ssh .* -- %s exec .*'agent' '--join'" % re.escape(host), dry.stdout, re.M),
                  "the dry run of %s prints the ssh command for %s" % (rel, host))
    if ok and provider == "slurm":
        check(re.search(r"^  srun .*--nodes 2 .*agent --join", dry.stdout, re.M),
              "the dry run of %s prints the srun command" % rel)
shutil.rmtree(root, ignore_errors=True)

# --- run the local ones ---
for name, (text, spec) in examples.items():
    if spec.get("nodes", {}).get("provider", "local") != "local":
        continue
    run = Run([], cwd=checkout(), env={"PATH": env_with_bin()["PATH"]}, timeout=120)
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        setup = line.lstrip("#").strip()
        if "dtrain-trainer prepare-text" in setup:
            done = subprocess.run(["/bin/sh", "-c", setup], cwd=run.dir, env=run.env, capture_output=True, text=True,
                                  timeout=60)
            check(done.returncode == 0, "%s's setup `%s`: exit %d %s" % (name, setup, done.returncode, done.stderr))
    run.args += ["launch", os.path.join("configs", name)]
    run.run()
    check(run.code == 0, "dtrain launch configs/%s exits 0, got %s" % (name, run.code)) or run.show()
    run.assert_no_leaks()
    command = spec["command"]
    if command[0] == "dtrain-trainer" and argv_value(command, "--metrics"):
        metrics = os.path.join(run.dir, argv_value(command, "--metrics"))
        lines = []
        if check(os.path.exists(metrics), "%s wrote its --metrics file" % name):
            with open(metrics) as f:
                lines = [json.loads(line) for line in f if line.strip()]
        last = lines[-1] if lines else {}
        check(last.get("step") == int(argv_value(command, "--steps")),
              "%s trained to step %s: %s" % (name, argv_value(command, "--steps"), last))
        if argv_value(command, "--checkpoint-dir"):
            saved = os.path.join(run.dir, argv_value(command, "--checkpoint-dir"), "model_%s.bin" % last.get("step"))
            check(os.path.exists(saved), "%s saved its last checkpoint: %s" % (name, saved))
        if argv_value(command, "--zero") == "3" and argv_value(command, "--model") == "tiny":
            # tiny's 120,576 parameters over 2 ranks at 2 bytes (bf16; ZeRO-3 keeps no widened fp32 copy): 120,576.
            check(last.get("mem_params_bytes") == 120576,
                  "%s: a rank holds a shard of the parameters: %s" % (name, last.get("mem_params_bytes")))
    if "configs/torch_dataloader.py" in command:
        epochs = int(argv_value(command, "--epochs") or 3)
        check(re.search(r"epoch %d mean loss \d" % (epochs - 1), run.out),
              "%s: rank 0 prints its last epoch: %s" % (name, run.out[-500:]))
    shutil.rmtree(run.dir, ignore_errors=True)

finish()
