#!/usr/bin/python3
"""PyTorch reference of dtrain-trainer's GPT-2, used by the parity tests and the benchmark.

Model (llm.c / nanoGPT GPT-2):
  x = wte[tokens] + wpe[positions]                          wte (Vp, C), wpe (maxT, C)
  per block: x = x + attn(ln_1(x)); x = x + mlp(ln_2(x))    LayerNorm eps 1e-5, pre-norm
    attn: qkv = x @ qkvw^T + qkvb (3C); heads of size C/NH; causal softmax(q k^T / sqrt(hs)) v; @ attprojw^T + b
    mlp:  gelu_tanh(x @ fcw^T + fcb) @ fcprojw^T + fcprojb
  logits = ln_f(x) @ wte^T                                  (B, T, Vp): the output head is tied to wte
  loss = mean over B*T of cross_entropy(logits[..., :V], targets)
Like llm.c, logits exist for all Vp columns but the softmax and the loss use the first V only; padded wte rows get
no gradient (only weight decay). Weights are initialised as nanoGPT (normal(0, 0.02); attprojw and fcprojw with
std 0.02 / sqrt(2 L); biases 0; LayerNorm weight 1) with padded wte rows 0; torch's generator, so a C++ model
initialised from the same seed differs: parity starts both from one checkpoint.

Files (llm.c formats):
  checkpoint: 256 int32 header (magic 20240326, version 3, maxT, V, L, NH, C, Vp), then fp32 tensors in the order
    wte, wpe, ln1w[L], ln1b[L], qkvw[L], qkvb[L], attprojw[L], attprojb[L], ln2w[L], ln2b[L], fcw[L], fcb[L],
    fcprojw[L], fcprojb[L], lnfw, lnfb  (X[L]: every layer's X, layer 0 first)
  token shard: 256 int32 header (magic 20240520, version 1, token count), then uint16 tokens

Data order (trainer/data/loader.h): shards matching --data in sorted order; with B, T, world W, K micro-steps, one
optimizer step takes S = B*T*W*K tokens; a shard of n tokens holds floor((n - 1) / S) steps (shards holding none
are skipped); steps go through the shards in order and wrap. Micro-step m of rank r in step s (index j within its
shard) reads B*T + 1 tokens at shard offset ((j*K + m)*W + r)*B*T: inputs the first B*T, targets shifted by one.

Optimizer step s (0-based; AdamW's t = s + 1):
  loss  = mean over the K micro-batches of their mean cross-entropy (grads: sum of each micro-batch's grad / K)
  grad_norm = torch.nn.utils.clip_grad_norm_(params, grad_clip) (grad_clip 0: the norm only, no clipping)
  lr    = schedule(s):  s < W: lr * (s + 1) / W;  constant: lr;
          cosine: min + 0.5 (1 + cos(pi r)) (lr - min), r = min(1, (s - W) / max(1, N - W)), min = lr * min_lr_ratio
  torch.optim.AdamW(betas, eps), weight_decay on the 2-D tensors (wte, wpe, qkvw, attprojw, fcw, fcprojw) only.
The metrics file holds one JSON object per step, as dtrain-trainer's: {"step": s + 1 (steps done), "loss", "lr",
"grad_norm", "tokens_per_s", "step_ms"}.

CLI:
  gpt_reference.py init  --out MODEL.bin (--model tiny | --layers --channels --heads --max-seq-len --vocab) --seed
  gpt_reference.py train --init-from MODEL.bin --data GLOB -B 4 -T 64 --steps 10 [--lr ... --metrics out.jsonl]
  gpt_reference.py bench --threads 1 [--layers 4 --channels 256 --heads 4 --max-seq-len 256 --vocab 256 -B 8 -T 256]

The model is gpt_reference_model.py's, the files and the data order gpt_reference_files.py's; this file holds the
optimizer step and the CLI, and gives the names of all three (ref.Gpt, ref.read_checkpoint, ...) to what imports it.
"""

import argparse
import json
import math
import sys
import time

import torch

# The reference's names, as the parity tests, mixed_reference.py and the benchmarks use them (ref.X).
from gpt_reference_model import DECAY, LAYER_TENSORS, Gpt, GptConfig, tensor_shapes  # noqa: F401
from gpt_reference_files import (CHECKPOINT_MAGIC, CHECKPOINT_VERSION, HEADER_INTS, SHARD_MAGIC,  # noqa: F401
                                 SHARD_VERSION, DataLoader, flat, load_flat, read_checkpoint, read_shard,
                                 write_checkpoint, write_shard)


def lr_at(step, lr, warmup, schedule, total, min_lr_ratio=0.0):
    if step < warmup:
        return lr * (step + 1) / warmup
    if schedule == "constant":
        return lr
    ratio = min(1.0, (step - warmup) / max(1, total - warmup))
    min_lr = lr * min_lr_ratio
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (lr - min_lr)


def make_optimizer(model, lr, beta1, beta2, eps, weight_decay):
    decay, no_decay = model.decay_groups()
    return torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}],
                             lr=lr, betas=(beta1, beta2), eps=eps)


def train_step(model, optimizer, batches, lr, grad_clip):
    """One optimizer step over micro-batches [(inputs, targets)]; returns (mean loss, grad norm before clipping)."""
    optimizer.zero_grad(set_to_none=False)
    K = len(batches)
    total = 0.0
    for inputs, targets in batches:
        _, loss = model(inputs, targets)
        (loss / K).backward()
        total += loss.item()
    params = [p for _, _, p in model.named_tensors()]
    norm = torch.nn.utils.clip_grad_norm_(params, grad_clip if grad_clip > 0 else float("inf")).item()
    for group in optimizer.param_groups:
        group["lr"] = lr
    optimizer.step()
    return total / K, norm


def config_from_args(args):
    if args.model:
        return GptConfig.preset(args.model)
    vp = GptConfig.pad_vocab(args.vocab)
    return GptConfig(args.max_seq_len, args.vocab, vp, args.layers, args.heads, args.channels)


def add_model_args(p):
    p.add_argument("--model", help="preset: tiny | gpt2-124m")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--channels", type=int, default=256)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--max-seq-len", type=int, default=256)
    p.add_argument("--vocab", type=int, default=256)


def cmd_init(args):
    torch.manual_seed(args.seed)
    model = Gpt(config_from_args(args))
    model.init_weights(args.seed)
    write_checkpoint(model, args.out)


def cmd_train(args):
    torch.set_num_threads(args.threads)
    model = read_checkpoint(args.init_from)
    loader = DataLoader(args.data, args.batch_size, args.seq_len, args.rank, args.world_size, args.grad_accum)
    opt = make_optimizer(model, args.lr, args.beta1, args.beta2, args.eps, args.weight_decay)
    out = open(args.metrics, "w") if args.metrics else None
    for step in range(args.steps):
        t0 = time.perf_counter()
        lr = lr_at(step, args.lr, args.warmup_steps, args.lr_schedule, args.steps, args.min_lr_ratio)
        batches = [loader.batch(step, m) for m in range(args.grad_accum)]
        loss, norm = train_step(model, opt, batches, lr, args.grad_clip)
        ms = (time.perf_counter() - t0) * 1000.0
        tokens = args.batch_size * args.seq_len * args.grad_accum * args.world_size
        line = {"step": step + 1, "loss": loss, "lr": lr, "grad_norm": norm,
                "tokens_per_s": tokens / (ms / 1000.0), "step_ms": ms}
        if out:
            out.write(json.dumps(line) + "\n")
            out.flush()
        print(f"step {step + 1}/{args.steps} loss {loss:.6f} lr {lr:.3e} norm {norm:.4f} {ms:.1f} ms")
    if args.save:
        write_checkpoint(model, args.save)


def cmd_bench(args):
    """Times PyTorch eager training steps (forward, backward, clip, AdamW) on random tokens; prints one JSON line."""
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = Gpt(config_from_args(args))
    model.init_weights(0)
    opt = make_optimizer(model, 6e-4, 0.9, 0.95, 1e-8, 0.1)
    B, T = args.batch_size, args.seq_len
    gen = torch.Generator().manual_seed(1)
    data = torch.randint(0, model.cfg.vocab_size, (B, T + 1), generator=gen)
    batch = [(data[:, :-1], data[:, 1:])]
    for _ in range(args.warmup):
        train_step(model, opt, batch, 6e-4, 1.0)
    # Wall time per step, and the process's CPU time per step (all threads), which a busy machine distorts less.
    times, cpu = [], []
    for _ in range(args.steps):
        t0, c0 = time.perf_counter(), time.process_time()
        train_step(model, opt, batch, 6e-4, 1.0)
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    med = sorted(times)[len(times) // 2]
    print(json.dumps({"impl": "pytorch-eager", "torch": torch.__version__, "threads": args.threads,
                      "B": B, "T": T, "step_ms_median": med * 1000.0, "tokens_per_s": B * T / med,
                      "cpu_ms_median": sorted(cpu)[len(cpu) // 2] * 1000.0,
                      "step_ms": [t * 1000.0 for t in times]}))


def add_train_args(p):
    """The training flags dtrain-trainer and every reference share (mixed_reference.py adds its own)."""
    p.add_argument("--init-from", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("-B", "--batch-size", type=int, default=4)
    p.add_argument("-T", "--seq-len", type=int, default=64)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--grad-accum", type=int, default=1)
    p.add_argument("--rank", type=int, default=0, help="read the data of this rank (one process only)")
    p.add_argument("--world-size", type=int, default=1)
    p.add_argument("--lr", type=float, default=6e-4)
    p.add_argument("--beta1", type=float, default=0.9)
    p.add_argument("--beta2", type=float, default=0.95)
    p.add_argument("--eps", type=float, default=1e-8)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--grad-clip", type=float, default=1.0)
    p.add_argument("--warmup-steps", type=int, default=0)
    p.add_argument("--lr-schedule", choices=["constant", "cosine"], default="constant")
    p.add_argument("--min-lr-ratio", type=float, default=0.0)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)

    p = sub.add_parser("init", help="write a freshly initialised checkpoint")
    add_model_args(p)
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--out", required=True)
    p.set_defaults(func=cmd_init)

    p = sub.add_parser("train", help="train from a checkpoint, as dtrain-trainer does")
    add_train_args(p)
    p.add_argument("--metrics")
    p.add_argument("--save", help="write the final weights here")
    p.add_argument("--threads", type=int, default=1)
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("bench", help="PyTorch eager tokens/s on one training step")
    add_model_args(p)
    p.add_argument("-B", "--batch-size", type=int, default=8)
    p.add_argument("-T", "--seq-len", type=int, default=256)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--steps", type=int, default=5)
    p.set_defaults(func=cmd_bench)

    args = parser.parse_args(argv)
    args.func(args)


if __name__ == "__main__":
    sys.exit(main())
