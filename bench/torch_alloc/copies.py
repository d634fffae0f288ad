"""Host-device copies into and out of memory from each allocator: are they slower on mapped (VMM) memory?

    PYTHONPATH=python VRAM_TORCH_LIB=build-carry/libvram_torch.so python3 bench/torch_alloc/copies.py MODE
    PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python3 bench/torch_alloc/copies.py native

MODE: native, stitch or pytorch (vram_torch's policies). What the workloads do each step, each into a fresh
tensor, the median of REPS synchronized repetitions in microseconds: a 64 KiB pageable host-to-device copy
(GPT-2's tokens), a 37 MiB one (ResNet-50's images), the same from pinned memory, .item() of a device scalar,
a 37 MiB device-to-host copy, and a kernel writing 37 MiB (x * 2) for scale."""
import os
import statistics
import time

import torch

from percall import allocator  # the mode's allocator (this folder is the script's: sys.path[0])

REPS = 60


def timed(fn):
    out = []
    for _ in range(REPS + 5):
        torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        out.append((time.perf_counter() - t) * 1e6)
    return statistics.median(out[5:])


def main():
    mode = allocator("copies.py")
    if mode == "native" and "expandable_segments:True" in os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""):
        mode = "expandable"
    small = torch.randint(0, 50257, (8, 1025))
    big = torch.randn(64, 3, 224, 224)
    pinned = big.pin_memory()
    dev_scalar = torch.ones((), device="cuda")
    dev_big = torch.randn(64, 3, 224, 224, device="cuda")
    rows = {
        "h2d 64K pageable": lambda: small.cuda(),
        "h2d 37M pageable": lambda: big.cuda(),
        "h2d 37M pinned": lambda: pinned.cuda(non_blocking=True),
        "d2h item()": lambda: dev_scalar.item(),
        "d2h 37M pageable": lambda: dev_big.cpu(),
        "kernel 37M (x*2)": lambda: dev_big * 2,
    }
    print(mode + ": " + ", ".join(f"{k} {timed(f):.1f} us" for k, f in rows.items()))


if __name__ == "__main__":
    main()
