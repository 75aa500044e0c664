"""A worker that floods the job's store the way a careless or hostile holder of the job token could, and measures
node 0's agent (its ancestor) while doing it, where it can see it: under an agent running as root the worker is in
the agent's PID namespace, where the agent has no /proc entry, and the lines say so (measure the agent from outside
then, as tests/integration/test_store_limits.py does). Run it under `dtrain run -n 1 --`:

    store_flood.py COUNT SIZE      set COUNT keys of SIZE bytes each, stopping at the first refusal

Prints one line per phase: "agent rss before: N kB", "stored K of COUNT values; refused: KIND: MESSAGE" (or "stored
all"), "agent rss after: N kB". Exit status 0 unless the store failed in some way other than refusing."""

import os
import sys

import dtrain_store


def agent_pid():
    """The nearest ancestor that runs `dtrain agent` (a worker's parent is its keeper process, below the agent)."""
    pid = os.getppid()
    while pid > 1:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
        if len(argv) > 1 and argv[1] == b"agent":
            return pid
        with open(f"/proc/{pid}/stat") as f:
            pid = int(f.read().rsplit(")", 1)[1].split()[1])
    return None


def agent_rss():
    """"N kB", or why the agent cannot be seen."""
    pid = agent_pid()
    if pid is None:
        return "not visible from this worker (no `dtrain agent` among its ancestors in its PID namespace)"
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return f"{int(line.split()[1])} kB"
    return "unknown"


count, size = int(sys.argv[1]), int(sys.argv[2])
store = dtrain_store.StoreClient()
print(f"agent rss before: {agent_rss()}", flush=True)
value = b"x" * size
stored = 0
for i in range(count):
    try:
        store.set(f"flood/{i}", value)
    except dtrain_store.StoreError as e:
        if e.kind not in ("full", "invalid_argument"):
            raise
        print(f"stored {stored} of {count} values; refused: {e.kind}: {e}", flush=True)
        break
    stored += 1
else:
    print(f"stored all {count} values", flush=True)
print(f"agent rss after: {agent_rss()}", flush=True)
