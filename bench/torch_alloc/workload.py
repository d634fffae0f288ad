#!/usr/bin/env python3
"""One PyTorch training run under one allocator, for bench/torch_alloc/run.sh.

    python3 bench/torch_alloc/workload.py WORKLOAD MODE [--steps N] [--batch B]

WORKLOAD: gpt2 (bench/gpu/torch_gpt2.py's nanoGPT-style GPT-2 124M, B=8 T=1024, bf16 autocast, fused
AdamW, clip 1.0), bert (transformers BertForMaskedLM, bert-base from a BertConfig, no download; batch 32,
sequence lengths drawn per step from 64..512, 15% masked, AdamW), resnet50 (torchvision, AMP fp16 with
GradScaler, batch 64 at 224x224, SGD momentum; exit 3 when torchvision is missing).
MODE: native (PyTorch's allocator), expandable (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, set by
run.sh before python starts), vram_stitch / vram_pytorch (vram_torch.enable(policy) before CUDA starts).
Every mode: the same seeds and inputs, torch.use_deterministic_algorithms(True, warn_only=True). A step's time
runs from its host batch (made before, untimed, in pinned memory, as a DataLoader with pin_memory=True has it
ready: ResNet-50's images take the host tens of milliseconds, and a pageable 38 MB copy's time moved by +-15%
between runs of one mode; neither is the allocator's) to loss.item(); the batch goes over with
non_blocking=True. host_ms: from the same start to the step's last queued call (before loss.item()): the
host's part where the step does not wait for the GPU (ResNet-50's GradScaler waits once, for its inf check).
Prints one JSON line: losses per step, median step ms (steps after --warmup, 8), peak reserved and
allocated (torch's own statistics for native/expandable; vram_torch.memory_stats for vram)."""
import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
sys.path.insert(0, os.path.join(HERE, "..", "gpu"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("workload", choices=["gpt2", "bert", "resnet50"])
    ap.add_argument("mode", choices=["native", "expandable", "vram_stitch", "vram_pytorch"])
    ap.add_argument("--steps", type=int, default=int(os.environ.get("STEPS", "25")))
    ap.add_argument("--warmup", type=int, default=int(os.environ.get("WARMUP", "8")),
                    help="first steps left out of the step times (their total is reported apart): PyTorch's and "
                         "stitch's first steps make their device allocations (stitch settles by the 7th on ResNet-50)")
    ap.add_argument("--batch", type=int, default=0, help="the workload's batch (0: its default)")
    ap.add_argument("--lockstep", nargs=3, metavar=("ROLE", "A2B", "B2A"), default=None,
                    help="run in turn with another process on the same GPU (bench/torch_alloc/lockstep.sh): ROLE a or "
                         "b, the two FIFOs; each step (its batch too) runs while the other process waits for its turn, "
                         "so the two modes' steps are timed side by side, seconds apart, not runs minutes apart")
    ap.add_argument("--fraction", type=float, default=0.0,
                    help="cap the process's device memory at this fraction of the GPU (a smaller GPU): "
                         "torch.cuda.set_per_process_memory_fraction natively, vram_torch.enable(fraction=) under vram")
    a = ap.parse_args()

    import torch
    vt = None
    if a.mode.startswith("vram_"):
        import vram_torch as vt
        lend = os.environ.get("STITCH_LEND")   # percent; unset: the library's default
        gran = os.environ.get("STITCH_GRANULE")  # MiB; unset: the library's default
        vt.enable(policy=a.mode[len("vram_"):], fraction=a.fraction or None,
                  stitch_lend=int(lend) if lend else None, stitch_granule=int(gran) << 20 if gran else None,
                  timing=not a.lockstep)   # lockstep times steps: no clock reads inside the allocator there
    elif a.fraction:
        torch.cuda.set_per_process_memory_fraction(a.fraction)
    if a.workload == "resnet50":
        try:
            import torchvision  # noqa: F401
        except ImportError:
            print(json.dumps({"workload": a.workload, "mode": a.mode, "skipped": "torchvision not importable"}))
            return 3
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = False
    torch.manual_seed(1234)
    batch, step = {"gpt2": gpt2, "bert": bert, "resnet50": resnet50}[a.workload](torch, a.batch)
    losses, times, hosts, costs = [], [], [], []
    turn = Turn(*a.lockstep) if a.lockstep else None
    c0 = vt.allocator_costs() if vt else {}
    for i in range(a.steps):
        if turn:
            turn.wait(i)
        host = batch()   # the host's data, as a loader would have it ready: not the allocator's time
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss = step(*host)   # the loss tensor: the host has queued the step (and waited where the step syncs)
        hosts.append((time.perf_counter() - t0) * 1000)
        losses.append(loss.item())
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1000)
        if vt:   # the allocator's cost of this step: calls, host ms inside it, driver calls
            c1 = vt.allocator_costs()
            d = {k: c1[k] - c0.get(k, 0) for k in c1}
            costs.append({(k[:-3] + "_ms" if k.endswith("_ns") else k): (round(v / 1e6, 3) if k.endswith("_ns") else v)
                          for k, v in d.items() if v})
            c0 = c1
        if turn:
            turn.done()
    if turn:
        turn.close()
    w = min(a.warmup, a.steps - 1)
    if vt:
        st = vt.memory_stats()
        peak_res, peak_alloc = st["reserved_bytes.all.peak"], st["allocated_bytes.all.peak"]
    else:
        peak_res, peak_alloc = torch.cuda.max_memory_reserved(), torch.cuda.max_memory_allocated()
    out = {"workload": a.workload, "mode": a.mode, "steps": a.steps, "losses": losses,
           "warmup": w, "warmup_ms": sum(times[:w]),
           "step_ms_median": statistics.median(times[w:]), "step_ms": times,
           "host_ms": hosts,
           "peak_reserved": peak_res, "peak_allocated": peak_alloc, "allocator_costs": costs, "torch": torch.__version__,
           "device": torch.cuda.get_device_name(0)}
    print(json.dumps(out))
    return 0


class Turn:
    """Steps in turn with the other process of a lockstep pair: a runs first; each side waits for the other's byte
    before a step (a: from its second step on, and once more at the end so that b's last byte has a reader) and
    writes one after it. The FIFOs are opened in the same order on both sides (a2b, then b2a), so neither open
    blocks the other forever."""

    def __init__(self, role, a2b, b2a):
        if role not in ("a", "b"):
            raise SystemExit("workload.py: --lockstep ROLE must be a or b, not %r" % role)
        self.a = role == "a"
        first = open(a2b, "wb" if self.a else "rb", buffering=0)
        second = open(b2a, "rb" if self.a else "wb", buffering=0)
        self.out, self.inp = (first, second) if self.a else (second, first)

    def wait(self, i):
        if (not self.a or i > 0) and len(self.inp.read(1)) != 1:
            raise SystemExit("workload.py: the other lockstep process ended early")

    def done(self):
        self.out.write(b"t")

    def close(self):
        if self.a:
            self.inp.read(1)
        self.out.close()
        self.inp.close()


def gpt2(torch, batch=0):
    import torch_gpt2 as g
    model = g.GPT().cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1, fused=True)
    gen = torch.Generator().manual_seed(7)
    B, T = batch or 8, 1024

    def batch():
        return (torch.randint(0, g.V, (B, T + 1), generator=gen).pin_memory(),)

    def step(x):
        x = x.cuda(non_blocking=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x[:, :-1].contiguous(), x[:, 1:].contiguous())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss
    return batch, step


def bert(torch, batch=0):
    from transformers import BertConfig, BertForMaskedLM
    cfg = BertConfig(vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                     intermediate_size=3072, max_position_embeddings=512, attn_implementation="eager",
                     hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = BertForMaskedLM(cfg).cuda().train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    gen = torch.Generator().manual_seed(11)
    B = batch or 32

    def batch():
        T = int(torch.randint(64, 513, (1,), generator=gen))
        ids = torch.randint(1000, cfg.vocab_size, (B, T), generator=gen)
        mask = torch.rand(B, T, generator=gen) < 0.15
        labels = torch.where(mask, ids, torch.full_like(ids, -100))
        ids = torch.where(mask, torch.full_like(ids, 103), ids)     # [MASK]
        return ids.pin_memory(), labels.pin_memory()

    def step(ids, labels):
        B, T = ids.shape
        out = model(input_ids=ids.cuda(non_blocking=True), attention_mask=torch.ones(B, T, dtype=torch.long, device="cuda"),
                    labels=labels.cuda(non_blocking=True))
        out.loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return out.loss
    return batch, step


def resnet50(torch, batch=0):
    import torchvision
    model = torchvision.models.resnet50(weights=None).cuda().train()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    scaler = torch.amp.GradScaler("cuda")
    gen = torch.Generator().manual_seed(13)
    B = batch or 64

    def batch():
        return (torch.randn(B, 3, 224, 224, generator=gen).pin_memory(),
                torch.randint(0, 1000, (B,), generator=gen).pin_memory())

    def step(x, y):
        x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
        with torch.autocast("cuda", dtype=torch.float16):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        return loss
    return batch, step


if __name__ == "__main__":
    sys.exit(main())
