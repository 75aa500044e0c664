"""The job store on node 0's agent, used by real workers under the launcher: the C++ client (dtrain-store-worker)
and the Python client (store_worker.py) each run 2 nodes x 3 workers exchanging keys; a wrong token is refused."""

import os

from harness import BUILD_DIR, PYTHON, SOURCE_DIR, Run, check, finish

STORE_PY = os.path.join(SOURCE_DIR, "agent", "store", "python")
PYTHONPATH = os.path.join(BUILD_DIR, "python") + ":" + STORE_PY

for name, program in (("cpp", [os.path.join(BUILD_DIR, "bin", "dtrain-store-worker")]),
                      ("python", [PYTHON, os.path.join(SOURCE_DIR, "tests", "tools", "store_worker.py")])):
    run = Run(["run", "-n", "3", "--nodes", "2", "--console", "all", "--name", "store-" + name, "--"] + program,
              env={"PYTHONPATH": PYTHONPATH}, timeout=120)
    run.run()
    run.show()
    check(run.code == 0, "%s store workers exit 0, got %s" % (name, run.code))
    for rank in range(6):
        check("[%d] store-worker rank %d ok" % (rank, rank) in run.out, "%s rank %d reports ok" % (name, rank))
    run.assert_no_leaks()

# A worker that presents another token is refused, and says so.
PROBE = r"""
import os, sys
import dtrain_store
try:
    dtrain_store.StoreClient(token="not-the-token").set("k", b"v")
except dtrain_store.StoreError as e:
    print("refused:", e)
    sys.exit(0)
print("accepted a wrong token")
sys.exit(1)
"""
run = Run(["run", "-n", "1", "--name", "store-token", "--", PYTHON, "-c", PROBE], env={"PYTHONPATH": PYTHONPATH})
run.run()
run.show()
check(run.code == 0 and "refused:" in run.out, "a wrong token is refused by the store")
run.assert_no_leaks()
finish()
