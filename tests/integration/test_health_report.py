"""Workers report health (step, loss, throughput) to their agent at DTRAIN_AGENT_ADDR; the failure summary shows the
failing rank's last report. Reports with a wrong token, for a rank that is not on that node, or for another worker of
the same node (each worker has its own DTRAIN_REPORT_TOKEN) are refused; so are values that cannot be real (step
2^64-1, loss NaN, -inf tokens/s), which never reach the summary."""

import os

from harness import BUILD_DIR, PYTHON, Run, check, finish, write

WORKER = r"""
import os, sys, time
import grpc
from dtrain.v1 import report_pb2, report_pb2_grpc

rank = int(os.environ["RANK"])
stub = report_pb2_grpc.WorkerReportsStub(grpc.insecure_channel(os.environ["DTRAIN_AGENT_ADDR"]))
token = [("dtrain-token", os.environ["DTRAIN_JOB_TOKEN"]), ("dtrain-report-token", os.environ["DTRAIN_REPORT_TOKEN"])]
for step in range(1, 4):
    stub.Report(report_pb2.WorkerReport(rank=rank, step=step, loss=4.0 - 0.5 * step, tokens_per_s=1000.0 * step),
                metadata=token, timeout=10)
def refused(report, metadata, code=grpc.StatusCode.PERMISSION_DENIED):
    try:
        stub.Report(report, metadata=metadata, timeout=10)
        print("accepted:", report)
        return False
    except grpc.RpcError as e:
        print("refused:", e.code().name, e.details())
        return e.code() == code
forged = [("dtrain-token", "forged"), token[1]]
ok = refused(report_pb2.WorkerReport(rank=rank, step=99), forged)
ok = refused(report_pb2.WorkerReport(rank=(rank + 2) % 4, step=99), token) and ok  # runs on the other node
ok = refused(report_pb2.WorkerReport(rank=rank ^ 1, step=99), token) and ok  # this node's other worker
ok = refused(report_pb2.WorkerReport(rank=rank, step=99), token[:1]) and ok  # no report token
if not ok:
    print("a forged report was accepted")
    sys.exit(9)
invalid = grpc.StatusCode.INVALID_ARGUMENT
ok = refused(report_pb2.WorkerReport(rank=rank, step=2**64 - 1, loss=1.0), token, invalid)
ok = refused(report_pb2.WorkerReport(rank=rank, step=4, loss=float("nan")), token, invalid) and ok
ok = refused(report_pb2.WorkerReport(rank=rank, step=4, loss=1.0, tokens_per_s=float("-inf")), token, invalid) and ok
if not ok:
    print("an absurd report was accepted")
    sys.exit(10)
if rank == 1:
    time.sleep(1)
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
# Every rank that got through its checks before rank 1 failed would have exited 9 or 10 (not 4) had one been
# accepted; rank 1 itself always gets through them.
check(run.out.count("refused: PERMISSION_DENIED") >= 4, "forged reports refused (4 per rank)")
check("is not rank 1's DTRAIN_REPORT_TOKEN" in run.out, "a report as this node's other worker names the reason")
check(run.out.count("refused: INVALID_ARGUMENT") >= 3, "absurd values refused (3 per rank)")
check("step 18446744073709551615 is not a step count" in run.out and "loss is nan" in run.out and
      "tokens_per_s is -inf" in run.out, "each refusal names the value")
run.assert_no_leaks()
finish()
