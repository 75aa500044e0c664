"""A --zero 3 job killed with SIGKILL after its step-10 checkpoint resumes on another world size with the losses of
an uninterrupted run from that checkpoint:
  - `dtrain run -n 4` trains 20 steps (--zero 3, B=1, K=1, --save-every 10); as soon as state_10.bin exists every
    process of the job (launcher, agent, keepers, the four ranks) gets SIGKILL at once, as on a lost machine;
  - the checkpoint directory is copied as the kill left it; the job's own directory is resumed (--resume) on 2 ranks
    with K=2 micro-steps of B=1, so the global batch (4 sequences) and the data of every step stay the same;
  - the copy is resumed the same way in a fresh run that nothing interrupts.
Losses of steps 11..20: the resumed job equals the uninterrupted 2-rank run bit for bit (same world size, stage,
batch split and checkpoint files; every kernel and reduction order is fixed at --threads 1, so a difference means
the resume read something the kill left behind). Against an uninterrupted 4-rank run of all 20 steps they agree
within 1e-5 relative (2 ranks sum the gradients in another order than 4); steps 1..10, written by the killed job,
equal that run's bit for bit."""

import os
import shutil
import signal
import time

import trainer_harness as h

h.require_binaries(h.TRAINER, h.DTRAIN)
# L=4 C=256 keeps a 4-rank --zero 3 step at about 0.1-0.3 s here: long enough to kill between the checkpoints.
MODEL = ["--layers", "4", "--channels", "256", "--heads", "4", "--max-seq-len", "64", "--vocab", "256"]
STEPS, SAVE = 20, 10
KILL_WAIT_S = 60  # from the start of the job to its step-10 checkpoint: 10 steps plus start-up, with a wide margin
work = h.workdir()
shard = h.make_text_shard(work)
common = MODEL + ["--data", shard, "--seq-len", "64", "--steps", str(STEPS), "--lr", "2e-3", "--seed", "9",
                  "--threads", "1", "--save-every", str(SAVE), "--lr-schedule", "cosine", "--warmup-steps", "3",
                  "--zero", "3", "--batch-size", "1"]
on4 = ["--grad-accum", "1"]
on2 = ["--grad-accum", "2"]


def launcher(world, args):
    return [h.DTRAIN, "run", "-n", str(world), "--grace-s", "2", "--logs-dir", os.path.join(work, "runs"), "--",
            h.TRAINER] + common + args


full = os.path.join(work, "full4.jsonl")
run = h.launched(4, common + on4 + ["--checkpoint-dir", os.path.join(work, "ck_full4"), "--metrics", full], work)
h.check(run.code == 0, "the uninterrupted 4-rank --zero 3 run of 20 steps exits 0")
reference4 = h.losses(full) if run.code == 0 else []

ck = os.path.join(work, "ck_killed")
killed_metrics = os.path.join(work, "killed.jsonl")
bg = h.Background(launcher(4, on4 + ["--checkpoint-dir", ck, "--metrics", killed_metrics]), work)
if not h.check(h.wait_for_file(os.path.join(ck, f"state_{SAVE}.bin"), KILL_WAIT_S),
               f"the step-{SAVE} checkpoint of the 4-rank job appears"):
    h.kill_tagged(bg.tag)
    bg.wait()
    h.finish()
h.kill_tagged(bg.tag)
killed = bg.wait()
time.sleep(0.2)
h.check(killed.code == -signal.SIGKILL, f"the launcher died of SIGKILL (exit {killed.code})")
h.check(not h.tagged_pids(bg.tag, ""), "no process of the killed job is left")
done = len(h.metrics(killed_metrics))
h.check(SAVE <= done < STEPS, f"the job was killed after {done} of {STEPS} steps, past the step-{SAVE} checkpoint")
h.check(not os.path.exists(os.path.join(ck, f"state_{STEPS}.bin")), "there is no step-20 checkpoint to resume from")
print(f"     left in the checkpoint directory: {sorted(os.listdir(ck))}")
copy = os.path.join(work, "ck_copy")
shutil.copytree(ck, copy)

resumed = h.launched(2, common + on2 + ["--checkpoint-dir", ck, "--metrics", killed_metrics, "--resume"], work)
h.check(resumed.code == 0, "the killed job resumed on 2 ranks (K=2) exits 0")
h.check(f"resuming from step {SAVE}: model_{SAVE}.bin + state_{SAVE}.bin, checksums ok" in resumed.err,
        f"it says it resumed from the step-{SAVE} pair")
fresh_metrics = os.path.join(work, "fresh2.jsonl")
fresh = h.launched(2, common + on2 + ["--checkpoint-dir", copy, "--metrics", fresh_metrics, "--resume"], work)
h.check(fresh.code == 0, "the uninterrupted 2-rank run from the copied checkpoint exits 0")

if resumed.code == 0 and fresh.code == 0:
    after = h.metrics(killed_metrics)
    h.check([m["step"] for m in after] == list(range(1, STEPS + 1)),
            "the killed job's metrics file holds steps 1..20 once each")
    tail = [m["loss"] for m in after][SAVE:]
    expected = h.losses(fresh_metrics)
    h.check([m["step"] for m in h.metrics(fresh_metrics)] == list(range(SAVE + 1, STEPS + 1)),
            "the uninterrupted 2-rank run did steps 11..20")
    same = tail == expected
    h.check(same, "steps 11..20 of the resumed job equal the uninterrupted 2-rank run's, bit for bit")
    if not same:
        h.compare_losses("resumed vs uninterrupted 2-rank", tail, expected, 0)
    if reference4:
        h.check([m["loss"] for m in after][:SAVE] == reference4[:SAVE],
                "steps 1..10 of the killed job equal the uninterrupted 4-rank run's, bit for bit")
        h.compare_losses("steps 11..20 on 2 ranks vs the uninterrupted 4-rank run", tail, reference4[SAVE:], 1e-5)
h.finish()
