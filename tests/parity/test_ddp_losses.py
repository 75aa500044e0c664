"""DDP through the real launcher: 2 ranks x batch B/2 train exactly like 1 rank x batch B (per-step loss within 1e-5
relative, gradient norms too), over the default communicator (auto: both ranks on this host, so shared memory), and
over Gloo with 2 micro-steps per rank (gradients of the first micro-step stay local: no_sync). The model has two DDP
buckets, so bucket order and overlap with backward are exercised; the metrics report the hidden fraction of
communication."""

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

for label, batch, accum, backend in (("2 ranks x B=2", 2, 1, "shm"), ("2 ranks x 2 micro-steps x B=1", 1, 2, "gloo")):
    path = os.path.join(work, f"ddp_{batch}_{accum}.jsonl")
    env = {"DTRAIN_COMM_BACKEND": "gloo" if backend == "gloo" else "auto"}
    run = h.launched(2, common + ["--batch-size", str(batch), "--grad-accum", str(accum), "--metrics", path], work,
                     env=env)
    h.check(run.code == 0, f"{label}: `dtrain run -n 2` exits 0")
    if run.code != 0 or not os.path.exists(single):
        continue
    steps = h.metrics(path)
    h.compare_steps(f"{label} vs 1 rank x B=4", steps, h.metrics(single), 1e-5)
    hidden = [m.get("comm_hidden") for m in steps]
    h.check(all(x is not None and x <= 1.0 for x in hidden), f"{label}: comm_hidden reported every step: {hidden}")
    h.check(f"comm {backend}" in run.out + run.err, f"{label}: the ranks talk over {backend}")
h.finish()
