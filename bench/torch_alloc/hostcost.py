#!/usr/bin/env python3
"""The allocator's host time per training step inside PyTorch, natively or under vram_torch, from a real step's
own calls: a shared trace (../shared/traces/*.csv.gz, PyTorch's allocator recorded on GPT-2) replayed through
PyTorch's allocator entry points.

    PYTHONPATH=python VRAM_TORCH_LIB=build-carry/libvram_torch.so \
        python3 bench/torch_alloc/hostcost.py native|stitch|pytorch TRACE.csv.gz STEPS [--passes N]

Each `alloc` of the trace becomes torch.cuda.caching_allocator_alloc(size) on the current stream and each
`free_completed` torch.cuda.caching_allocator_delete of the block that alloc's address named: the program's own
sequence of sizes, in order, with its live set, through the same C++ path tensors take (PyTorch's allocator, or
its pluggable-allocator wrapper and libvram_torch). Nothing runs on the GPU, so this is host time alone: the
allocator's plus the Python calls, which are the same in every mode (an empty loop of as many iterations is
printed for scale). The first pass makes the allocator's device allocations (both allocators keep them); the
passes after it are timed and their median printed as microseconds per call and milliseconds per step (STEPS:
the training steps the trace holds, ../shared/traces/README.md: 3 for gpt2_bf16_b32, 6 for gpt2_bf16_varlen_b16).
One JSON line.
Compare modes within one call: the lent machines' host speed moves between runs."""
import gzip
import json
import statistics
import sys
import time


def load(path):
    """[(is_alloc, addr, size)] from a shared trace: its alloc and free_completed events."""
    ev = []
    with gzip.open(path, "rt") as f:
        for no, line in enumerate(f, 1):
            if line.startswith("#") or line.startswith("action,"):
                continue
            try:
                act, addr, size, _ = line.rstrip("\n").split(",")
                addr, size = int(addr), int(size)
            except ValueError:
                raise ValueError(f"line {no}: not action,addr,size,stream") from None
            if act == "alloc":
                ev.append((True, addr, size))
            elif act == "free_completed":
                ev.append((False, addr, size))
    return ev


def replay(torch, ev, stream):
    """One pass; the blocks still live at its end freed after the clock stops. Returns seconds."""
    live = {}
    alloc, delete = torch.cuda.caching_allocator_alloc, torch.cuda.caching_allocator_delete
    t = time.perf_counter()
    for is_alloc, addr, size in ev:
        if is_alloc:
            live[addr] = alloc(size, 0, stream)
        else:
            p = live.pop(addr, None)
            if p is not None:
                delete(p)
    dt = time.perf_counter() - t
    for p in live.values():
        delete(p)
    return dt


def main():
    if len(sys.argv) < 4 or not sys.argv[3].isdigit() or int(sys.argv[3]) < 1:
        sys.exit("usage: hostcost.py native|stitch|pytorch TRACE.csv.gz STEPS [--passes N] (STEPS: 1 or more)")
    passes = int(sys.argv[sys.argv.index("--passes") + 1]) if "--passes" in sys.argv else 5
    if passes < 2:
        sys.exit("hostcost.py: --passes must be 2 or more (the first is not timed)")
    try:
        ev = load(sys.argv[2])
    except (OSError, EOFError, ValueError, UnicodeDecodeError) as e:
        sys.exit(f"hostcost.py: {sys.argv[2]}: {e}")
    if not ev:
        sys.exit(f"hostcost.py: {sys.argv[2]}: no alloc events")
    import torch

    from percall import allocator
    mode = allocator("hostcost.py")
    torch.empty(1, device="cuda")
    stream = torch.cuda.current_stream().cuda_stream
    times = [replay(torch, ev, stream) for _ in range(passes)][1:]
    torch.cuda.synchronize()
    n = len(ev)
    t = time.perf_counter()
    for _ in ev:
        pass
    loop = time.perf_counter() - t
    steps = int(sys.argv[3])
    med = statistics.median(times)
    print(json.dumps({"mode": mode, "trace": sys.argv[2].rsplit("/", 1)[-1], "calls": n, "steps": steps,
                      "us_per_call": round(med / n * 1e6, 3), "ms_per_step": round(med / steps * 1e3, 3),
                      "pass_ms": [round(x * 1e3, 2) for x in times],
                      "empty_loop_us_per_iter": round(loop / n * 1e6, 3)}))


if __name__ == "__main__":
    main()
