#!/usr/bin/env python3
"""GPT-2 124M training steps in PyTorch, the peer of `vram train --device cuda`.

A nanoGPT-equivalent model (tied wte/lm_head, vocabulary padded to 50304, pre-LayerNorm blocks,
GELU tanh, F.scaled_dot_product_attention causal), GPT-2 init (normal 0.02, residual projections
0.02/sqrt(2L), biases 0), fused AdamW (betas 0.9/0.95, eps 1e-8, weight decay 0.1 on 2-D params),
global-norm clipping 1.0, bf16 autocast over fp32 weights. Random tokens (or --init: an llm.c
checkpoint for the same initial weights as vram).

Prints one JSON line: mode, the shape and parameter count, median step ms, tokens/s, every step's ms,
peak memory_reserved/allocated, the CUDA context, and the losses per step.

  python3 bench/gpu/torch_gpt2.py --mode eager|compile [--steps 30] [--batch 16] [--seq 1024]
                                  [--layers 12 --channels 768 --heads 12]

Same run as vram (bench/gpu/validate.sh): --init CKPT --tokens FILE (vram train --save-init / --dump-batches),
--warmup N --schedule cosine --min-lr-frac X (vram's lr schedule, lr_at(step) as src/train/schedule.c),
--vocab-loss real (softmax over the V real tokens, as vram and llm.c; nanoGPT's default is the padded Vp).

Largest batch in a memory cap: --find-max-batch --capacity-gib 16 caps PyTorch's allocator with
set_per_process_memory_fraction((cap - CUDA context) / total), doubles B from 1 until a step raises
torch.OutOfMemoryError, then bisects; each probe runs --probe-steps full steps. Prints one JSON line.
"""
import argparse
import json
import math
import statistics
import struct
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

L, C, NH, V, VP, MAXT = 12, 768, 12, 50257, 50304, 1024


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = nn.LayerNorm(C)
        self.c_attn = nn.Linear(C, 3 * C)
        self.attn_proj = nn.Linear(C, C)
        self.ln_2 = nn.LayerNorm(C)
        self.c_fc = nn.Linear(C, 4 * C)
        self.mlp_proj = nn.Linear(4 * C, C)

    def forward(self, x):
        B, T, _ = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q = q.view(B, T, NH, C // NH).transpose(1, 2)
        k = k.view(B, T, NH, C // NH).transpose(1, 2)
        v = v.view(B, T, NH, C // NH).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.attn_proj(y.transpose(1, 2).contiguous().view(B, T, C))
        x = x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))
        return x


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(VP, C)
        self.wpe = nn.Embedding(MAXT, C)
        self.h = nn.ModuleList([Block() for _ in range(L)])
        self.ln_f = nn.LayerNorm(C)
        self.real_vocab = False
        for n, p in self.named_parameters():
            if n.endswith("proj.weight"):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * L))
            elif p.dim() == 2:
                nn.init.normal_(p, 0.0, 0.02)
            elif n.endswith(".bias"):
                nn.init.zeros_(p)
        with torch.no_grad():
            self.wte.weight[V:].zero_()

    def forward(self, idx, targets):
        B, T = idx.shape
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for b in self.h:
            x = b(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)  # (B,T,Vp) as nanoGPT's padded vocabulary
        if self.real_vocab:  # softmax over the V real tokens only, as vram and llm.c
            return F.cross_entropy(logits[..., :V].reshape(-1, V).float(), targets.view(-1))
        return F.cross_entropy(logits.view(-1, VP), targets.view(-1))


def load_llmc(model, path):
    """llm.c checkpoint (fp32, params in llm.c's order) into the model (tools/llmc_ckpt.py's layout)."""
    with open(path, "rb") as f:
        hdr = struct.unpack("256i", f.read(1024))
        assert hdr[0] == 20240326, "not an llm.c checkpoint"
        data = torch.frombuffer(bytearray(f.read()), dtype=torch.float32)
    maxT, v, l, nh, c, vp = hdr[2], hdr[3], hdr[4], hdr[5], hdr[6], hdr[7]
    assert (maxT, v, l, nh, c, vp) == (MAXT, V, L, NH, C, VP), "checkpoint shape differs"
    off = 0

    def take(shape):
        nonlocal off
        n = math.prod(shape)
        t = data[off:off + n].view(shape)
        off += n
        return t

    hs = model.h
    with torch.no_grad():
        model.wte.weight.copy_(take((VP, C)))
        model.wpe.weight.copy_(take((MAXT, C)))
        for name, shape in [("ln_1.weight", (C,)), ("ln_1.bias", (C,)), ("c_attn.weight", (3 * C, C)),
                            ("c_attn.bias", (3 * C,)), ("attn_proj.weight", (C, C)), ("attn_proj.bias", (C,)),
                            ("ln_2.weight", (C,)), ("ln_2.bias", (C,)), ("c_fc.weight", (4 * C, C)),
                            ("c_fc.bias", (4 * C,)), ("mlp_proj.weight", (C, 4 * C)), ("mlp_proj.bias", (C,))]:
            for i in range(L):
                mod, attr = name.split(".")
                getattr(getattr(hs[i], mod), attr).copy_(take(shape))
        model.ln_f.weight.copy_(take((C,)))
        model.ln_f.bias.copy_(take((C,)))


def train_step(a, step_model, model, opt, x, y):
    """One step: forward (bf16 autocast unless --precision fp32), backward, clip 1.0, AdamW; the loss."""
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=a.precision == "bf16"):
        loss = step_model(x, y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.item()


def lr_at(a, step):
    """vram's schedule (src/train/schedule.c): linear warmup, then constant or cosine to min_lr_frac."""
    if step < a.warmup:
        return a.lr * (step + 1) / a.warmup
    if a.schedule == "constant":
        return a.lr
    lr_min = a.lr * a.min_lr_frac
    decay = a.steps - a.warmup
    if decay <= 0 or step >= a.steps:
        return lr_min
    ratio = (step - a.warmup) / decay
    return lr_min + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (a.lr - lr_min)


def find_max_batch(a, model, step_model, opt, context, total):
    """Largest B whose training steps run under set_per_process_memory_fraction((cap - context) / total)."""
    import gc
    cap = int(a.capacity_gib * (1 << 30))
    torch.cuda.set_per_process_memory_fraction(max(cap - context, 0) / total)
    T = a.seq
    g = torch.Generator().manual_seed(1)
    probes = []

    def fits(B):
        t0 = time.perf_counter()
        torch.cuda.reset_peak_memory_stats()
        ok = True
        try:
            for _ in range(a.probe_steps):
                xy = torch.randint(0, V, (B, T + 1), generator=g)
                x, y = xy[:, :T].to("cuda"), xy[:, 1:].to("cuda")
                if a.mode == "compile":
                    torch._dynamo.mark_dynamic(x, 0)
                    torch._dynamo.mark_dynamic(y, 0)
                train_step(a, step_model, model, opt, x, y)
            torch.cuda.synchronize()
        except torch.OutOfMemoryError:
            ok = False
        loss = x = y = xy = None
        opt.zero_grad(set_to_none=True)
        gc.collect()
        reserved = torch.cuda.max_memory_reserved()
        torch.cuda.empty_cache()
        probes.append({"B": B, "fits": ok, "max_reserved": reserved, "s": round(time.perf_counter() - t0, 1)})
        print(json.dumps(probes[-1]), file=sys.stderr, flush=True)
        return ok

    lo, hi = 0, None
    B = 1
    while B <= a.max_probe:
        if fits(B):
            lo = B
            B *= 2
        else:
            hi = B
            break
    while hi is not None and hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid
    best = [p for p in probes if p["B"] == lo and p["fits"]]
    print(json.dumps({
        "mode": a.mode, "torch": torch.__version__, "device": torch.cuda.get_device_name(), "T": T,
        "capacity": cap, "context": context, "fraction": max(cap - context, 0) / total, "max_batch": lo,
        "first_oom": hi, "max_reserved_at_max": best[-1]["max_reserved"] if best else 0, "probes": probes,
    }))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["eager", "compile"], default="eager")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--lr", type=float, default=6e-4)
    ap.add_argument("--init", default=None)
    ap.add_argument("--tokens", default=None, help="int32 file of (steps, B, T+1) tokens (same batches as vram)")
    ap.add_argument("--warmup", type=int, default=0)
    ap.add_argument("--schedule", choices=["constant", "cosine"], default="constant")
    ap.add_argument("--min-lr-frac", type=float, default=0.1)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--vocab-loss", choices=["padded", "real"], default="padded")
    ap.add_argument("--precision", choices=["bf16", "fp32"], default="bf16",
                    help="bf16 autocast (default), or fp32 throughout with TF32 off (as vram --precision fp32)")
    ap.add_argument("--profile", type=int, default=0, help="after the timed steps, N more under torch.profiler: "
                    "GPU time per kernel to stderr")
    ap.add_argument("--profile-shapes", action="store_true", help="with --profile: also the matrix products' GPU time "
                    "per step by operator and input shapes")
    ap.add_argument("--find-max-batch", action="store_true")
    ap.add_argument("--capacity-gib", type=float, default=16.0)
    ap.add_argument("--probe-steps", type=int, default=2)
    ap.add_argument("--max-probe", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=12, help="model shape (default GPT-2 124M; gpt2-xl: 48/1600/25)")
    ap.add_argument("--channels", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    a = ap.parse_args()
    global L, C, NH
    L, C, NH = a.layers, a.channels, a.heads
    torch.manual_seed(1337)
    torch.backends.cuda.matmul.allow_tf32 = a.precision == "bf16"
    torch.backends.cudnn.allow_tf32 = a.precision == "bf16"
    dev = "cuda"
    torch.zeros(1, device=dev)
    torch.cuda.synchronize()
    free, total = torch.cuda.mem_get_info()
    context = total - free - torch.cuda.memory_reserved()
    model = GPT().to(dev)
    model.real_vocab = a.vocab_loss == "real"
    if a.init:
        load_llmc(model, a.init)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    nodecay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay}, {"params": nodecay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8, fused=True)
    step_model = torch.compile(model) if a.mode == "compile" else model
    if a.find_max_batch:
        return find_max_batch(a, model, step_model, opt, context, total)
    g = torch.Generator().manual_seed(1)
    B, T = a.batch, a.seq
    times, losses = [], []
    for s in range(a.steps):
        if a.tokens:
            buf = torch.from_file(a.tokens, size=a.steps * B * (T + 1), dtype=torch.int32)
            row = buf.view(a.steps, B, T + 1)[s].long()
            x, y = row[:, :T].to(dev), row[:, 1:].to(dev)
        else:
            xy = torch.randint(0, V, (B, T + 1), generator=g)
            x, y = xy[:, :T].to(dev), xy[:, 1:].to(dev)
        lr = lr_at(a, s)
        for grp in opt.param_groups:
            grp["lr"] = lr
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        lv = train_step(a, step_model, model, opt, x, y)
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1000)
        losses.append(lv)
    if a.profile:
        profile(a, step_model, model, opt, dev, g)
    warm = times[min(5, len(times) - 1):]
    ms = statistics.median(warm)
    free, total = torch.cuda.mem_get_info()
    print(json.dumps({
        "mode": a.mode, "torch": torch.__version__, "device": torch.cuda.get_device_name(),
        "B": B, "T": T, "L": L, "C": C, "NH": NH, "params": sum(p.numel() for p in model.parameters()),
        "steps": a.steps, "median_ms": ms, "tokens_per_s": B * T / ms * 1000, "times_ms": times,
        "max_reserved": torch.cuda.max_memory_reserved(), "max_allocated": torch.cuda.max_memory_allocated(),
        "context": context, "device_used_end": total - free, "losses": losses,
    }))


def device_us(ev, kind):
    """A profiler event's GPU time, us: kind "self_" (its own kernels) or "" (with its children's); older torch: cuda."""
    t = getattr(ev, f"{kind}device_time_total", None)
    return t if t is not None else getattr(ev, f"{kind}cuda_time_total", 0)


def profile(a, step_model, model, opt, dev, g):
    """a.profile more steps under torch.profiler; the kernels' GPU time per step, largest first (stderr)."""
    from torch.profiler import ProfilerActivity, profile as tprof
    B, T = a.batch, a.seq
    acts = [ProfilerActivity.CUDA] + ([ProfilerActivity.CPU] if a.profile_shapes else [])
    with tprof(activities=acts, record_shapes=a.profile_shapes) as prof:
        for _ in range(a.profile):
            xy = torch.randint(0, V, (B, T + 1), generator=g)
            x, y = xy[:, :T].to(dev), xy[:, 1:].to(dev)
            train_step(a, step_model, model, opt, x, y)
        torch.cuda.synchronize()
    from torch.autograd import DeviceType
    rows = []
    for ev in prof.key_averages():
        if getattr(ev, "device_type", DeviceType.CUDA) != DeviceType.CUDA or getattr(ev, "is_user_annotation", False):
            continue  # with --profile-shapes the host's operators and annotations too, whose GPU time is their kernels'
        t = device_us(ev, "self_")
        if t > 0:
            rows.append((t / a.profile / 1000.0, ev.count // a.profile, ev.key))
    rows.sort(reverse=True)
    total = sum(r[0] for r in rows)
    print(f"torch profile ({a.mode}): GPU time per step by kernel, mean of {a.profile} steps: {total:.3f} ms/step",
          file=sys.stderr)
    for ms, n, key in rows[:60]:
        print(f"  {ms:8.3f} ms {100 * ms / total:5.1f}% x{n:<4d} {key[:140]}", file=sys.stderr)
    if a.profile_shapes:
        mm = []
        for ev in prof.key_averages(group_by_input_shape=True):
            if ev.key in ("aten::mm", "aten::addmm", "aten::bmm", "aten::_addmm_activation"):
                mm.append((device_us(ev, "") / a.profile / 1000.0, ev.count // a.profile, ev.key, str(ev.input_shapes)))
        mm.sort(reverse=True)
        print(f"torch profile ({a.mode}): matrix products by shape, {sum(r[0] for r in mm):.3f} ms/step", file=sys.stderr)
        for ms, n, key, shp in mm:
            print(f"  {ms:8.3f} ms x{n:<4d} {key} {shp[:150]}", file=sys.stderr)


if __name__ == "__main__":
    main()
