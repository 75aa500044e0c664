"""A pipeline stage that stops in the middle of training, through the real launcher, agents and signals
(dtrain-trainer --pp 2 on two simulated nodes, one stage each, the stages' sends over gloo):
  dies    stage 1 is killed (SIGKILL) while the job trains: stage 0, waiting for it inside the pipeline, is stopped by
          the teardown at once; the job exits 137 (128 + SIGKILL) within seconds, naming rank 1 as the root cause, and
          leaves nothing running;
  hangs   stage 1 stalls before step 3 (--debug-stall-rank 1): stage 0 waits for its gradient; the hang check fails the
          job after health.hang_timeout_s (exit 124), and the evidence shows stage 0 waiting for stage 1 in the
          pipeline ("pp-recv" or "pp-send"), naming both stages;
  hangs on one node   the same with both stages on one node, where the pipeline group is an shm communicator and
          stage 0 waits on its ring's doorbell: the same hang check, the same phases."""

import glob
import os
import re
import subprocess
import time

from harness import BUILD_DIR, Run, check, finish, write

TRAINER = os.path.join(BUILD_DIR, "bin", "dtrain-trainer")

SPEC = """
name: %s
nodes: {provider: local, count: %d}
workers_per_node: %d
command: %s
shell: true
restart: {max_restarts: 0}
stop: {grace_s: 1}
health: {%s}
logs: {dir: runs, console: all}
"""

MODEL = ("--layers 4 --channels 64 --heads 4 --max-seq-len 64 --vocab 256 --seq-len 64 --batch-size 1 "
         "--grad-accum 4 --threads 1 --pp 2")


def launch(name, command, health, nodes=2):
    run = Run([], timeout=120)
    text = write(os.path.join(run.dir, "data.txt"), " ".join(["the stages pass activations on"] * 4000))
    shard = os.path.join(run.dir, "data.bin")
    prepared = subprocess.run([TRAINER, "prepare-text", text, shard], capture_output=True, text=True, timeout=60)
    check(prepared.returncode == 0, "prepare-text makes the shard: " + prepared.stdout + prepared.stderr)
    job = SPEC % (name, nodes, 2 // nodes, command % (TRAINER, MODEL, shard), health)
    spec = write(os.path.join(run.dir, "job.yaml"), job)
    run.args += ["launch", spec]
    began = time.monotonic()
    run.run()
    run.took = time.monotonic() - began
    run.show()
    return run


# ---- dies: rank 1's shell arms a SIGKILL of itself, then becomes dtrain-trainer (the same pid) and trains.
dies = ('"if [ \\"$RANK\\" = 1 ]; then (sleep 3; kill -9 $$) & fi; '
        'exec %s %s --data %s --steps 100000 --log-every 50"')
run = launch("pp-dies", dies, "hang_timeout_s: 30")
check(run.code == 137, "a killed stage -> exit 137, got %s" % run.code)
check(re.search(r"root cause: rank 1 \(pipeline stage 1 of 2\) on node 1", run.err),
      "rank 1 is named as the root cause, with its stage")
check(re.search(r"step \d+/100000", run.out + run.err), "the pipeline trained before the stage died")
# start-up (~1-2 s), 3 s of training, the teardown (grace 1 s), and a margin: never the 30 s hang bound.
check(run.took < 15, "the job ended %.1f s after it started (the surviving stage did not hang)" % run.took)
run.assert_no_leaks()

# ---- hangs: stage 1 stalls; stage 0 waits for it in the pipeline (over gloo across nodes, then shm on one node).
hangs = '"exec %s %s --data %s --steps 50 --debug-stall-step 3 --debug-stall-rank 1"'
for nodes, backend in ((2, "gloo"), (1, "shm")):
    run = launch("pp-hangs-%d" % nodes, hangs, "hang_timeout_s: 3", nodes)
    check(run.code == 124, "%s: a stalled stage -> exit 124, got %s" % (backend, run.code))
    check("pp %s)" % backend in run.out + run.err, "%s: rank 0's layout line says 'pp %s'" % (backend, backend))
    check(re.search(r"rank \d \(pipeline stage \d of 2\) made no step progress", run.err),
          "%s: the hang check names the rank and its stage" % backend)
    dumps = sorted(glob.glob(os.path.join(run.dir, "runs", "*", "attempt_0", "stacks", "rank_*.dump.txt")))
    text = "".join(open(p).read() for p in dumps)
    check(len(dumps) == 2, "%s: both ranks dumped their phase (%s)" % (backend, dumps))
    # Stage 0 waits for stage 1's gradient (pp-recv), or at the end of a step for stage 1 to take its sends (pp-send).
    check(re.search(r"pp-(recv|send) \(stage 0 of 2, tensor-parallel rank 0 waits for stage 1", text + run.err),
          "%s: stage 0's phase says it waits for stage 1 in the pipeline" % backend)
    check('phase "stalled (--debug-stall-step)"' in text, "%s: stage 1's phase says it stalled" % backend)
    run.assert_no_leaks()
finish()
