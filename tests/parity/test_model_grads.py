"""Same weights and batch in the C++ model and in PyTorch: logits, loss and every gradient tensor agree within 1e-5
(relative error of a tensor: max |cpp - torch| / max |torch|, fp32 throughout). Gradient accumulation at model
level: two backward passes with loss_scale 1/2 on B/2 rows each give the gradient of one pass on B rows."""

import parity_common as pc

TOL = 1e-5


def main():
    model = pc.make_model()
    batches = pc.make_batches(1, 4, 80)
    inputs, targets = batches[0]
    logits, loss = model(inputs, targets)
    loss.backward()
    grads = pc.ref.flat(model, grads=True)

    c = pc.Checker()
    cpp = pc.run_dump(model, batches)
    c.check("loss", cpp["loss"], [loss.item()], TOL)
    c.check("logits (B, T, Vp)", cpp["logits"], logits.detach().numpy().ravel(), TOL)
    for (label, expected), (_, actual) in zip(pc.split_tensors(model, grads), pc.split_tensors(model, cpp["grads"])):
        c.check(f"grad {label}", actual, expected, TOL)
    # Sanity of the reference itself: every tensor gets a gradient (none of the comparisons is against zeros).
    c.require("every reference gradient tensor is non-zero",
              all(abs(g).max() > 0 for _, g in pc.split_tensors(model, grads)))

    accum = pc.run_dump(model, batches, "--accum", 2)
    c.check("grad accumulation 2 x B/2: loss", accum["loss"], [loss.item()], TOL)
    for (label, expected), (_, actual) in zip(pc.split_tensors(model, grads),
                                              pc.split_tensors(model, accum["grads"])):
        c.check(f"grad accumulation 2 x B/2: grad {label}", actual, expected, TOL)
    c.finish()


if __name__ == "__main__":
    main()
