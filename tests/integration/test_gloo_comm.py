"""The trainer's Gloo communicator under the real launcher: dtrain run starts dtrain-comm-worker ranks, which join
through make_communicator_from_env (RANK, WORLD_SIZE, the job's store, GLOO_SOCKET_IFNAME from the launcher) and
check every collective and a DDP pass on exact integer data. Then 2 nodes x 2 workers, and a job where rank 1 is
killed: the others' allreduce fails with CommError quickly, the launcher reports the failure, nothing is left."""

import os

from harness import BUILD_DIR, Run, check, finish

WORKER = os.path.join(BUILD_DIR, "bin", "dtrain-comm-worker")
if not os.path.exists(WORKER):
    print("SKIP: %s is not built (target dtrain-comm-worker)" % WORKER)
    raise SystemExit(77)

for nodes, per_node in ((1, 2), (2, 2)):
    world = nodes * per_node
    run = Run(["run", "-n", str(per_node), "--nodes", str(nodes), "--console", "all",
               "--name", "gloo-comm-%dx%d" % (nodes, per_node), "--", WORKER, "check"],
              env={"DTRAIN_COMM_BACKEND": "gloo", "DTRAIN_COMM_TIMEOUT_MS": "30000"}, timeout=120)
    run.run()
    run.show()
    check(run.code == 0, "%d x %d: workers exit 0, got %s" % (nodes, per_node, run.code))
    for rank in range(world):
        check("comm-worker rank %d of %d (gloo) ok" % (rank, world) in run.out,
              "%d x %d: rank %d reports ok" % (nodes, per_node, rank))
    run.assert_no_leaks()

# Rank 1 kills itself after the first allreduce; ranks 0 and 2 must see a CommError from the second one well within
# the 3 s timeout (the dead peer's connections close), and exit 0 after printing it. The launcher reports rank 1.
run = Run(["run", "-n", "3", "--console", "all", "--name", "gloo-comm-die", "--", WORKER, "die", "1"],
          env={"DTRAIN_COMM_BACKEND": "gloo", "DTRAIN_COMM_TIMEOUT_MS": "3000"}, timeout=120)
run.run()
run.show()
check(run.code != 0, "a job whose rank 1 was killed fails, got exit %s" % run.code)
check("root cause: rank 1" in run.err, "the launcher names rank 1 as the root cause")
errors = [line for line in run.out.splitlines() if "comm-error after" in line]
for line in errors:
    ms = int(line.split("comm-error after ", 1)[1].split(" ", 1)[0])
    check(ms < 6000, "CommError came within twice the timeout: %s" % line)
    check("allreduce of 1048576 floats" in line, "the error names the collective and its size: %s" % line)
# The launcher stops the group on the first failure, so a survivor may be stopped before it prints; but nobody
# may report that the allreduce succeeded.
check("succeeded although" not in run.out, "no rank's allreduce succeeded without rank 1")
run.assert_no_leaks()
finish()
