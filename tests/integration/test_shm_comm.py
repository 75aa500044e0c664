"""The shared-memory communicator (DTRAIN_COMM_BACKEND=shm) under the real launcher: dtrain bench allreduce with
communicator-allocated and user buffers comes back with #wrong 0, and so does dtrain bench sendrecv (point-to-point
through the segment's rings, 3 ranks in a ring, messages from 1 KiB to 4 MiB, past the 1 MiB ring);
dtrain-comm-worker's collectives and DDP pass are exact over shm; a job over two nodes is refused with a message that names the fix; and when a worker is SIGKILLed
before every rank joined its segment (so nobody removed its name), the agent removes the job's segments from
/dev/shm at the end of the round."""

import os
import re
import signal
import time

from harness import BUILD_DIR, DTRAIN, Run, check, finish, tagged_pids

WORKER = os.path.join(BUILD_DIR, "bin", "dtrain-comm-worker")
SHM = "/dev/shm"


def segments(name):
    """This test's shm segments: their job id starts with the run's --name (worker/shm_segment_name.h)."""
    return [entry for entry in os.listdir(SHM) if entry.startswith("dtrain@%s-" % name)]


def bench_rows(text):
    """(table title, size, #wrong) of every row of dtrain bench's tables."""
    rows, title = [], None
    for line in text.splitlines():
        line = re.sub(r"^\[\d+\] ", "", line)  # the console's rank prefix
        if line.startswith("# dtrain bench"):
            title = line
            continue
        fields = line.split()
        if len(fields) == 6 and fields[0].isdigit():
            rows.append((title, int(fields[0]), int(fields[5])))
    return rows


# 1. The bench on 2 ranks, both kinds of buffers, sizes from 1 KiB to 4 MiB (several pipelined chunks).
run = Run(["run", "-n", "2", "--name", "shm-bench", "--", DTRAIN, "bench", "allreduce", "--backend", "shm",
           "--buffers", "both", "-b", "1K", "-e", "4M", "-f", "16", "-n", "3", "-w", "1"], timeout=120)
run.run()
run.show()
check(run.code == 0, "dtrain bench --backend shm exits 0, got %s" % run.code)
rows = bench_rows(run.out)
titles = {title for title, _, _ in rows}
check(any("backend shm, communicator-allocated buffers" in t for t in titles), "a table with communicator buffers")
check(any("backend shm, user (host memory) buffers" in t for t in titles), "a table with user buffers")
check(len(rows) == 8, "4 sizes x 2 tables, got %d rows" % len(rows))
check(all(wrong == 0 for _, _, wrong in rows), "#wrong is 0 in every row")
check(segments("shm-bench") == [], "nothing left in /dev/shm: %s" % segments("shm-bench"))
run.assert_no_leaks()

# 1b. Point-to-point: every rank sends to the next and receives from the one before, at once.
run = Run(["run", "-n", "3", "--name", "shm-sendrecv", "--", DTRAIN, "bench", "sendrecv", "--backend", "shm",
           "--buffers", "both", "-b", "1K", "-e", "4M", "-f", "64", "-n", "3", "-w", "1"], timeout=120)
run.run()
run.show()
check(run.code == 0, "dtrain bench sendrecv --backend shm exits 0, got %s" % run.code)
rows = bench_rows(run.out)
check(len(rows) == 6, "3 sizes x 2 tables, got %d rows" % len(rows))
check(all(wrong == 0 for _, _, wrong in rows), "#wrong is 0 in every sendrecv row")
check(segments("shm-sendrecv") == [], "nothing left in /dev/shm: %s" % segments("shm-sendrecv"))
run.assert_no_leaks()

# 2. Every collective and a DDP pass, exact, through make_communicator_from_env with DTRAIN_COMM_BACKEND=shm.
if os.path.exists(WORKER):
    run = Run(["run", "-n", "3", "--console", "all", "--name", "shm-worker", "--", WORKER, "check"],
              env={"DTRAIN_COMM_BACKEND": "shm", "DTRAIN_COMM_TIMEOUT_MS": "30000"}, timeout=120)
    run.run()
    run.show()
    check(run.code == 0, "comm-worker check over shm exits 0, got %s" % run.code)
    for rank in range(3):
        check("comm-worker rank %d of 3 (shm) ok" % rank in run.out, "rank %d reports ok over shm" % rank)
    run.assert_no_leaks()

# 3. Ranks on two nodes cannot share a segment: refused, naming the fix.
run = Run(["run", "-n", "1", "--nodes", "2", "--name", "shm-nodes", "--", DTRAIN, "bench", "allreduce", "--backend",
           "shm", "-b", "1K", "-e", "1K"], timeout=120)
run.run()
run.show()
check(run.code == 1, "a 2-node job with --backend shm fails with exit 1, got %s" % run.code)
check("the shm backend connects the ranks of one node" in run.out + run.err, "the error says why")
check("DTRAIN_COMM_BACKEND=gloo" in run.out + run.err, "the error names the fix")
run.assert_no_leaks()

# 4. Rank 0 creates its segment and waits for rank 1, which never comes; SIGKILL rank 0 then. Its segment keeps its
# name (only a complete communicator removes it); the agent must remove it when the round ends.
script = 'if [ "$RANK" = 0 ]; then exec "$0" bench allreduce --backend shm --timeout-s 60; else exec sleep 60; fi'
run = Run(["run", "-n", "2", "--name", "shm-sweep", "--", "sh", "-c", script, DTRAIN], timeout=120).start()
seen, killed = [], False
deadline = time.monotonic() + 60
while time.monotonic() < deadline and not killed:
    seen = segments("shm-sweep")
    if seen:
        for pid in tagged_pids(run.tag):
            try:  # a process listed a moment ago (a keeper, an sh about to exec) may be gone by now
                with open("/proc/%d/cmdline" % pid, "rb") as f:
                    if b"bench\0allreduce" in f.read():
                        os.kill(pid, signal.SIGKILL)
                        killed = True
            except (FileNotFoundError, ProcessLookupError):
                continue
    time.sleep(0.02)
run.wait()
run.show()
check(seen != [], "rank 0 created its segment under /dev/shm")
check(all("@node0@round0@comm0@" in name for name in seen), "the name carries node, round and index: %s" % seen)
check(killed, "rank 0 was SIGKILLed while it waited for rank 1")
check(run.code == 137, "the job fails with rank 0's 128+SIGKILL, got %s" % run.code)
check(segments("shm-sweep") == [], "the agent removed the segment: %s" % segments("shm-sweep"))
run.assert_no_leaks()
finish()
