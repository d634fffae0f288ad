"""The host cost of one allocation and free through PyTorch, natively or under vram_torch.

    PYTHONPATH=python VRAM_TORCH_LIB=build-carry/libvram_torch.so python3 bench/torch_alloc/percall.py native|stitch|pytorch

torch.empty + free of 8 sizes (512 B to 64 MiB, both pools), 3,000 rounds, the second of two passes timed; prints
microseconds per pair and, for scale, per iteration of an empty Python loop (the lent machines' host speed moves
between runs: compare modes within one call)."""
import sys
import time

import torch

ROUNDS = 3000
SIZES = [4096, 65536, 1 << 20, 8 << 20, 64 << 20, 4096, 512, 3 << 20]


def allocator(script):
    """The mode named by the first argument (native, stitch or pytorch), vram_torch enabled with it when not
    native (before CUDA allocates); also for copies.py."""
    mode = sys.argv[1] if len(sys.argv) > 1 else "native"
    if mode not in ("native", "stitch", "pytorch"):
        sys.exit(f"{script}: mode '{mode}': native, stitch or pytorch")
    if mode != "native":
        import vram_torch
        vram_torch.enable(policy=mode)
    return mode


def main():
    mode = allocator("percall.py")
    torch.empty(1, device="cuda")
    for _ in range(2):
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(ROUNDS):
            ts = [torch.empty(s, dtype=torch.uint8, device="cuda") for s in SIZES]
            del ts
        torch.cuda.synchronize()
        dt = time.perf_counter() - t
    n = ROUNDS * len(SIZES)
    t = time.perf_counter()
    for _ in range(n):
        pass
    loop = time.perf_counter() - t
    print(f"{mode}: {dt / n * 1e6:.2f} us per empty + free (empty loop {loop / n * 1e6:.3f} us)")


if __name__ == "__main__":
    main()
