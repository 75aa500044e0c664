"""Workers report health (step, loss, throughput) to their agent at DTRAIN_AGENT_ADDR; the failure summary shows the
failing rank's last report. Reports with a wrong token, or for a rank that is not on that node, are refused."""

import os

from harness import BUILD_DIR, PYTHON, Run, check, finish, write

WORKER = r"""
import os, sys, time
import grpc
from dtrain.v1 import report_pb2, report_pb2_grpc

rank = int(os.environ["RANK"])
stub = report_pb2_grpc.WorkerReportsStub(grpc.insecure_channel(os.environ["DTRAIN_AGENT_ADDR"]))
token = [("dtrain-token", os.environ["DTRAIN_JOB_TOKEN"])]
for step in range(1, 4):
    stub.Report(report_pb2.WorkerReport(rank=rank, step=step, loss=4.0 - 0.5 * step, tokens_per_s=1000.0 * step),
                metadata=token, timeout=10)
def refused(report, metadata):
    try:
        stub.Report(report, metadata=metadata, timeout=10)
        return False
    except grpc.RpcError as e:
        print("refused:", e.code().name, e.details())
        return e.code() == grpc.StatusCode.PERMISSION_DENIED
ok = refused(report_pb2.WorkerReport(rank=rank, step=99), [("dtrain-token", "forged")])
ok = ok and refused(report_pb2.WorkerReport(rank=rank + 2, step=99), token)  # rank + 2 runs on the other node
if not ok:
    print("a forged report was accepted")
    sys.exit(9)
if rank == 1:
    time.sleep(0.3)
    sys.exit(4)
time.sleep(300)
"""

run = Run([], env={"PYTHONPATH": os.path.join(BUILD_DIR, "python")})
script = write(os.path.join(run.dir, "worker.py"), WORKER)
run.args += ["run", "-n", "2", "--nodes", "2", "--grace-s", "2", "--console", "all", "--name", "health", "--",
             PYTHON, script]
run.run()
run.show()
check(run.code == 4, "rank 1 exits 4 -> launcher exits 4, got %s" % run.code)
check("last health report of rank 1: step 3, loss 2.5, 3000 tokens/s" in run.err,
      "summary shows rank 1's last health report")
check(run.out.count("refused: PERMISSION_DENIED") >= 4, "forged reports refused on every rank")
run.assert_no_leaks()
finish()
