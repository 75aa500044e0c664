"""A worker cannot grow node 0's agent without bound through the job's store: values of 1 MiB are stored until the
round holds 256 MiB (StoreLimits), then refused as "full" with the limit and what the store holds; a 64 MiB value is
refused by the agent's 16 MiB value limit. The agent's resident memory grows by about the limit, not more."""

import os
import re

from harness import BUILD_DIR, PYTHON, SOURCE_DIR, Run, check, finish

PYTHONPATH = os.path.join(BUILD_DIR, "python") + ":" + os.path.join(SOURCE_DIR, "agent", "store", "python")
FLOOD = os.path.join(SOURCE_DIR, "tests", "tools", "store_flood.py")


def flood(name, count, size):
    run = Run(["run", "-n", "1", "--name", name, "--", PYTHON, FLOOD, str(count), str(size)],
              env={"PYTHONPATH": PYTHONPATH}, timeout=180)
    run.run()
    run.show()
    check(run.code == 0, "%s: the flooding worker exits 0, got %s" % (name, run.code))
    rss = [int(kb) for kb in re.findall(r"agent rss (?:before|after): (\d+) kB", run.out)]
    run.assert_no_leaks()
    return run, (rss[1] - rss[0]) * 1024 if len(rss) == 2 else None


run, grown = flood("store-flood-bytes", 400, 1 << 20)
# 255 values of 1 MiB + 15 bytes of key each fit in 256 MiB; the 256th would pass it.
check("stored 255 of 400 values; refused: full:" in run.out, "the 256th MiB is refused as a full store")
check("over its limit of 268435456 bytes (256 MiB)" in run.out and "it holds 255 keys with" in run.out,
      "the refusal names the limit and what the store holds")
check(grown is not None and grown < 400 << 20, "the agent grew by %s bytes, under 400 MiB" % grown)

run, grown = flood("store-flood-value", 10, 64 << 20)
check("stored 0 of 10 values; refused: invalid_argument:" in run.out and "(16 MiB)" in run.out,
      "a 64 MiB value is refused by the 16 MiB value limit")
finish()
