"""A worker cannot grow node 0's agent without bound through the job's store: values of 1 MiB are stored until the
round holds 256 MiB (StoreLimits), then refused as "full" with the limit and what the store holds; a 64 MiB value is
refused by the agent's 16 MiB value limit. The agent's resident memory grows by about the limit, not more: measured
from here (the worker may run in the agent's PID namespace, where the agent is not visible), as the agent's peak
resident memory (VmHWM) at its end less its resident memory when the worker started."""

import os
import time

from harness import BUILD_DIR, PYTHON, SOURCE_DIR, Run, argv_of, check, finish, tagged_pids

PYTHONPATH = os.path.join(BUILD_DIR, "python") + ":" + os.path.join(SOURCE_DIR, "worker", "python")
FLOOD = os.path.join(SOURCE_DIR, "tests", "tools", "store_flood.py")


def memory_kb(pid, field):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def flood(name, count, size):
    run = Run(["run", "-n", "1", "--name", name, "--", PYTHON, FLOOD, str(count), str(size)],
              env={"PYTHONPATH": PYTHONPATH}, timeout=180).start()
    # The agent's resident memory once the flooding worker runs, then its peak until it ends.
    agent, before, peak = None, None, None
    while run.proc.poll() is None:
        pids = tagged_pids(run.tag)
        if agent is None:
            agent = next((p for p in pids if argv_of(p)[1:2] == [b"agent"]), None)
        if agent is not None:
            if before is None and any(FLOOD.encode() in argv_of(p) for p in pids):
                before = memory_kb(agent, "VmRSS")
            peak = memory_kb(agent, "VmHWM") or peak
        time.sleep(0.02)
    run.wait()
    run.show()
    check(run.code == 0, "%s: the flooding worker exits 0, got %s" % (name, run.code))
    run.assert_no_leaks()
    return run, (peak - before) * 1024 if before is not None and peak is not None else None


run, grown = flood("store-flood-bytes", 400, 1 << 20)
# 255 values of 1 MiB + 15 bytes of key each fit in 256 MiB; the 256th would pass it.
check("stored 255 of 400 values; refused: full:" in run.out, "the 256th MiB is refused as a full store")
check("over its limit of 268435456 bytes (256 MiB)" in run.out and "it holds 255 keys with" in run.out,
      "the refusal names the limit and what the store holds")
print("the agent grew by %s bytes" % grown, flush=True)
check(grown is not None and grown < 400 << 20, "the agent grew by %s bytes, under 400 MiB" % grown)

run, grown = flood("store-flood-value", 10, 64 << 20)
check("stored 0 of 10 values; refused: invalid_argument:" in run.out and "(16 MiB)" in run.out,
      "a 64 MiB value is refused by the 16 MiB value limit")
finish()
