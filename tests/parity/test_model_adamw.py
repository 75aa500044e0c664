"""Ten optimizer steps (AdamW with weight decay on 2-D weights, global-norm gradient clipping, linear warmup then
cosine schedule) from the same weights on the same batches: each step's loss agrees with PyTorch within 1e-4
relative, and so do the gradient norms and learning rates; the final weights agree within 1e-3."""

import torch

import parity_common as pc

STEPS = 10
LR, BETA1, BETA2, EPS, WD, CLIP, WARMUP = 3e-3, 0.9, 0.95, 1e-8, 0.1, 1.0, 3


def main():
    model = pc.make_model(seed=77)
    batches = pc.make_batches(3, 2, 72, seed=5)
    cpp = pc.run_dump(model, batches, "--steps", STEPS, "--lr", LR, "--beta1", BETA1, "--beta2", BETA2,
                      "--eps", EPS, "--weight-decay", WD, "--grad-clip", CLIP, "--warmup-steps", WARMUP,
                      "--lr-schedule", "cosine")

    opt = pc.ref.make_optimizer(model, LR, BETA1, BETA2, EPS, WD)
    losses, norms, lrs = [], [], []
    for s in range(STEPS):
        lr = pc.ref.lr_at(s, LR, WARMUP, "cosine", STEPS)
        loss, norm = pc.ref.train_step(model, opt, [batches[s % len(batches)]], lr, CLIP)
        losses.append(loss)
        norms.append(norm)
        lrs.append(lr)

    c = pc.Checker()
    for s in range(STEPS):
        c.check(f"step {s} loss {losses[s]:.6f}", [cpp["losses"][s]], [losses[s]], 1e-4)
    c.check("gradient norms", cpp["norms"], norms, 1e-4)
    c.check("learning rates", cpp["lrs"], lrs, 1e-6)
    c.require("the loss went down (the steps did something)", losses[-1] < losses[0] - 0.05)
    c.require("clipping was active on some step", max(norms) > CLIP)
    with torch.no_grad():
        final = pc.ref.flat(model)
    # Final weights, looser: Adam divides by sqrt(v), so an element whose gradient is close to zero moves by up to
    # lr per step whatever the size of its gradient noise. The key third of qkvb is that case exactly: adding b_k
    # shifts every score of a row by the same q . b_k, which the softmax ignores, so its true gradient is 0 and
    # only rounding noise drives it; it is left out.
    C = pc.CONFIG.channels
    for (label, expected), (_, actual) in zip(pc.split_tensors(model, final), pc.split_tensors(model, cpp["params"])):
        if label.startswith("qkvb"):
            keep = [i for i in range(3 * C) if not C <= i < 2 * C]
            expected, actual = expected[keep], actual[keep]
        c.check(f"final {label}", actual, expected, 1e-3)
    c.finish()


if __name__ == "__main__":
    main()
