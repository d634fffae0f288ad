#!/usr/bin/env python3
"""Records PyTorch memory snapshots of real training on the GPU, for tools/torch_snapshot.py + vram replay.

    python3 bench/gpu/snapshot_record.py OUTDIR [--same-process]

Each workload runs in a process of its own (a fresh caching allocator, as a user's training script has);
--same-process records them one after the other in one process, where the MLP then starts from the
segments GPT-2 left (tools/torch_snapshot.py rebuilds those for the replay). Writes OUTDIR/{gpt2,mlp_varlen}.pickle (torch.cuda.memory._dump_snapshot) and OUTDIR/recorded.json with
PyTorch's own max_memory_reserved / max_memory_allocated of each run (measured from the start of the
recording). Workloads: GPT-2 124M (bench/gpu/torch_gpt2.py's model) B=8 T=1024 bf16 autocast + fused AdamW,
3 steps; an MLP (4096 wide, 6 layers) with batch sizes changing every step, 8 steps; with
SNAP_WORKLOADS="bert_varlen" (a list), transformers BERT-base with a new sequence length every step, 10 steps."""
import json
import os
import subprocess
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_gpt2  # noqa: E402


def record(name, out, fn):
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    torch.cuda.memory._record_memory_history(max_entries=200000)
    fn()
    torch.cuda.synchronize()
    torch.cuda.memory._dump_snapshot(f"{out}/{name}.pickle")
    torch.cuda.memory._record_memory_history(enabled=None)
    return {"max_reserved": torch.cuda.max_memory_reserved(), "max_allocated": torch.cuda.max_memory_allocated()}


def gpt2():
    model = torch_gpt2.GPT().cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=6e-4, fused=True)
    for _ in range(3):
        x = torch.randint(0, torch_gpt2.V, (8, 1024), device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x, x)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)


def mlp_varlen():
    layers = []
    for _ in range(6):
        layers += [nn.Linear(4096, 4096), nn.GELU()]
    model = nn.Sequential(*layers, nn.Linear(4096, 10)).cuda()
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    for b in (512, 3000, 1024, 4096, 700, 2048, 3500, 256):
        x = torch.randn(b, 4096, device="cuda")
        y = torch.randint(0, 10, (b,), device="cuda")
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)


def bert_varlen():
    """bench/torch_alloc/workload.py's BERT (a new sequence length every step), 10 steps."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "torch_alloc"))
    import workload
    batch, step = workload.bert(torch)
    for _ in range(10):
        step(*batch())


WORKLOADS = {"gpt2": gpt2, "mlp_varlen": mlp_varlen, "bert_varlen": bert_varlen}
DEFAULT = os.environ.get("SNAP_WORKLOADS", "gpt2 mlp_varlen").split()   # which ones a plain run records


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    if len(sys.argv) > 2 and sys.argv[2] in WORKLOADS:  # one workload, in this process (the child)
        print(json.dumps(record(sys.argv[2], out, WORKLOADS[sys.argv[2]])))
        return
    rec = {"torch": torch.__version__, "device": torch.cuda.get_device_name()}
    for name, fn in ((n, WORKLOADS[n]) for n in DEFAULT):
        if "--same-process" in sys.argv[2:]:
            rec[name] = record(name, out, fn)
        else:
            r = subprocess.run([sys.executable, os.path.abspath(__file__), out, name], capture_output=True, text=True)
            if r.returncode:
                sys.exit(f"snapshot_record: {name}: {r.stderr.strip()[-500:]}")
            rec[name] = json.loads(r.stdout.strip().splitlines()[-1])
    rec["same_process"] = "--same-process" in sys.argv[2:]
    json.dump(rec, open(f"{out}/recorded.json", "w"), indent=1)
    print(json.dumps(rec))


if __name__ == "__main__":
    main()
