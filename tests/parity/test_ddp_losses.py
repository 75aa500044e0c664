"""DDP through the real launcher: 2 ranks x batch B/2 train exactly like 1 rank x batch B (per-step loss within 1e-5
relative, gradient norms too), over the default communicator (auto: both ranks on this host, so shared memory), and
over Gloo with 2 micro-steps per rank (gradients of the first micro-step stay local: no_sync). The model's 1.67 MiB
of gradients make two DDP buckets by default (1 MiB, then the rule's 1 MiB floor: trainer/parallel/ddp/buckets.h) and
four with --ddp-bucket-mb 0.25 (the Gloo case), as rank 0 says, so bucket order, overlap with backward and the flag
are exercised; the metrics report the hidden fraction of communication."""

import os

import trainer_harness as h

h.require_binaries(h.TRAINER, h.DTRAIN)
work = h.workdir()
shard = h.make_text_shard(work)
common = h.MODEL + ["--data", shard, "--seq-len", "64", "--steps", "6", "--lr", "1e-3", "--seed", "11",
                    "--threads", "1"]

single = os.path.join(work, "single.jsonl")
run = h.trainer(common + ["--batch-size", "4", "--metrics", single], work)
h.check(run.code == 0, "1 rank x B=4 exits 0")

CASES = (("2 ranks x B=2", 2, 1, "shm", []),
         ("2 ranks x 2 micro-steps x B=1", 1, 2, "gloo", ["--ddp-bucket-mb", "0.25"]))
for label, batch, accum, backend, buckets in CASES:
    path = os.path.join(work, f"ddp_{batch}_{accum}.jsonl")
    env = {"DTRAIN_COMM_BACKEND": "gloo" if backend == "gloo" else "auto"}
    run = h.launched(2, common + ["--batch-size", str(batch), "--grad-accum", str(accum), "--metrics", path] + buckets,
                     work, env=env)
    said = ("DDP: 4 gradient buckets over 1.67 MiB from its end, 1.00 MiB first, then 0.25 MiB each (--ddp-bucket-mb)"
            if buckets else "DDP: 2 gradient buckets over 1.67 MiB from its end, 1.00 MiB first, then 1.00 MiB each "
                            "(the default")
    h.check(said in run.out + run.err, f"{label}: rank 0 says '{said}'")
    h.check(run.code == 0, f"{label}: `dtrain run -n 2` exits 0")
    if run.code != 0 or not os.path.exists(single):
        continue
    steps = h.metrics(path)
    h.compare_steps(f"{label} vs 1 rank x B=4", steps, h.metrics(single), 1e-5)
    hidden = [m.get("comm_hidden") for m in steps]
    h.check(all(x is not None and x <= 1.0 for x in hidden), f"{label}: comm_hidden reported every step: {hidden}")
    h.check(f"comm {backend}" in run.out + run.err, f"{label}: the ranks talk over {backend}")
h.finish()
