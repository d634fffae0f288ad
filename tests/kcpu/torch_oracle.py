#!/usr/bin/python3
"""PyTorch oracle for the vram CPU kernels (run by tests/kcpu/test_kcpu_torch.c).

Usage: torch_oracle.py DIR

DIR/manifest.txt has one case per line: "<id> <op> <args...>". Inputs are raw little-endian
files DIR/<id>_<name>.f32 (float32) or .i32 (int32) written by the C test; this script writes
its results as DIR/<id>_<name>.out.f32. Every op is written the plain PyTorch way (nn.functional
and torch.optim), float32 on the CPU, so that it is an independent statement of the semantics.
"""
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F


def rd(d, cid, name, shape, dtype=np.float32):
    ext = "i32" if dtype == np.int32 else "f32"
    a = np.fromfile(os.path.join(d, "%s_%s.%s" % (cid, name, ext)), dtype=dtype)
    n = int(np.prod(shape))
    if a.size != n:
        raise SystemExit("%s_%s: %d values, expected %d" % (cid, name, a.size, n))
    return torch.from_numpy(a.reshape(shape).copy())


def wr(d, cid, name, t):
    t.detach().to(torch.float32).contiguous().numpy().tofile(
        os.path.join(d, "%s_%s.out.f32" % (cid, name)))


def leaf(t):
    return t.clone().requires_grad_(True)


def op_attention(d, cid, B, T, C, NH):
    hs = C // NH
    qkv = leaf(rd(d, cid, "qkv", (B, T, 3 * C)))
    dout = rd(d, cid, "dout", (B, T, C))
    q, k, v = qkv.split(C, dim=2)
    q = q.view(B, T, NH, hs).transpose(1, 2)  # (B,NH,T,hs)
    k = k.view(B, T, NH, hs).transpose(1, 2)
    v = v.view(B, T, NH, hs).transpose(1, 2)
    att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))  # (B,NH,T,T)
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    att = att.masked_fill(~mask, float("-inf"))
    lse = torch.logsumexp(att, dim=-1)  # (B,NH,T)
    y = F.softmax(att, dim=-1) @ v
    y = y.transpose(1, 2).contiguous().view(B, T, C)
    y.backward(dout)
    wr(d, cid, "out", y)
    wr(d, cid, "lse", lse)
    wr(d, cid, "dqkv", qkv.grad)


def op_layernorm(d, cid, N, C):
    x = leaf(rd(d, cid, "inp", (N, C)))
    w = leaf(rd(d, cid, "w", (C,)))
    b = leaf(rd(d, cid, "b", (C,)))
    dout = rd(d, cid, "dout", (N, C))
    y = F.layer_norm(x, (C,), w, b, eps=1e-5)
    y.backward(dout)
    with torch.no_grad():
        mean = x.mean(dim=-1)
        rstd = torch.rsqrt(x.var(dim=-1, unbiased=False) + 1e-5)
    wr(d, cid, "out", y)
    wr(d, cid, "mean", mean)
    wr(d, cid, "rstd", rstd)
    wr(d, cid, "dinp", x.grad)
    wr(d, cid, "dw", w.grad)
    wr(d, cid, "db", b.grad)


def op_gelu(d, cid, n):
    x = leaf(rd(d, cid, "x", (n,)))
    dout = rd(d, cid, "dout", (n,))
    y = F.gelu(x, approximate="tanh")
    y.backward(dout)
    wr(d, cid, "out", y)
    wr(d, cid, "dx", x.grad)


def op_matmul(d, cid, N, C, OC):
    x = leaf(rd(d, cid, "inp", (N, C)))
    w = leaf(rd(d, cid, "w", (OC, C)))
    b = leaf(rd(d, cid, "bias", (OC,)))
    dout = rd(d, cid, "dout", (N, OC))
    y = F.linear(x, w, b)
    y.backward(dout)
    wr(d, cid, "out", y)
    wr(d, cid, "dinp", x.grad)
    wr(d, cid, "dw", w.grad)
    wr(d, cid, "dbias", b.grad)


def op_classifier(d, cid, N, C, V, scale):
    x = leaf(rd(d, cid, "x", (N, C)))
    wte = leaf(rd(d, cid, "wte", (V, C)))
    tg = rd(d, cid, "targets", (N,), np.int32).long()
    logits = x @ wte.t()  # (N,V)
    losses = F.cross_entropy(logits, tg, reduction="none", ignore_index=-1)  # (N)
    (losses.sum() * scale).backward()
    wr(d, cid, "losses", losses)
    wr(d, cid, "dx", x.grad)
    wr(d, cid, "dwte", wte.grad)


def op_softmax_xent(d, cid, N, V, scale):
    z = leaf(rd(d, cid, "logits", (N, V)))
    dl = rd(d, cid, "dlosses", (N,))
    tg = rd(d, cid, "targets", (N,), np.int32).long()
    losses = F.cross_entropy(z, tg, reduction="none", ignore_index=-1)
    (losses * dl * scale).sum().backward()
    wr(d, cid, "losses", losses)
    wr(d, cid, "probs", F.softmax(z, dim=-1))
    wr(d, cid, "dlogits", z.grad)


def op_embedding(d, cid, B, T, C, V, maxT):
    tok = rd(d, cid, "tok", (B, T), np.int32).long()
    wte = leaf(rd(d, cid, "wte", (V, C)))
    wpe = leaf(rd(d, cid, "wpe", (maxT, C)))
    dout = rd(d, cid, "dout", (B, T, C))
    y = F.embedding(tok, wte) + wpe[:T].unsqueeze(0)
    y.backward(dout)
    wr(d, cid, "out", y)
    wr(d, cid, "dwte", wte.grad)
    wr(d, cid, "dwpe", wpe.grad)


def op_optim(d, cid, kind, n, steps, lr, wd, a, b, c, nesterov, grad_scale):
    """kind: sgd (a = momentum, b = dampening), adam / adamw (a, b = betas, c = eps)."""
    p = torch.nn.Parameter(rd(d, cid, "param", (n,)))
    grads = rd(d, cid, "grads", (steps, n))
    if kind == "sgd":
        opt = torch.optim.SGD([p], lr=lr, momentum=a, dampening=b, weight_decay=wd,
                              nesterov=bool(nesterov))
    elif kind == "adam":
        opt = torch.optim.Adam([p], lr=lr, betas=(a, b), eps=c, weight_decay=wd)
    elif kind == "adamw":
        opt = torch.optim.AdamW([p], lr=lr, betas=(a, b), eps=c, weight_decay=wd)
    else:
        raise SystemExit("unknown optimizer " + kind)
    for s in range(steps):
        p.grad = grads[s].clone() * grad_scale  # float32 product, as the kernel's grad * grad_scale
        opt.step()
    wr(d, cid, "param", p)
    st = opt.state[p]
    if kind == "sgd" and a != 0.0:
        wr(d, cid, "mom", st["momentum_buffer"])
    if kind in ("adam", "adamw"):
        wr(d, cid, "m", st["exp_avg"])
        wr(d, cid, "v", st["exp_avg_sq"])


OPS = {
    "attention": (op_attention, [int] * 4),
    "layernorm": (op_layernorm, [int] * 2),
    "gelu": (op_gelu, [int]),
    "matmul": (op_matmul, [int] * 3),
    "classifier": (op_classifier, [int] * 3 + [float]),
    "softmax_xent": (op_softmax_xent, [int] * 2 + [float]),
    "embedding": (op_embedding, [int] * 5),
    "optim": (op_optim, [str, int, int, float, float, float, float, float, int, float]),
}


def main():
    d = sys.argv[1]
    with open(os.path.join(d, "manifest.txt")) as f:
        for line in f:
            parts = line.split()
            if not parts:
                continue
            cid, op, args = parts[0], parts[1], parts[2:]
            fn, types = OPS[op]
            if len(args) != len(types):
                raise SystemExit("case %s (%s): %d args, expected %d" % (cid, op, len(args), len(types)))
            fn(d, cid, *[t(x) for t, x in zip(types, args)])


if __name__ == "__main__":
    main()
