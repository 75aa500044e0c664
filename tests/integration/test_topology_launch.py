"""Ranks placed by the node's topology: agents that read a saved `nvidia-smi topo -m` (`nodes.topology` for
provider local, `dtrain agent --topology` for an agent started by hand) run a real job whose workers dump their
environment and CPU affinity. Each rank's GPU, CPU list, NCCL variables and pinning are checked against what
`dtrain topo --import FILE --json` recommends for its local rank, on the shared fixtures: an 8-GPU HGX box with
8 NICs (whose CPUs 2..191 this host mostly lacks) and a 2-GPU PCIe box (gpu_isolation: true)."""

import json
import os
import select
import socket
import subprocess

from harness import DTRAIN, PYTHON, SOURCE_DIR, Run, check, finish, write

FIXTURES = os.path.join(SOURCE_DIR, "tests", "fixtures", "topology")
HGX = os.path.join(FIXTURES, "hgx_h100_8gpu_8nic.txt")
PCIE = os.path.join(FIXTURES, "pcie_2x5090_tabs.txt")
HOST_CPUS = sorted(os.sched_getaffinity(0))

WORKER = r"""
import os, sys
with open(os.path.join(sys.argv[1], "env_" + os.environ["RANK"]), "w") as f:
    for k, v in sorted(os.environ.items()):
        f.write(k + "=" + v + "\n")
    with open("/proc/self/status") as s:
        f.write("CPUS_ALLOWED=" + [l.split()[1] for l in s if l.startswith("Cpus_allowed_list")][0] + "\n")
"""


def cpu_list(text):
    out = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out += list(range(int(lo), int(hi or lo) + 1))
    return sorted(out)


def reference(fixture):
    out = subprocess.run([DTRAIN, "topo", "--import", fixture, "--json"], check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def dumped(out_dir, rank):
    path = os.path.join(out_dir, "env_%d" % rank)
    if not check(os.path.exists(path), "rank %d wrote its environment" % rank):
        return {}
    return dict(line.rstrip("\n").split("=", 1) for line in open(path) if "=" in line)


def check_ranks(name, out_dir, ref, nodes, isolation):
    """Every rank of `nodes` nodes against the reference for its local rank."""
    per_node = len(ref["local_ranks"])
    for node in range(nodes):
        pinned = {}  # cpu_affinity -> [cpu sets of the ranks near it]
        for local in range(per_node):
            rank = node * per_node + local
            env, want, gpu = dumped(out_dir, rank), ref["local_ranks"][local], ref["gpus"][local]
            what = "%s rank %d (local %d)" % (name, rank, local)
            check(env.get("LOCAL_RANK") == str(local), "%s: LOCAL_RANK %s" % (what, env.get("LOCAL_RANK")))
            check(env.get("DTRAIN_GPU") == str(want["gpu"]), "%s: DTRAIN_GPU %s, topo says GPU%d" %
                  (what, env.get("DTRAIN_GPU"), want["gpu"]))
            check(env.get("DTRAIN_GPU_BUS_ID") == gpu["pci"], "%s: DTRAIN_GPU_BUS_ID %s, topo says %s" %
                  (what, env.get("DTRAIN_GPU_BUS_ID"), gpu["pci"]))
            check(env.get("DTRAIN_CPU_AFFINITY") == gpu["cpu_affinity"], "%s: DTRAIN_CPU_AFFINITY %s, topo says %s" %
                  (what, env.get("DTRAIN_CPU_AFFINITY"), gpu["cpu_affinity"]))
            for key, value in want["env"].items():
                check(env.get(key) == value, "%s: %s=%s, topo recommends %s" % (what, key, env.get(key), value))
            expected_cvd = str(want["gpu"]) if isolation else None
            check(env.get("CUDA_VISIBLE_DEVICES") == expected_cvd, "%s: CUDA_VISIBLE_DEVICES %s, want %s" %
                  (what, env.get("CUDA_VISIBLE_DEVICES"), expected_cvd))
            allowed = cpu_list(env.get("CPUS_ALLOWED", "0"))
            near = cpu_list(gpu["cpu_affinity"])
            here = [c for c in near if c in HOST_CPUS]
            if set(near) <= set(HOST_CPUS):
                check(allowed == cpu_list(want["cpus"]), "%s: pinned to %s, topo recommends %s" %
                      (what, allowed, want["cpus"]))
            elif not here:
                check(allowed == HOST_CPUS, "%s: none of its GPU's CPUs exist here, so not pinned; got %s" %
                      (what, allowed))
            else:
                check(allowed and set(allowed) <= set(here), "%s: pinned to %s, within its GPU's CPUs here %s" %
                      (what, allowed, here))
                pinned.setdefault(gpu["cpu_affinity"], []).append(allowed)
            check(env.get("OMP_NUM_THREADS") == str(len(allowed)) or not here,
                  "%s: OMP_NUM_THREADS %s for %d CPUs" % (what, env.get("OMP_NUM_THREADS"), len(allowed)))
        for affinity, sets in pinned.items():
            here = [c for c in cpu_list(affinity) if c in HOST_CPUS]
            if len(here) >= len(sets):  # enough CPUs: each rank its own
                flat = [c for s in sets for c in s]
                check(len(flat) == len(set(flat)), "%s node %d: ranks near %s share no CPU: %s" %
                      (name, node, affinity, sets))


# 1. provider local, nodes.topology: the HGX box on 2 simulated nodes, one rank per GPU.
run = Run([], timeout=120)
out_dir = os.path.join(run.dir, "envs")
os.makedirs(out_dir)
script = write(os.path.join(run.dir, "worker.py"), WORKER)
spec = write(os.path.join(run.dir, "job.yaml"),
             "name: topo-hgx\nnodes: {provider: local, count: 2, topology: %s}\nworkers_per_node: gpu\n"
             "command: [%s, %s, %s]\nlogs: {console: none}\n" % (HGX, PYTHON, script, out_dir))
run.args += ["launch", spec]
run.run()
run.show()
check(run.code == 0, "the HGX job succeeds, got exit %s" % run.code)
hgx = reference(HGX)
check_ranks("hgx", out_dir, hgx, 2, isolation=False)
unpinned = [l for l in run.err.splitlines() if "not pinned" in l]
if not any(set(cpu_list(g["cpu_affinity"])) & set(HOST_CPUS) for g in hgx["gpus"][4:]):
    check(len(unpinned) == 2 and "node 0" in unpinned[0] and "node 1" in unpinned[1],
          "ranks without CPUs here are named once per node: %s" % unpinned)
run.assert_no_leaks()

# 2. The dry run shows each rank's GPU, NICs, CPUs and NCCL variables from the same topology.
dry = Run(["launch", spec, "--dry-run"], cwd=run.dir)
dry.run()
check(dry.code == 0, "dry run exits 0, got %s: %s" % (dry.code, dry.err))
blocks = dry.out.split("\nrank ")[1:]
check(len(blocks) == 16, "16 ranks in the dry run, got %d" % len(blocks))
for block in blocks[:8]:
    local = int(block.split("local rank ")[1].split("\n")[0])
    want = hgx["local_ranks"][local]
    check("  gpu:         %d\n" % want["gpu"] in block, "dry run: local rank %d on GPU%d:\n%s" % (local, want["gpu"], block))
    check("  nics:        " + want["nic"] in block, "dry run: local rank %d leaves by %s" % (local, want["nic"]))
    check("    NCCL_IB_HCA=" + want["env"]["NCCL_IB_HCA"] in block, "dry run: local rank %d NCCL_IB_HCA" % local)
    check("  cpus:        " in block, "dry run: local rank %d CPUs" % local)


# 3. An agent started by hand with --topology (provider static), gpu_isolation: true, the 2-GPU PCIe box.
def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


run2 = Run([], timeout=90)
secret = os.path.join(run2.dir, "secret")
subprocess.run([DTRAIN, "secret", "init", "--dir", secret], check=True, stdout=subprocess.DEVNULL)
port = free_port()
agent = subprocess.Popen([DTRAIN, "agent", "--listen", "127.0.0.1:%d" % port, "--secret-dir", secret, "--one-shot",
                          "--topology", PCIE, "--run-dir", os.path.join(run2.dir, "agent-runs")],
                         env=run2.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
ready, _, _ = select.select([agent.stdout], [], [], 20)
line = agent.stdout.readline().decode() if ready else ""
check(line.startswith("dtrain-agent listening on"), "the agent with --topology listens (got %r)" % line)
out2 = os.path.join(run2.dir, "envs")
os.makedirs(out2)
script2 = write(os.path.join(run2.dir, "worker.py"), WORKER)
spec2 = write(os.path.join(run2.dir, "job.yaml"),
              "name: topo-pcie\nnodes: {provider: static, agents: ['127.0.0.1:%d']}\nworkers_per_node: gpu\n"
              "gpu_isolation: true\ncommand: [%s, %s, %s]\n" % (port, PYTHON, script2, out2))
run2.args += ["launch", spec2, "--secret-dir", secret]
run2.run()
run2.show()
check(run2.code == 0, "the PCIe job succeeds, got exit %s" % run2.code)
check_ranks("pcie", out2, reference(PCIE), 1, isolation=True)
try:
    agent.wait(timeout=20)
except subprocess.TimeoutExpired:
    agent.kill()
    check(False, "the --one-shot agent exits after the job")
run2.assert_no_leaks()

# 4. A topology file that cannot be read stops the agent at once, naming it.
bad = subprocess.run([DTRAIN, "agent", "--listen", "127.0.0.1:0", "--topology", "/nonexistent/topo.txt"],
                     capture_output=True, text=True, timeout=20)
check(bad.returncode == 2 and "cannot read /nonexistent/topo.txt" in bad.stderr,
      "agent --topology with a missing file: exit 2 naming it, got %d %r" % (bad.returncode, bad.stderr))
finish()
