#!/usr/bin/python3
"""PyTorch oracle for tests/train/test_train_torch.c: a nanoGPT-equivalent GPT-2
loaded from the llm.c file the C test wrote (through tools/llmc_ckpt.py), one
forward/backward, and two AdamW steps with global-norm clipping, as nanoGPT's
train.py does them (decay on parameters of 2+ dimensions only).

Usage: train_oracle.py DIR TOOL  (DIR holds model.bin, tok0/tgt0/tok1/tgt1.i32, config.json)
Writes DIR/torch_loss.f32 [loss0, loss1], torch_norm.f32 [norm0, norm1],
torch_grads.f32, torch_params1.f32, torch_params2.f32 (llm.c order, float32)."""
import importlib.util
import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

d, tool = sys.argv[1], sys.argv[2]
spec = importlib.util.spec_from_file_location("llmc_ckpt", tool)
llmc = importlib.util.module_from_spec(spec)
spec.loader.exec_module(llmc)
cfg_run = json.load(open(os.path.join(d, "config.json")))
torch.manual_seed(0)
torch.set_num_threads(1)


class Block(nn.Module):
    def __init__(self, C, NH):
        super().__init__()
        self.NH = NH
        self.ln_1 = nn.LayerNorm(C)
        self.attn = nn.Module()
        self.attn.c_attn = nn.Linear(C, 3 * C)
        self.attn.c_proj = nn.Linear(C, C)
        self.ln_2 = nn.LayerNorm(C)
        self.mlp = nn.Module()
        self.mlp.c_fc = nn.Linear(C, 4 * C)
        self.mlp.c_proj = nn.Linear(4 * C, C)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.attn.c_attn(self.ln_1(x)).split(C, dim=2)
        hs = C // self.NH
        q, k, v = (t.view(B, T, self.NH, hs).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        x = x + self.attn.c_proj(y)
        return x + self.mlp.c_proj(F.gelu(self.mlp.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, L, C, NH, V, maxT):
        super().__init__()
        self.transformer = nn.Module()
        self.transformer.wte = nn.Embedding(V, C)
        self.transformer.wpe = nn.Embedding(maxT, C)
        self.transformer.h = nn.ModuleList([Block(C, NH) for _ in range(L)])
        self.transformer.ln_f = nn.LayerNorm(C)

    def forward(self, idx, targets):
        t = self.transformer
        x = t.wte(idx) + t.wpe(torch.arange(idx.shape[1]))
        for b in t.h:
            x = b(x)
        logits = t.ln_f(x) @ t.wte.weight.t()
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


cfg, tensors = llmc.read_llmc(os.path.join(d, "model.bin"))
assert cfg["V"] == cfg["Vp"], "the oracle model has no vocabulary padding"
sd = llmc.llmc_to_state_dict(cfg, tensors)
sd.pop("lm_head.weight")
model = GPT(cfg["L"], cfg["C"], cfg["NH"], cfg["V"], cfg["maxT"])
model.load_state_dict(sd)
B, T = cfg_run["B"], cfg_run["T"]


def batch(k):
    tok = np.fromfile(os.path.join(d, f"tok{k}.i32"), dtype="<i4").reshape(B, T)
    tgt = np.fromfile(os.path.join(d, f"tgt{k}.i32"), dtype="<i4").reshape(B, T)
    return torch.from_numpy(tok.astype(np.int64)), torch.from_numpy(tgt.astype(np.int64))


def flat(named):
    """nanoGPT-named tensors -> one float32 array in llm.c order."""
    _, t = llmc.state_dict_to_llmc(named, n_head=cfg["NH"], padded_vocab=cfg["Vp"])
    return np.concatenate([t[n].detach().numpy().astype("<f4").ravel() for n in llmc.TENSORS])


decay = [p for p in model.parameters() if p.dim() >= 2]
no_decay = [p for p in model.parameters() if p.dim() < 2]
opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg_run["wd"]},
                         {"params": no_decay, "weight_decay": 0.0}],
                        lr=cfg_run["lr"], betas=(cfg_run["beta1"], cfg_run["beta2"]), eps=cfg_run["eps"])
losses, norms = [], []
for k in range(2):
    opt.zero_grad(set_to_none=True)
    loss = model(*batch(k))
    loss.backward()
    losses.append(loss.item())
    if k == 0:
        flat({n: p.grad for n, p in model.named_parameters()}).tofile(os.path.join(d, "torch_grads.f32"))
    norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), cfg_run["clip"])))
    opt.step()
    flat(dict(model.named_parameters())).tofile(os.path.join(d, f"torch_params{k + 1}.f32"))
np.array(losses, dtype="<f4").tofile(os.path.join(d, "torch_loss.f32"))
np.array(norms, dtype="<f4").tofile(os.path.join(d, "torch_norm.f32"))
print("oracle ok: losses", losses, "norms", norms)
