"""Where dtrain-trainer's communication time goes, and where a rank hung in communication says it waits:
  - the --metrics line with 2 ranks under `dtrain run` (DDP and --zero 3) carries comm_ms (the step's collectives,
    hidden or not), comm_exposed_ms (the training thread's time on communication) and comm_hidden, which is
    1 - comm_exposed_ms / comm_ms clamped to [0, 1]; one process carries none of them;
  - a job where rank 1 stalls before step 3 (--debug-stall-rank 1) leaves rank 0 waiting in that step's first
    collective: with --zero 3 the all-gather of unit 0 (the embeddings, gathered first in forward), with DDP the
    allreduce of bucket 0 (the first bucket reduced). Rank 0's dump (the agent's signal) and, when the summary names
    it, its last health report say so: "all-gather unit 0", "allreduce bucket 0"."""

import glob
import os
import re

import trainer_harness as h

h.require_binaries(h.TRAINER, h.DTRAIN)
work = h.workdir()
shard = h.make_text_shard(work)
common = ["--model", "tiny", "--data", shard, "--batch-size", "2", "--seq-len", "32", "--threads", "1"]

for zero in ("0", "3"):
    path = os.path.join(work, f"m{zero}.jsonl")
    result = h.launched(2, common + ["--steps", "4", "--zero", zero, "--metrics", path], work)
    if not h.check(result.code == 0, f"--zero {zero}: 2 ranks train 4 steps"):
        result.show()
        continue
    lines = h.metrics(path)
    for m in lines:
        comm, exposed, hidden = m.get("comm_ms"), m.get("comm_exposed_ms"), m.get("comm_hidden")
        if not h.check(None not in (comm, exposed, hidden) and comm > 0 and exposed > 0,
                       f"--zero {zero} step {m['step']}: comm_ms {comm}, comm_exposed_ms {exposed}, comm_hidden "
                       f"{hidden}"):
            continue
        want = min(1.0, max(0.0, 1.0 - exposed / comm))
        h.check(abs(hidden - want) <= 1e-6, f"--zero {zero} step {m['step']}: comm_hidden {hidden} = 1 - exposed / "
                                            f"comm, clamped ({want})")
        h.check(exposed <= m["step_ms"], f"--zero {zero} step {m['step']}: exposed {exposed} ms within the step "
                                         f"({m['step_ms']} ms)")

alone = os.path.join(work, "alone.jsonl")
result = h.trainer(common + ["--steps", "2", "--metrics", alone], work)
h.check(result.code == 0 and all(k not in m for m in h.metrics(alone) for k in ("comm_ms", "comm_exposed_ms",
                                                                               "comm_hidden")),
        "one process: no communication keys")

HANG_SPEC = """
name: wait-%s
nodes: {provider: local, count: 2}
workers_per_node: 1
command: [%s, --model, tiny, --data, %s, --batch-size, "2", --seq-len, "32", --threads, "1", --steps, "50",
          --zero, "%s", --debug-stall-step, "3", --debug-stall-rank, "1"]
stop: {grace_s: 1}
health: {hang_timeout_s: 3}
logs: {dir: %s}
"""

for zero, waits_in in (("3", "all-gather unit 0"), ("0", "allreduce bucket 0")):
    runs = os.path.join(work, f"runs-hang-{zero}")
    spec = os.path.join(work, f"hang{zero}.yaml")
    with open(spec, "w") as f:
        f.write(HANG_SPEC % (zero, h.TRAINER, shard, zero, runs))
    hung = h.run([h.DTRAIN, "launch", spec], work, timeout=120)
    h.check(hung.code == 124, f"--zero {zero}: the hung job fails its health check (exit {hung.code})")
    dumps = glob.glob(os.path.join(runs, "*", "attempt_0", "stacks", "rank_0.dump.txt"))
    text = open(dumps[0]).read() if dumps else ""
    if not h.check(f'phase "{waits_in}"' in text, f"--zero {zero}: rank 0's dump says it waits in {waits_in!r}"):
        print(text[:2000])
        hung.show()
    named = re.search(r"last health report of rank (\d): .*, last phase: ([^,\n]+)", hung.err)
    if h.check(named is not None, f"--zero {zero}: the summary shows the failed rank's last phase"):
        expected = waits_in if named.group(1) == "0" else "stalled (--debug-stall-step)"
        h.check(named.group(2) == expected, f"--zero {zero}: rank {named.group(1)}'s last phase is {expected!r} "
                                            f"({named.group(2)!r})")
h.finish()
