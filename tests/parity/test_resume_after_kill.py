"""Resume after a kill gives exactly the losses of an uninterrupted run.

A: one process trains 40 steps with --save-every 4; it is SIGKILLed right after a checkpoint appears; --resume
   continues from the newest complete pair (removing a model file without its state file and a temporary file, and
   saying so on stderr) and the metrics file then holds steps 1..40 with losses identical to an uninterrupted run.
   A damaged newest state file, or one flipped exponent bit in the newest model file, is named on stderr and skipped
   for the pair before it, as is a flipped bit in the newest state file's model shape. --resume in a directory without checkpoints says it starts from step 1.
B: the same under the launcher with 2 ranks and --max-restarts 1: rank 1 is SIGKILLed, the launcher restarts the
   job (TORCHELASTIC_RESTART_COUNT=1), the trainer resumes by itself, and the 40 losses equal those of an
   uninterrupted 2-rank run."""

import os
import signal

import trainer_harness as h

h.require_binaries(h.TRAINER, h.DTRAIN)
work = h.workdir()
shard = h.make_text_shard(work)
STEPS = 40
common = h.MODEL + ["--data", shard, "--seq-len", "64", "--steps", str(STEPS), "--lr", "2e-3", "--seed", "9",
                    "--threads", "1", "--save-every", "4", "--lr-schedule", "cosine", "--warmup-steps", "5"]

full = os.path.join(work, "full.jsonl")
run = h.trainer(common + ["--batch-size", "4", "--checkpoint-dir", os.path.join(work, "ck_full"),
                          "--metrics", full], work)
h.check(run.code == 0, "the uninterrupted run exits 0")
reference = h.metrics(full) if run.code == 0 else []

# A: kill a single process after its checkpoint of step 8, then --resume.
ck = os.path.join(work, "ck_a")
part = os.path.join(work, "part.jsonl")
args = common + ["--batch-size", "4", "--checkpoint-dir", ck, "--metrics", part]
bg = h.Background([h.TRAINER] + args, work)
h.check(h.wait_for_file(os.path.join(ck, "state_8.bin")), "A: the checkpoint of step 8 appears")
bg.proc.send_signal(signal.SIGKILL)
killed = bg.wait()
h.check(killed.code == -signal.SIGKILL, f"A: the trainer died of SIGKILL mid-run (exit {killed.code})")
done_before = len(h.metrics(part))
h.check(done_before < STEPS, f"A: it was killed after {done_before} of {STEPS} steps")
newest = max(int(n[6:-4]) for n in os.listdir(ck) if n.startswith("state_") and n.endswith(".bin"))
# Leftovers of a crash while saving: a model file whose state file was never written, a temporary state file.
with open(os.path.join(ck, f"model_{newest + 4}.bin"), "wb") as f:
    f.write(b"\0" * 1024)
with open(os.path.join(ck, f"state_{newest + 8}.bin.tmp.4242"), "wb") as f:
    f.write(b"partial")
resumed = h.trainer(args + ["--resume"], work)
h.check(resumed.code == 0, "A: the --resume run exits 0")
h.check(f"resuming from step {newest}: model_{newest}.bin + state_{newest}.bin, checksums ok" in resumed.err,
        f"A: it says on stderr that it resumed from the newest complete pair, step {newest}")
h.check(f"model_{newest + 4}.bin has no state file (an interrupted save): removed" in resumed.err and
        f"state_{newest + 8}.bin.tmp.4242 is a partly written file (a save that was interrupted): removed" in
        resumed.err, "A: it says it removed the leftovers of the interrupted save")
h.check(not os.path.exists(os.path.join(ck, f"state_{newest + 8}.bin.tmp.4242")),
        "A: the temporary file is gone")
after = h.metrics(part)
h.check([m["step"] for m in after] == list(range(1, STEPS + 1)), "A: the metrics file holds steps 1..40 once each")
if reference:
    same = [m["loss"] for m in after] == [m["loss"] for m in reference]
    h.check(same, "A: every loss equals the uninterrupted run's, bit for bit (9 significant digits)")
    if not same:
        h.compare_losses("A: resumed vs uninterrupted", [m["loss"] for m in after], [m["loss"] for m in reference], 0)

# A2: a damaged newest state file (one flipped bit in its moments) is skipped with a warning; resume falls back to
# the pair before it and the repeated steps give the same losses again.
state_40 = os.path.join(ck, "state_40.bin")
with open(state_40, "r+b") as f:
    f.seek(256 + 4 * 1000)
    byte = f.read(1)[0]
    f.seek(256 + 4 * 1000)
    f.write(bytes([byte ^ 0x04]))
again = h.trainer(args + ["--resume"], work)
h.check(again.code == 0, "A2: --resume with a damaged newest checkpoint exits 0")
h.check("state_40.bin: checksum mismatch" in again.err and "resuming from step 36" in again.err,
        "A2: it names the damage and resumes from step 36")
after = h.metrics(part)
if reference:
    h.check([m["loss"] for m in after] == [m["loss"] for m in reference],
            "A2: steps 37..40 repeat the same losses")

# A3: one flipped exponent bit in the newest model file (llm.c's format has no checksum; the state file records
# its CRC-32C) is found; resume falls back to step 36 instead of training on with different weights.
model_40 = os.path.join(ck, "model_40.bin")
with open(model_40, "r+b") as f:
    f.seek(1024 + 4 * 1000 + 3)  # the high byte of a little-endian float holds the sign and 7 exponent bits
    byte = f.read(1)[0]
    f.seek(1024 + 4 * 1000 + 3)
    f.write(bytes([byte ^ 0x10]))
flipped = h.trainer(args + ["--resume"], work)
h.check(flipped.code == 0, "A3: --resume with a flipped bit in the newest model file exits 0")
h.check("model_40.bin: checksum mismatch" in flipped.err and "resuming from step 36" in flipped.err,
        "A3: it names the damaged model file and resumes from step 36")
if reference:
    h.check([m["loss"] for m in h.metrics(part)] == [m["loss"] for m in reference],
            "A3: steps 37..40 repeat the same losses")

# A3b: one flipped bit in the newest state file's channel count reads as another model until the checksum is
# checked: it is damage like any other, named and skipped for step 36, not a refusal to resume (exit 2).
with open(state_40, "r+b") as f:
    f.seek(4 * 6)  # int32 C, after magic, version, maxT, V, L, NH
    byte = f.read(1)[0]
    f.seek(4 * 6)
    f.write(bytes([byte ^ 0x10]))
shape = h.trainer(args + ["--resume"], work)
h.check(shape.code == 0, f"A3b: --resume with a flipped bit in the newest state file's shape exits 0 ({shape.code})")
h.check("state_40.bin: checksum mismatch" in shape.err and "resuming from step 36" in shape.err,
        "A3b: it names the damaged state file and resumes from step 36")
if reference:
    h.check([m["loss"] for m in h.metrics(part)] == [m["loss"] for m in reference],
            "A3b: steps 37..40 repeat the same losses")

# A4: --resume where there is nothing to resume says so.
empty = os.path.join(work, "ck_empty")
fresh = h.trainer(common + ["--batch-size", "4", "--checkpoint-dir", empty, "--resume"], work)
h.check(fresh.code == 0, "A4: --resume without checkpoints exits 0")
h.check(f"no complete checkpoint in {empty}: starting from step 1" in fresh.err,
        "A4: it says on stderr that it found no checkpoint and starts from step 1")

# B: 2 ranks under the launcher; rank 1 is killed after the checkpoint of step 8; the restart resumes by itself.
ddp_full = os.path.join(work, "ddp_full.jsonl")
run = h.launched(2, common + ["--batch-size", "2", "--checkpoint-dir", os.path.join(work, "ck_b_full"),
                              "--metrics", ddp_full], work)
h.check(run.code == 0, "B: the uninterrupted 2-rank run exits 0")
ddp_reference = h.metrics(ddp_full) if run.code == 0 else []
ck = os.path.join(work, "ck_b")
ddp = os.path.join(work, "ddp.jsonl")
argv = [h.DTRAIN, "run", "-n", "2", "--max-restarts", "1", "--grace-s", "2", "--logs-dir", os.path.join(work, "runs"),
        "--", h.TRAINER] + common + ["--batch-size", "2", "--checkpoint-dir", ck, "--metrics", ddp]
bg = h.Background(argv, work)
h.check(h.wait_for_file(os.path.join(ck, "state_8.bin")), "B: the checkpoint of step 8 appears")
victims = bg.trainer_pids(rank=1)
h.check(len(victims) == 1, f"B: one rank-1 trainer is running ({victims})")
for pid in victims:
    os.kill(pid, signal.SIGKILL)
result = bg.wait(timeout=180)
if not h.check(result.code == 0, f"B: the launcher restarts the job and it finishes (exit {result.code})"):
    result.show()
h.check("resuming from step" in result.out + result.err, "B: the restarted trainer resumed from a checkpoint by itself")
after = h.metrics(ddp) if os.path.exists(ddp) else []
h.check([m["step"] for m in after] == list(range(1, STEPS + 1)), "B: the metrics file holds steps 1..40 once each")
if ddp_reference:
    same = [m["loss"] for m in after] == [m["loss"] for m in ddp_reference]
    h.check(same, "B: every loss equals the uninterrupted 2-rank run's, bit for bit (9 significant digits)")
    if not same:
        h.compare_losses("B: resumed vs uninterrupted", [m["loss"] for m in after],
                         [m["loss"] for m in ddp_reference], 0)
if reference and ddp_reference:
    h.compare_losses("B: 2 ranks vs 1 rank (float rounding only)", [m["loss"] for m in ddp_reference],
                     [m["loss"] for m in reference], 1e-4)
h.finish()
