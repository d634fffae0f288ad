#!/usr/bin/env python3
"""GPT-2 data parallel training in PyTorch under torchrun: the peer of `vram train --gpus N`.

The model, its init and the optimizer setup are bench/gpu/torch_gpt2.py's (nanoGPT-equivalent GPT-2, tied
wte/lm_head, vocabulary padded to 50304, GPT-2 init; fused AdamW lr 6e-4, betas 0.9/0.95, eps 1e-8, weight
decay 0.1 on the 2-D parameters; global-norm clipping 1.0; bf16 autocast over fp32 weights).

  --mode ddp     DistributedDataParallel(model, device_ids=[local_rank], gradient_as_bucket_view=True);
                 --compile: torch.compile(ddp_model) (DDPOptimizer splits the graph at bucket boundaries)
  --mode fsdp2   torch.distributed.fsdp.fully_shard on each block, then on the root; mixed precision
                 policy: bf16 parameters for the forward/backward (all-gathers in bf16), gradients
                 reduce-scattered in fp32 (MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32));
                 sharded fp32 master parameters and AdamW state; reshard_after_forward=True (ZeRO-3).
                 --compile: torch.compile of the whole sharded model (Dynamo leaves FSDP2's hooks out of its graphs);
                 --compile-scope blocks compiles each block before it is sharded instead (torchtitan's recipe;
                 the root's embedding, lm_head and loss then run eager)

Each rank trains on its own random tokens (generator seeded 1000 + rank), --batch rows of --seq tokens per
rank (per GPU). Step time: rank 0's, each step timed to its end (loss.item() + device sync); the median over
the steps after --warmup. Rank 0 prints one JSON line: mode, world, median step ms, global tokens/s,
torch.cuda.max_memory_reserved/allocated and the CUDA context of every rank, the losses (mean over ranks).

  torchrun --standalone --nproc_per_node N bench/dist/torch_dist.py --mode ddp|fsdp2 [--compile]
      [--layers 12 --channels 768 --heads 12] [--batch 16] [--seq 1024] [--steps 30] [--warmup 5]

CPU check (gloo, no autocast, plain AdamW):  python3 -m torch.distributed.run --nproc_per_node 2
      bench/dist/torch_dist.py --device cpu --layers 2 --channels 64 --heads 2 --batch 2 --seq 64 --steps 3
"""
import os

# NVLink multicast stays off on the lent machines: set before torch (and torch.distributed) is imported.
for _k, _v in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"), ("NVSHMEM_DISABLE_NVLS", "1")):
    os.environ.setdefault(_k, _v)

import argparse  # noqa: E402
import contextlib  # noqa: E402
import inspect  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "gpu"))
import torch_gpt2 as tg  # noqa: E402  (bench/gpu/torch_gpt2.py: GPT, Block, V, VP, MAXT)

if not hasattr(F, "scaled_dot_product_attention"):  # torch < 2.0 (the CPU check only): the same causal attention
    def _sdpa(q, k, v, is_causal=False):
        T = q.shape[-2]
        att = (q @ k.transpose(-2, -1)) / (q.shape[-1] ** 0.5)
        if is_causal:
            att = att.masked_fill(torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
        return att.softmax(-1) @ v
    F.scaled_dot_product_attention = _sdpa


def build_optimizer(model, a, fused):
    """torch_gpt2.py's optimizer: AdamW, weight decay on the matrices and embeddings (dim >= 2) only."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    nodecay = [p for p in model.parameters() if p.dim() < 2]
    kw = {"fused": True} if fused else {}
    return torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay},
                              {"params": nodecay, "weight_decay": 0.0}],
                             lr=a.lr, betas=(0.9, 0.95), eps=1e-8, **kw)


def clip_grad(model, max_norm, mode):
    """Global-norm clipping. FSDP2's gradients are DTensor shards: the norm is reduced over the ranks
    (full_tensor) before the gradients are scaled, as torchtitan does."""
    params = [p for p in model.parameters() if p.grad is not None]
    if mode == "fsdp2":
        from torch.distributed.tensor import DTensor
        norm = torch.nn.utils.get_total_norm([p.grad for p in params], 2.0)
        if isinstance(norm, DTensor):
            norm = norm.full_tensor()
        torch.nn.utils.clip_grads_with_norm_(params, max_norm, norm)
        return norm
    return torch.nn.utils.clip_grad_norm_(params, max_norm)


def wrap(model, a, dev, local_rank):
    """The model as trained: DDP or FSDP2, compiled or not. Returns the module the step calls."""
    if a.mode == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP
        ddp = DDP(model, device_ids=[local_rank] if dev.type == "cuda" else None, gradient_as_bucket_view=True)
        return torch.compile(ddp) if a.compile else ddp
    try:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    except Exception:  # noqa: BLE001  (ImportError; torch 1.13's fsdp does not even import on Python 3.11)
        try:  # torch 2.4/2.5 had it under _composable
            from torch.distributed._composable.fsdp import MixedPrecisionPolicy, fully_shard
        except Exception:  # noqa: BLE001
            sys.exit(f"torch_dist.py: torch {torch.__version__} has no FSDP2 (torch.distributed.fsdp.fully_shard)")
    mp = None
    if a.fsdp_mp == "bf16":
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    kw = {"mp_policy": mp} if mp is not None else {}
    per_block = a.compile and a.compile_scope == "blocks"
    for i in range(len(model.h)):
        if per_block:
            model.h[i] = torch.compile(model.h[i], fullgraph=True)
        fully_shard(model.h[i], reshard_after_forward=bool(a.fsdp_reshard), **kw)
    fully_shard(model, reshard_after_forward=bool(a.fsdp_reshard), **kw)
    return torch.compile(model) if a.compile and not per_block else model


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mode", choices=["ddp", "fsdp2"], default="ddp")
    ap.add_argument("--compile", action="store_true", help="torch.compile (ddp: the wrapped model; fsdp2: --compile-scope)")
    ap.add_argument("--compile-scope", choices=["model", "blocks"], default="model",
                    help="fsdp2 with --compile: the whole sharded model (default), or each block before fully_shard")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda", help="cpu: gloo, fp32, plain AdamW (a check)")
    ap.add_argument("--layers", type=int, default=12, help="model shape (default GPT-2 124M; XL: 48/1600/25)")
    ap.add_argument("--channels", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--batch", type=int, default=16, help="rows per rank (per GPU)")
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5, help="steps left out of the median (compilation, NCCL setup)")
    ap.add_argument("--lr", type=float, default=6e-4)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--optim-impl", choices=["fused", "foreach"], default="fused",
                    help="AdamW implementation on cuda (fused, as bench/gpu/torch_gpt2.py)")
    ap.add_argument("--fsdp-mp", choices=["bf16", "none"], default="bf16",
                    help="fsdp2: bf16 params / fp32 reduce (default), or none (fp32 all-gathers, autocast only)")
    ap.add_argument("--fsdp-reshard", type=int, choices=[0, 1], default=1,
                    help="fsdp2: reshard_after_forward (1: ZeRO-3, default; 0: parameters kept through the backward)")
    a = ap.parse_args()

    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    cuda = a.device == "cuda"
    if cuda:
        torch.cuda.set_device(local_rank)
        dev = torch.device("cuda", local_rank)
    else:
        dev = torch.device("cpu")
    if "MASTER_ADDR" not in os.environ:  # started without torchrun: a world of one
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ.get("MASTER_PORT", "29511"))
    kw = {"device_id": dev} if cuda and "device_id" in inspect.signature(dist.init_process_group).parameters else {}
    dist.init_process_group("nccl" if cuda else "gloo", rank=rank, world_size=world, **kw)

    tg.L, tg.C, tg.NH = a.layers, a.channels, a.heads  # torch_gpt2's model reads its shape from these
    torch.manual_seed(1337)  # the same initial weights on every rank
    context = 0
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        torch.zeros(1, device=dev)
        torch.cuda.synchronize()
        free, total = torch.cuda.mem_get_info()
        context = total - free - torch.cuda.memory_reserved()
        with torch.device(dev):  # initialised on the GPU (seconds instead of a minute for XL on the host)
            model = tg.GPT()
    else:
        model = tg.GPT()
    nparams = sum(p.numel() for p in model.parameters())
    step_model = wrap(model, a, dev, local_rank)
    opt = build_optimizer(model, a, fused=cuda and a.optim_impl == "fused")
    if cuda and a.optim_impl == "foreach":
        for g in opt.param_groups:
            g["foreach"] = True

    B, T = a.batch, a.seq
    gen = torch.Generator().manual_seed(1000 + rank)
    times, losses = [], []
    for _ in range(a.steps):
        xy = torch.randint(0, tg.V, (B, T + 1), generator=gen)
        x, y = xy[:, :T].contiguous().to(dev), xy[:, 1:].contiguous().to(dev)
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16) if cuda else contextlib.nullcontext():
            loss = step_model(x, y)
        loss.backward()
        clip_grad(model, a.clip, a.mode)
        opt.step()
        opt.zero_grad(set_to_none=True)
        lv = loss.item()
        if cuda:
            torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1000)
        losses.append(lv)

    # the losses as vram reports them: the mean over the ranks
    lt = torch.tensor(losses, dtype=torch.float64, device=dev if cuda else "cpu")
    dist.all_reduce(lt)
    mean_losses = (lt / world).tolist()
    mem = {"max_reserved": torch.cuda.max_memory_reserved() if cuda else 0,
           "max_allocated": torch.cuda.max_memory_allocated() if cuda else 0, "context": context}
    every = [None] * world
    dist.all_gather_object(every, mem)
    if rank == 0:
        skip = min(a.warmup, len(times) - 1)
        warm = times[skip:]
        ms = statistics.median(warm)
        print(json.dumps({
            "mode": a.mode, "compile": a.compile,
            "compile_scope": (a.compile_scope if a.mode == "fsdp2" else "model") if a.compile else None,
            "fsdp_mp": a.fsdp_mp if a.mode == "fsdp2" else None,
            "fsdp_reshard": a.fsdp_reshard if a.mode == "fsdp2" else None,
            "world": world, "device": torch.cuda.get_device_name(dev) if cuda else "cpu",
            "torch": torch.__version__, "layers": a.layers, "channels": a.channels, "heads": a.heads,
            "params": nparams, "B": B, "T": T, "steps": a.steps, "warmup": skip,
            "median_ms": ms, "tokens_per_s": world * B * T / ms * 1000, "step_ms": times,
            "max_reserved": [m["max_reserved"] for m in every], "max_allocated": [m["max_allocated"] for m in every],
            "context": [m["context"] for m in every], "losses": mean_losses,
        }), flush=True)
    dist.barrier()
    dist.destroy_process_group()
    if not cuda:  # torch 1.13's gloo can deadlock tearing DDP's reducer down at exit (GIL vs its worker thread)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


if __name__ == "__main__":
    main()
