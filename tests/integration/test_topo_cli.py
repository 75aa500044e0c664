"""`dtrain topo` and `dtrain doctor` from the command line on this machine: the live topology (here without a GPU:
it says so and still lists CPUs, NUMA nodes and interfaces), JSON that parses, --import of real nvidia-smi outputs
rendering their matrix back exactly, a bad import named by file:line, and doctor's exit code matching its checks."""

import json
import os
import shutil
import tempfile

from harness import SOURCE_DIR, Run, check, finish, write

FIXTURES = os.path.join(SOURCE_DIR, "tests", "fixtures", "topology")

r = Run(["topo"]).run()
check(r.code == 0, "dtrain topo -> exit 0, got %s: %s" % (r.code, r.err))
check("NUMA nodes:" in r.out and "node 0: CPUs" in r.out, "topo lists NUMA nodes and their CPUs")
check("Network interfaces:" in r.out and "lo" in r.out, "topo lists network interfaces")
check("RDMA NICs:" in r.out, "topo has an RDMA NIC section")
gpu_here = os.path.exists("/proc/driver/nvidia/gpus") and os.listdir("/proc/driver/nvidia/gpus")
if not gpu_here:
    check(r.out.startswith("No GPU information:") or r.out.startswith("NVML reports no GPU"),
          "without a GPU topo says so first: " + r.out[:120])

r = Run(["topo", "--json"]).run()
check(r.code == 0, "dtrain topo --json -> exit 0")
try:
    data = json.loads(r.out)
    check(sorted(data) == ["gpus", "local_ranks", "matrix", "nics", "warnings"], "topo JSON fields: %s" % sorted(data))
    if not gpu_here:
        check(data["gpus"] == [] and data["local_ranks"] == [], "no GPU: empty gpus and local_ranks")
        check(any("GPU" in w for w in data["warnings"]), "no GPU: a warning says so")
except ValueError as e:
    check(False, "topo --json output is not JSON: %s\n%s" % (e, r.out[:400]))

with open(os.path.join(FIXTURES, "pcie_2x5090_tabs.txt")) as f:
    tabs = f.read()
r = Run(["topo", "--import", os.path.join(FIXTURES, "pcie_2x5090_tabs.txt")]).run()
check(r.code == 0, "topo --import (tabs) -> exit 0: " + r.err)
check(r.out.startswith(tabs), "re-rendered 2-GPU matrix and legend equal the fixture byte for byte")
check("every local rank: (none" in r.out, "2-GPU box: no NCCL variable to set")

hgx = os.path.join(FIXTURES, "hgx_h100_8gpu_8nic.txt")
r = Run(["topo", "--import", hgx, "--json"]).run()
check(r.code == 0, "topo --import (spaces) --json -> exit 0: " + r.err)
data = json.loads(r.out)
with open(hgx) as f:
    lines = [l.split() for l in f.read().split("\n\n")[0].splitlines()]
labels = lines[0][: lines[0].index("CPU")]
for row in lines[1:]:
    for col, cell in zip(labels, row[1: 1 + len(labels)]):
        if col != row[0]:
            check(data["matrix"][row[0]][col] == cell, "imported cell %s/%s = %s" % (row[0], col, cell))
check([g["nics"] for g in data["gpus"]] == [[{"name": "mlx5_%d" % i, "path": "PIX"}] for i in range(8)],
      "each GPU's nearest NIC is its own mlx5 at PIX")
check(data["local_ranks"][3]["env"] == {"NCCL_IB_HCA": "=" + ",".join("mlx5_%d" % i for i in range(8)),
                                        "NCCL_CROSS_NIC": "0"}, "rail env: %s" % data["local_ranks"][3]["env"])
check(data["gpus"][0]["pci"] is None and data["nics"][0]["ports"] is None, "import leaves unknowable fields null")

bad = write(os.path.join(r.dir, "bad.txt"), "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tPHB\t0-7\nGPU1\tPHB\n")
r = Run(["topo", "--import", bad]).run()
check(r.code == 2, "bad import -> exit 2, got %s" % r.code)
check(bad + ":3:" in r.err, "bad import names file:line: " + r.err)
r = Run(["topo", "--import", "/nonexistent/topo.txt"]).run()
check(r.code == 2 and "cannot read" in r.err, "missing import file -> exit 2 with the reason")

# doctor caches the node's GEMM rate under $XDG_STATE_HOME/dtrain: a directory of this test's, not the user's.
state = {"XDG_STATE_HOME": tempfile.mkdtemp(prefix="dtrain-it-state-")}
r = Run(["doctor", "--json", "--log-dir", "/tmp"], env=state).run()
try:
    data = json.loads(r.out)
    statuses = [c["status"] for c in data["checks"]]
    check(set(statuses) <= {"pass", "warn", "fail", "skip"}, "doctor statuses: %s" % set(statuses))
    check(all(sorted(c) == ["fix", "id", "message", "status"] for c in data["checks"]), "doctor check fields")
    check(r.code == (1 if "fail" in statuses else 0), "doctor exit %s consistent with %s" % (r.code, statuses))
    ids = [c["id"] for c in data["checks"]]
    for want in ("gpu.visible", "nccl.library", "ib.ports", "limits.memlock", "shm.size", "cpu.gemm", "disk.logs"):
        check(want in ids, "doctor runs " + want)
    if not gpu_here:
        check(data["checks"][0]["status"] == "skip", "no GPU: gpu.visible skips")
except ValueError as e:
    check(False, "doctor --json output is not JSON: %s\n%s" % (e, r.out[:400]))

r = Run(["doctor"], env=state).run()
check(r.code in (0, 1) and "CHECK" in r.out and "pass," in r.out, "doctor table: " + r.out[-300:])
shutil.rmtree(state["XDG_STATE_HOME"], ignore_errors=True)
finish()
