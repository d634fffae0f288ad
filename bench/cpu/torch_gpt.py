#!/usr/bin/python3
"""The PyTorch side of bench/cpu: trains the same GPT-2 shaped model as
`vram train` (nanoGPT's architecture: tied head, GELU tanh, no dropout, AdamW
with decay on 2-D parameters) on random tokens, and prints one JSON line per
step ({"step", "ms", "tokens"}) and a last line {"event": "summary", ...}.

Usage: torch_gpt.py L C NH V T B STEPS THREADS"""
import json
import math
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

def rss():
    """This process's resident set now, bytes."""
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


RSS_IMPORTED = rss()  # the interpreter and torch, before any model exists
L, C, NH, V, T, B, STEPS, THREADS = (int(a) for a in sys.argv[1:9])
torch.set_num_threads(THREADS)
torch.manual_seed(1337)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.c_attn, self.attn_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.c_fc, self.mlp_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)
        self.register_buffer("mask", torch.tril(torch.ones(T, T, dtype=torch.bool)))

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (z.view(b, t, NH, C // NH).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // NH))
        att = att.masked_fill(~self.mask[:t, :t], float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        x = x + self.attn_proj(y)
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
        self.h = nn.ModuleList([Block() for _ in range(L)])
        self.ln_f = nn.LayerNorm(C)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for blk in self.h:
            x = blk(x)
        logits = self.ln_f(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))


model = GPT()
decay = [p for p in model.parameters() if p.dim() >= 2]
rest = [p for p in model.parameters() if p.dim() < 2]
opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                        lr=1e-3, betas=(0.9, 0.95), eps=1e-8)
g = torch.Generator().manual_seed(1)
losses = []
for step in range(1, STEPS + 1):
    t0 = time.perf_counter()
    idx = torch.randint(0, V, (B, T + 1), generator=g)
    opt.zero_grad(set_to_none=True)
    loss = model(idx[:, :-1], idx[:, 1:])
    loss.backward()
    opt.step()
    ms = (time.perf_counter() - t0) * 1e3
    losses.append(loss.item())
    print(json.dumps({"event": "step", "step": step, "ms": ms, "tokens": B * T, "loss": losses[-1]}), flush=True)
print(json.dumps({"event": "summary", "params": sum(p.numel() for p in model.parameters()),
                  "torch": torch.__version__, "threads": torch.get_num_threads(),
                  "rss_imported": RSS_IMPORTED}), flush=True)
