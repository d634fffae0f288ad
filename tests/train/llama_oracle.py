"""Pure-PyTorch Llama reference for tests/train/test_train_llama_torch.c (no transformers).

Reads config.json (shapes, rope, tied, qkv_bias, optimizer), params0.f32 (the flat buffer in vram's
HF order: see src/graph/llama.c), tok{k}.i32 / tgt{k}.i32; writes torch_loss.f32, torch_norm.f32,
torch_grads.f32 (step 1) and torch_params{1,2}.f32 (after each AdamW step), all in the same layout.
The model follows HF LlamaForCausalLM: RMSNorm, rotate-half RoPE with Llama 3 frequency scaling,
GQA by repeating K/V, SwiGLU MLP."""
import json, math, os, sys

import numpy as np
import torch
import torch.nn.functional as F

d = sys.argv[1]
c = json.load(open(os.path.join(d, "config.json")))
L, C, NH, NKV, hd, I, V = c["L"], c["C"], c["NH"], c["NKV"], c["hd"], c["I"], c["V"]
B, T = c["B"], c["T"]

# the flat layout, in buffer order (name, shape)
names = [("embed_tokens", (V, C))]
for l in range(L):
    p = f"layers.{l}."
    names += [(p + "input_layernorm", (C,)), (p + "q", (NH * hd, C)), (p + "k", (NKV * hd, C)),
              (p + "v", (NKV * hd, C))]
    if c["qkv_bias"]:
        names += [(p + "qb", (NH * hd,)), (p + "kb", (NKV * hd,)), (p + "vb", (NKV * hd,))]
    names += [(p + "o", (C, NH * hd)), (p + "post_attention_layernorm", (C,)), (p + "gate", (I, C)),
              (p + "up", (I, C)), (p + "down", (C, I))]
names.append(("norm", (C,)))
if not c["tied"]:
    names.append(("lm_head", (V, C)))
flat0 = np.fromfile(os.path.join(d, "params0.f32"), dtype="<f4")
P, off = {}, 0
for n, s in names:
    k = int(np.prod(s))
    P[n] = torch.nn.Parameter(torch.from_numpy(flat0[off:off + k].copy()).reshape(s))
    off += k
assert off == flat0.size, (off, flat0.size)


def inv_freq():
    f = 1.0 / (c["theta"] ** (torch.arange(0, hd, 2, dtype=torch.int64).float() / hd))
    if not c["scaling"]:
        return f
    fac, lo, hi, old = c["factor"], c["low"], c["high"], c["orig"]
    wl = 2 * math.pi / f
    g = torch.where(wl > old / lo, f / fac, f)
    sm = (old / wl - lo) / (hi - lo)
    med = ~(wl < old / hi) * ~(wl > old / lo)
    return torch.where(med, (1 - sm) * g / fac + sm * g, g)


def rms(x, w):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + c["eps_rms"]))


def rot(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), -1)


fr = torch.outer(torch.arange(T).float(), inv_freq())
emb = torch.cat((fr, fr), -1)
cos, sin = emb.cos(), emb.sin()


def forward(tok, tgt):
    x = P["embed_tokens"][tok]
    for l in range(L):
        p = f"layers.{l}."
        h = rms(x, P[p + "input_layernorm"])
        bias = c["qkv_bias"]
        q = F.linear(h, P[p + "q"], P[p + "qb"] if bias else None).view(B, T, NH, hd).transpose(1, 2)
        k = F.linear(h, P[p + "k"], P[p + "kb"] if bias else None).view(B, T, NKV, hd).transpose(1, 2)
        v = F.linear(h, P[p + "v"], P[p + "vb"] if bias else None).view(B, T, NKV, hd).transpose(1, 2)
        q, k = q * cos + rot(q) * sin, k * cos + rot(k) * sin
        k, v = k.repeat_interleave(NH // NKV, 1), v.repeat_interleave(NH // NKV, 1)
        s = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
        s = s.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), float("-inf"))
        a = (s.softmax(-1) @ v).transpose(1, 2).reshape(B, T, NH * hd)
        x = x + F.linear(a, P[p + "o"])
        h = rms(x, P[p + "post_attention_layernorm"])
        x = x + F.linear(F.silu(F.linear(h, P[p + "gate"])) * F.linear(h, P[p + "up"]), P[p + "down"])
    x = rms(x, P["norm"])
    logits = x @ (P["embed_tokens"] if c["tied"] else P["lm_head"]).t()
    return F.cross_entropy(logits.reshape(-1, V), tgt.reshape(-1))


def batch(k):
    tok = np.fromfile(os.path.join(d, f"tok{k}.i32"), dtype="<i4").reshape(B, T)
    tgt = np.fromfile(os.path.join(d, f"tgt{k}.i32"), dtype="<i4").reshape(B, T)
    return torch.from_numpy(tok.astype(np.int64)), torch.from_numpy(tgt.astype(np.int64))


def flat(ts):
    return np.concatenate([t.detach().numpy().astype("<f4").ravel() for t in ts])


params = [P[n] for n, _ in names]
opt = torch.optim.AdamW([{"params": [p for p in params if p.dim() >= 2], "weight_decay": c["wd"]},
                         {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}],
                        lr=c["lr"], betas=(c["beta1"], c["beta2"]), eps=c["adam_eps"])
losses, norms = [], []
for k in range(2):
    opt.zero_grad(set_to_none=True)
    loss = forward(*batch(k))
    loss.backward()
    losses.append(loss.item())
    if k == 0:
        flat([p.grad for p in params]).tofile(os.path.join(d, "torch_grads.f32"))
    norms.append(float(torch.nn.utils.clip_grad_norm_(params, c["clip"])))
    opt.step()
    flat(params).tofile(os.path.join(d, f"torch_params{k + 1}.f32"))
np.array(losses, dtype="<f4").tofile(os.path.join(d, "torch_loss.f32"))
np.array(norms, dtype="<f4").tofile(os.path.join(d, "torch_norm.f32"))
print("llama oracle ok: losses", losses, "norms", norms)
