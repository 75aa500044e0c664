"""dtrain-trainer's command line: bad flags exit 2 with the flag named, --help lists the interface's flags,
prepare-text makes a shard that trains, and user errors (missing data, a model file given as data, a checkpoint of
another model, a checkpoint directory of another global batch) fail with a message that says what to do."""

import os

import trainer_harness as h

h.require_binaries(h.TRAINER)
work = h.workdir()
shard = h.make_text_shard(work)
base = ["--model", "tiny", "--data", shard, "--batch-size", "2", "--seq-len", "32", "--threads", "1"]


def expect(args, code, needle, what):
    run = h.run([h.TRAINER] + args, work)
    text = run.out + run.err
    ok = h.check(run.code == code and needle in text, f"{what}: exit {run.code} (want {code}), says '{needle}'")
    if not ok:
        print(text)
    return run


helped = h.run([h.TRAINER, "--help"], work)
flags = ["--model", "--layers", "--channels", "--heads", "--max-seq-len", "--vocab", "--batch-size", "--seq-len",
         "--steps", "--seed", "--lr", "--beta1", "--beta2", "--eps", "--weight-decay", "--grad-clip",
         "--warmup-steps", "--lr-schedule", "--grad-accum", "--data", "--init-from", "--save-every", "--resume",
         "--metrics", "--checkpoint-dir", "prepare-text"]
missing = [f for f in flags if f not in helped.out]
h.check(helped.code == 0 and not missing, f"--help exits 0 and lists every flag (missing: {missing})")

# --tp/--pp: the layout, printed by --dry-run (the world from WORLD_SIZE and LOCAL_WORLD_SIZE, no --data needed), and
# the refusals, made before any rank waits for its peers.
grid = {"WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "4"}
dry = h.run([h.TRAINER, "--model", "tiny", "--tp", "2", "--pp", "2", "--dry-run"], work, env=grid)
h.check(dry.code == 0 and "world 8 = tp 2 x dp 2 x pp 2" in dry.out and dry.out.count("\nrank ") == 8 and
        "rank 5  node 1  tp 1  dp 0  pp 1  | tp group 4,5 | dp group 5,7 | pp group 1,5" in dry.out,
        "--dry-run prints each rank's coordinates and groups")
odd = h.run([h.TRAINER, "--model", "tiny", "--tp", "3", "--dry-run"], work, env={"WORLD_SIZE": "6"})
h.check(odd.code == 2 and "attention heads" in odd.err, "--tp 3 on a 4-head model is refused, exit 2")
cross = h.run([h.TRAINER, "--model", "tiny", "--tp", "4", "--dry-run"], work, env={"WORLD_SIZE": "8",
                                                                                   "LOCAL_WORLD_SIZE": "2"})
h.check(cross.code == 2 and "--allow-cross-node-tp" in cross.err, "a TP group across nodes is refused, exit 2")
zero = h.run([h.TRAINER, "--model", "tiny", "--pp", "2", "--zero", "3", "--dry-run"], work, env=grid)
h.check(zero.code == 2 and "--zero 1" in zero.err, "--pp 2 with --zero 3 is refused, exit 2")
layers = h.run([h.TRAINER, "--model", "tiny", "--layers", "3", "--pp", "2", "--dry-run"], work, env=grid)
h.check(layers.code == 2 and "3 layers" in layers.err, "--pp 2 on a 3-layer model is refused, exit 2")
world = h.run([h.TRAINER, "--model", "tiny", "--pp", "3", "--dry-run"], work, env=grid)
h.check(world.code == 2 and "8" in world.err and "3" in world.err, "--pp 3 on 8 ranks is refused, exit 2")
bad = h.run([h.TRAINER] + base + ["--pp", "2", "--pp-schedule", "zigzag"], work, env={"WORLD_SIZE": "2"})
h.check(bad.code == 2 and "--pp-schedule" in bad.err, "--pp-schedule zigzag is refused, exit 2")
for extra, said in ((["--pp-virtual", "2"], "needs --pp above 1"),
                    (["--pp", "2", "--pp-virtual", "2", "--pp-schedule", "gpipe"], "drop --pp-schedule gpipe"),
                    (["--pp", "2", "--pp-virtual", "3"], "do not divide into --pp x --pp-virtual = 6"),
                    (["--pp", "2", "--pp-virtual", "2", "--grad-accum", "3"], "3")):
    virtual = h.run([h.TRAINER, "--model", "tiny", "--layers", "4", "--dry-run"] + extra, work, env=grid)
    h.check(virtual.code == 2 and said in virtual.err, f"{' '.join(extra)} is refused, exit 2: {virtual.err[-200:]}")
alone = h.run([h.TRAINER, "--model", "tiny", "--sequence-parallel", "--dry-run"], work, env=grid)
h.check(alone.code == 2 and "needs --tp above 1" in alone.err, "--sequence-parallel without --tp is refused, exit 2")
uneven = h.run([h.TRAINER, "--model", "tiny", "--tp", "4", "--sequence-parallel", "--batch-size", "1", "--seq-len",
                "6", "--dry-run"], work, env=grid)
h.check(uneven.code == 2 and "do not divide by --tp 4" in uneven.err,
        "--sequence-parallel with 1 x 6 tokens on --tp 4 is refused, exit 2")
# --tp and --pp train (tests/parity/test_trainer_tp.py, test_trainer_pp.py), but not with what they do not have yet.
for extra, said in ((["--pp", "2", "--zero", "2"], "--zero 2 with --pp 2"),
                    (["--tp", "2", "--device", "cuda"], "CPU backend only"),
                    (["--pp", "2", "--device", "cuda"], "pipeline parallelism runs on the CPU backend only")):
    refused = h.run([h.TRAINER] + base + ["--steps", "1"] + extra, work, env={"WORLD_SIZE": "2", "RANK": "0"})
    h.check(refused.code == 2 and said in refused.err, f"{' '.join(extra)} is refused, exit 2")

expect(base + ["--bogus"], 2, "--bogus", "an unknown flag")
expect(base + ["--lr-schedule", "linear"], 2, "--lr-schedule", "a schedule that does not exist")
expect(base + ["--batch-size", "0"], 2, "--batch-size", "batch size 0")
expect(["--model", "tiny"], 2, "--data", "no --data")
expect(["--model", "huge", "--data", shard], 2, "known presets: tiny, gpt2-124m", "an unknown preset")
expect(["--layers", "2", "--channels", "30", "--heads", "4", "--data", shard], 2, "multiple of num_heads",
       "channels not divisible by heads")
expect(base + ["--seq-len", "128"], 2, "--max-seq-len", "a sequence longer than the model's")
expect(base + ["--data", os.path.join(work, "nothing*.bin")], 1, "no file matches", "a glob that matches nothing")
expect(["prepare-text", os.path.join(work, "missing.txt"), os.path.join(work, "x.bin")], 1, "cannot read",
       "prepare-text of a missing file")
expect(["prepare-text"], 2, "input", "prepare-text without files")

ck = os.path.join(work, "ck")
first = h.trainer(base + ["--steps", "2", "--save-every", "2", "--checkpoint-dir", ck], work)
h.check(first.code == 0 and os.path.exists(os.path.join(ck, "model_2.bin")), "a run writes model_2.bin + state_2.bin")
expect(base + ["--data", os.path.join(ck, "model_2.bin")], 1, "magic is 20240326, expected 20240520",
       "a model checkpoint given as --data")
expect(base + ["--steps", "4", "--resume", "--checkpoint-dir", ck, "--batch-size", "4"], 2, "global batch",
       "resume with another global batch")
expect(["--layers", "3", "--channels", "64", "--heads", "4", "--max-seq-len", "64", "--data", shard,
        "--batch-size", "2", "--seq-len", "32", "--steps", "4", "--resume", "--checkpoint-dir", ck], 2, "L=2",
       "resume with another model shape")
expect(base + ["--steps", "2", "--resume", "--checkpoint-dir", ck], 0, "nothing to do",
       "resume of a finished run")
# --init-from without model flags takes the shape from the file.
init = h.trainer(["--init-from", os.path.join(ck, "model_2.bin"), "--data", shard, "--batch-size", "2",
                  "--seq-len", "32", "--steps", "1", "--threads", "1"], work)
h.check(init.code == 0 and "L=2 C=64 NH=4" in init.out + init.err, "--init-from alone gives the model's shape")
h.finish()
