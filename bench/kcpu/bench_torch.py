#!/usr/bin/python3
"""PyTorch peer of bench_kcpu.c: same ops, shapes and timing rule, "<op> <milliseconds>" lines.
Attention is what a PyTorch user runs: scaled_dot_product_attention where torch has it (>= 2.0),
else the explicit masked softmax (which stores the (T,T) matrix). Usage: bench_torch.py B T [REPS]"""
import math
import sys
import time

import torch
import torch.nn.functional as F

B = int(sys.argv[1]) if len(sys.argv) > 1 else 4
T = int(sys.argv[2]) if len(sys.argv) > 2 else 1024
REPS = int(sys.argv[3]) if len(sys.argv) > 3 else 3
C, NH, V = 768, 12, 50257
N = B * T
torch.manual_seed(0)


def timeit(name, fn, reps=REPS):
    best = 1e30
    for r in range(reps + 1):
        t0 = time.perf_counter()
        fn()
        t = (time.perf_counter() - t0) * 1e3
        if r > 0:
            best = min(best, t)
    print("%s %.3f" % (name, best), flush=True)


hs = C // NH
qkv = torch.rand(B, T, 3 * C) * 2 - 1
qkv.requires_grad_(True)
mask = torch.tril(torch.ones(T, T, dtype=torch.bool))


def attention():
    q, k, v = qkv.split(C, dim=2)
    q = q.view(B, T, NH, hs).transpose(1, 2)
    k = k.view(B, T, NH, hs).transpose(1, 2)
    v = v.view(B, T, NH, hs).transpose(1, 2)
    if hasattr(F, "scaled_dot_product_attention"):
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    else:
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        att = F.softmax(att.masked_fill(~mask, float("-inf")), dim=-1)
        y = att @ v
    return y.transpose(1, 2).contiguous().view(B, T, C)


dout = torch.rand(B, T, C)
state = {}
timeit("attention_fwd", lambda: state.__setitem__("y", attention()))
def att_bwd():
    y = attention()  # autograd needs a fresh graph each time; its forward is timed apart
    t0 = time.perf_counter()
    y.backward(dout)
    state["t"] = (time.perf_counter() - t0) * 1e3
best = 1e30
for r in range(REPS + 1):
    qkv.grad = None
    att_bwd()
    if r > 0:
        best = min(best, state["t"])
print("attention_bwd %.3f" % best, flush=True)


def fwd_bwd(name, make, inputs, g):
    """Times forward and backward separately (backward from a fresh forward each time)."""
    timeit(name + "_fwd", lambda: make())
    best = 1e30
    for r in range(REPS + 1):
        for t in inputs:
            t.grad = None
        y = make()
        t0 = time.perf_counter()
        y.backward(g)
        t = (time.perf_counter() - t0) * 1e3
        if r > 0:
            best = min(best, t)
    print("%s_bwd %.3f" % (name, best), flush=True)


x = (torch.rand(N, C) * 4 - 2).requires_grad_(True)
w = (torch.rand(C) + 0.5).requires_grad_(True)
b = (torch.rand(C) * 2 - 1).requires_grad_(True)
fwd_bwd("layernorm", lambda: F.layer_norm(x, (C,), w, b, eps=1e-5), [x, w, b], torch.rand(N, C))

h = (torch.rand(N * 4 * C) * 6 - 3).requires_grad_(True)
fwd_bwd("gelu", lambda: F.gelu(h, approximate="tanh"), [h], torch.rand(N * 4 * C))

W = ((torch.rand(4 * C, C) - 0.5) * 0.1).requires_grad_(True)
bias = torch.rand(4 * C).requires_grad_(True)
fwd_bwd("matmul", lambda: F.linear(x, W, bias), [x, W, bias], torch.rand(N, 4 * C))

wte = ((torch.rand(V, C) - 0.5) * 0.1).requires_grad_(True)
tg = torch.randint(0, V, (N,))
def classifier():
    x.grad = None
    wte.grad = None
    F.cross_entropy(x @ wte.t(), tg).backward()
timeit("classifier_fwd_bwd", classifier, reps=min(REPS, 2))

p = torch.nn.Parameter(torch.rand(124439808) * 2 - 1)
p.grad = torch.rand(124439808) * 2 - 1
opt = torch.optim.AdamW([p], lr=1e-4, weight_decay=0.1)
timeit("adamw_124M", opt.step)
