"""The model of the PyTorch GPT-2 reference (gpt_reference.py, whose docstring gives the formulas): its shape
(GptConfig), its parameters in llm.c's checkpoint order (tensor_shapes, Gpt.named_tensors), nanoGPT's initialisation
and the forward pass with its loss.
"""

import dataclasses
import math

import torch
import torch.nn.functional as F

LAYER_TENSORS = ["ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
                 "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb"]
DECAY = {"wte", "wpe", "qkvw", "attprojw", "fcw", "fcprojw"}


@dataclasses.dataclass
class GptConfig:
    max_seq_len: int
    vocab_size: int
    padded_vocab_size: int
    num_layers: int
    num_heads: int
    channels: int

    @staticmethod
    def preset(name):
        presets = {
            "tiny": GptConfig(64, 256, 256, 2, 4, 64),
            "gpt2-124m": GptConfig(1024, 50257, 50304, 12, 12, 768),
        }
        if name not in presets:
            raise ValueError(f"unknown model preset {name!r}; known: {', '.join(presets)}")
        return presets[name]

    @staticmethod
    def pad_vocab(v):
        return (v + 127) // 128 * 128


def tensor_shapes(cfg):
    """(name, shape) of every parameter kind in llm.c's checkpoint order; per-layer shapes are for one layer."""
    C, L = cfg.channels, cfg.num_layers
    layer = {"ln1w": (C,), "ln1b": (C,), "qkvw": (3 * C, C), "qkvb": (3 * C,), "attprojw": (C, C),
             "attprojb": (C,), "ln2w": (C,), "ln2b": (C,), "fcw": (4 * C, C), "fcb": (4 * C,),
             "fcprojw": (C, 4 * C), "fcprojb": (C,)}
    out = [("wte", (cfg.padded_vocab_size, C)), ("wpe", (cfg.max_seq_len, C))]
    out += [(n, layer[n]) for n in LAYER_TENSORS]
    out += [("lnfw", (C,)), ("lnfb", (C,))]
    return out


class Gpt(torch.nn.Module):
    """Parameters are named as llm.c's tensors; per-layer ones are ParameterLists indexed by layer."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        P = torch.nn.Parameter
        for name, shape in tensor_shapes(cfg):
            if name in LAYER_TENSORS:
                setattr(self, name, torch.nn.ParameterList(
                    [P(torch.zeros(shape)) for _ in range(cfg.num_layers)]))
            else:
                setattr(self, name, P(torch.zeros(shape)))

    def named_tensors(self):
        """(name, layer or -1, parameter) in llm.c's checkpoint order."""
        for name, _ in tensor_shapes(self.cfg):
            p = getattr(self, name)
            if isinstance(p, torch.nn.ParameterList):
                for layer, q in enumerate(p):
                    yield name, layer, q
            else:
                yield name, -1, p

    @torch.no_grad()
    def init_weights(self, seed):
        g = torch.Generator().manual_seed(seed)
        cfg = self.cfg
        residual_std = 0.02 / math.sqrt(2 * cfg.num_layers)
        for name, _, p in self.named_tensors():
            if name in ("ln1w", "ln2w", "lnfw"):
                p.fill_(1.0)
            elif name in ("wte", "wpe", "qkvw", "fcw"):
                p.normal_(0.0, 0.02, generator=g)
            elif name in ("attprojw", "fcprojw"):
                p.normal_(0.0, residual_std, generator=g)
            else:
                p.zero_()
        self.wte[cfg.vocab_size:].zero_()

    def forward(self, inputs, targets=None):
        cfg = self.cfg
        B, T = inputs.shape
        C, NH = cfg.channels, cfg.num_heads
        hs = C // NH
        x = self.wte[inputs] + self.wpe[:T]
        mask = torch.ones(T, T, dtype=torch.bool).tril()
        for l in range(cfg.num_layers):
            h = F.layer_norm(x, (C,), self.ln1w[l], self.ln1b[l], 1e-5)
            qkv = self.linear(h, self.qkvw[l], self.qkvb[l])
            q, k, v = qkv.split(C, dim=2)
            q = q.view(B, T, NH, hs).transpose(1, 2)
            k = k.view(B, T, NH, hs).transpose(1, 2)
            v = v.view(B, T, NH, hs).transpose(1, 2)
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
            att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
            y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
            x = x + self.linear(y, self.attprojw[l], self.attprojb[l])
            h = F.layer_norm(x, (C,), self.ln2w[l], self.ln2b[l], 1e-5)
            h = F.gelu(self.linear(h, self.fcw[l], self.fcb[l]), approximate="tanh")
            x = x + self.linear(h, self.fcprojw[l], self.fcprojb[l])
        x = F.layer_norm(x, (C,), self.lnfw, self.lnfb, 1e-5)
        logits = self.head(x)
        if targets is None:
            return logits, None
        V = cfg.vocab_size
        loss = F.cross_entropy(logits[..., :V].reshape(-1, V), targets.reshape(-1).long())
        return logits, loss

    def linear(self, x, weight, bias):
        """The four matrix products of a block (mixed_reference.py rounds their inputs)."""
        return F.linear(x, weight, bias)

    def head(self, x):
        """The output head, tied to wte."""
        return x @ self.wte.t()

    def decay_groups(self):
        decay = [p for name, _, p in self.named_tensors() if name in DECAY]
        no_decay = [p for name, _, p in self.named_tensors() if name not in DECAY]
        return decay, no_decay

