#!/usr/bin/python3
"""PyTorch reference of dtrain-trainer's mixed precision (--precision bf16 | fp16), used by the parity tests.

The model is gpt_reference.py's with every matrix product done as dtrain-trainer's Backend::matmul_forward_half
does it: the input activation and the weight are rounded to the 16-bit type (round to nearest even, as
Tensor.to(torch.bfloat16 / torch.float16)), multiplied and accumulated in fp32, and the fp32 bias added. Backward
rounds the incoming gradient to the 16-bit type for both products (dinp = round(dout) @ round(W),
dW += round(dout)^T @ round(x)) and sums the fp32 gradient for the bias. Everything else (embeddings, LayerNorm,
softmax, GELU, residual adds, the loss) runs in fp32 on fp32 master parameters, as does AdamW, which updates the
master weights; the rounded weights are taken from them at every forward, which equals dtrain-trainer's working copy
refreshed after each step.

fp16 uses dynamic loss scaling with torch.cuda.amp.GradScaler's rule (init --loss-scale-init, growth interval
--loss-scale-growth-interval, factors 2 and 0.5): the objective is multiplied by the scale before backward, the
gradients are multiplied by float(1 / double(scale)) after it, and a step with an inf or NaN gradient is skipped
(AdamW's step count does not advance; the learning-rate schedule does). Debian's CPU-only torch disables GradScaler
itself, so the rule is written out here.

CLI (as gpt_reference.py train, plus):
  mixed_reference.py train --precision bf16|fp16 --init-from MODEL.bin --data GLOB -B 4 -T 64 --steps 10 ...
The metrics file has gpt_reference.py's keys, and with fp16 also "loss_scale" and "skipped".
"""

import json
import math
import sys
import time

import torch

import gpt_reference as ref

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


class RoundedLinear(torch.autograd.Function):
    """x (..., C) @ w (OC, C)^T + b with 16-bit inputs and fp32 accumulation (module docstring)."""

    @staticmethod
    def forward(ctx, x, weight, bias, dtype):
        xr = x.to(dtype).float()
        wr = weight.to(dtype).float()
        ctx.save_for_backward(xr, wr)
        ctx.dtype = dtype
        ctx.has_bias = bias is not None
        out = xr @ wr.t()
        return out + bias if bias is not None else out

    @staticmethod
    def backward(ctx, grad):
        xr, wr = ctx.saved_tensors
        gr = grad.to(ctx.dtype).float()
        dx = gr @ wr
        dw = gr.reshape(-1, gr.shape[-1]).t() @ xr.reshape(-1, xr.shape[-1])
        db = grad.reshape(-1, grad.shape[-1]).sum(0) if ctx.has_bias else None
        return dx, dw, db, None


def rounded_model(dtype):
    class RoundedGpt(ref.Gpt):
        def linear(self, x, weight, bias):
            return RoundedLinear.apply(x, weight, bias, dtype)

        def head(self, x):
            return RoundedLinear.apply(x, self.wte, None, dtype)

    return RoundedGpt


class Scaler:
    """GradScaler's dynamic loss scale (its defaults and update rule); disabled (scale 1, never skips) for bf16."""

    def __init__(self, enabled, init_scale, growth_interval):
        self.enabled = enabled
        self.scale = init_scale if enabled else 1.0
        self.growth_interval = growth_interval
        self.tracker = 0

    def unscale(self, params):
        """Multiplies every gradient by float32(1 / scale); returns whether any was inf or NaN."""
        if not self.enabled:
            return False
        inv = torch.tensor(1.0 / self.scale, dtype=torch.float64).float()
        found = False
        for p in params:
            found = found or not bool(torch.isfinite(p.grad).all())
            p.grad.mul_(inv)
        return found

    def update(self, found_inf):
        if not self.enabled:
            return
        if found_inf:
            self.scale *= 0.5
            self.tracker = 0
            return
        self.tracker += 1
        if self.tracker == self.growth_interval:
            if math.isfinite(self.scale * 2.0):
                self.scale *= 2.0
            self.tracker = 0


def train_step(model, optimizer, scaler, batches, lr, grad_clip):
    """As gpt_reference.train_step, with the loss scale; returns (loss, grad norm, skipped)."""
    optimizer.zero_grad(set_to_none=False)
    K = len(batches)
    total = 0.0
    for inputs, targets in batches:
        _, loss = model(inputs, targets)
        (loss * (scaler.scale / K)).backward()
        total += loss.item()
    params = [p for _, _, p in model.named_tensors()]
    found_inf = scaler.unscale(params)
    norm = torch.nn.utils.clip_grad_norm_(params, grad_clip if grad_clip > 0 else float("inf")).item()
    if not found_inf:
        for group in optimizer.param_groups:
            group["lr"] = lr
        optimizer.step()
    scaler.update(found_inf)
    return total / K, norm, found_inf


def cmd_train(args):
    torch.set_num_threads(args.threads)
    model = ref.read_checkpoint(args.init_from, rounded_model(DTYPES[args.precision]))
    loader = ref.DataLoader(args.data, args.batch_size, args.seq_len, args.rank, args.world_size, args.grad_accum)
    opt = ref.make_optimizer(model, args.lr, args.beta1, args.beta2, args.eps, args.weight_decay)
    scaler = Scaler(args.precision == "fp16", args.loss_scale_init, args.loss_scale_growth_interval)
    out = open(args.metrics, "w") if args.metrics else None
    for step in range(args.steps):
        t0 = time.perf_counter()
        lr = ref.lr_at(step, args.lr, args.warmup_steps, args.lr_schedule, args.steps, args.min_lr_ratio)
        batches = [loader.batch(step, m) for m in range(args.grad_accum)]
        scale = scaler.scale
        loss, norm, skipped = train_step(model, opt, scaler, batches, lr, args.grad_clip)
        ms = (time.perf_counter() - t0) * 1000.0
        line = {"step": step + 1, "loss": loss, "lr": lr, "grad_norm": norm, "step_ms": ms}
        if scaler.enabled:
            line.update(loss_scale=scale, skipped=skipped)
        if out:
            out.write(json.dumps(line) + "\n")
            out.flush()
        print(f"step {step + 1}/{args.steps} loss {loss:.6f} lr {lr:.3e} norm {norm:.4f} {ms:.1f} ms")


def main(argv=None):
    parser = ref.argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("train", help="train from a checkpoint, as dtrain-trainer --precision bf16|fp16 does")
    p.add_argument("--precision", choices=sorted(DTYPES), required=True)
    ref.add_train_args(p)
    p.add_argument("--loss-scale-init", type=float, default=65536.0)
    p.add_argument("--loss-scale-growth-interval", type=int, default=2000)
    p.add_argument("--metrics")
    p.add_argument("--threads", type=int, default=1)
    p.set_defaults(func=cmd_train)
    args = parser.parse_args(argv)
    args.func(args)


if __name__ == "__main__":
    sys.exit(main())
