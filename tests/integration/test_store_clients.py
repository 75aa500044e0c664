"""The job store on node 0's agent, used by real workers under the launcher: the C++ client (dtrain-store-worker)
and the Python client (store_worker.py) each run 2 nodes x 3 workers exchanging keys; a wrong token is refused, and
one too long to send is refused by the client, naming its size and the limit."""

import os

from harness import BUILD_DIR, PYTHON, SOURCE_DIR, Run, check, finish

STORE_PY = os.path.join(SOURCE_DIR, "worker", "python")
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

# A token too long for gRPC metadata (which gRPC refuses as RESOURCE_EXHAUSTED, read as a full store) is refused by
# the client with what is wrong; one at the limit still reaches the store, which refuses it as a wrong token.
LONG_TOKEN = r"""
import dtrain_store
for size in (dtrain_store.MAX_TOKEN_BYTES, 100 * 1024):
    try:
        dtrain_store.StoreClient(token="a" * size).set("k", b"v")
        print(size, "accepted")
    except dtrain_store.StoreError as e:
        print(size, e.kind, e)
"""
run = Run(["run", "-n", "1", "--name", "store-long-token", "--", PYTHON, "-c", LONG_TOKEN],
          env={"PYTHONPATH": PYTHONPATH})
run.run()
run.show()
check("4096 unauthenticated" in run.out and "matches no open round" in run.out,
      "a token at the limit reaches the store and is refused as a wrong token")
check("102400 unauthenticated store client: the token is 102400 bytes, more than the 4096 a token may have" in run.out
      and "DTRAIN_JOB_TOKEN" in run.out, "a 100 KB token is refused by the client, naming its size and the limit")
run.assert_no_leaks()
finish()
