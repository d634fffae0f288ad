"""vram's caching allocator inside PyTorch (README.md in this folder).

    import vram_torch
    vram_torch.enable(policy="stitch")      # before anything is allocated on the GPU
    ...                                     # the program, unchanged
    vram_torch.memory_stats()               # PyTorch's key names: "allocated_bytes.all.current", ...

ctypes only: libvram_torch.so is found next to this package, in the repository's build*/ folders, or
at $VRAM_TORCH_LIB (or `lib=`)."""
import json
import os
import pickle
import sys

from . import _lib, _snapshot, _stats

__all__ = ["enable", "enabled", "memory_stats", "memory_stats_as_nested_dict", "memory_summary",
           "allocator_costs",
           "snapshot", "dump_snapshot", "reset_peak_memory_stats", "reset_accumulated_memory_stats",
           "empty_cache", "record_memory_history", "last_oom", "is_oom", "find_lib"]

_L = None            # the loaded library
_state = {}          # policy, path, the allocator object (kept alive), originals of patched functions

find_lib = _lib.find


def enabled():
    return _L is not None


def _require():
    if _L is None:
        raise RuntimeError("vram_torch: not enabled (call vram_torch.enable() first)")
    return _L


def enable(policy="stitch", fraction=None, lib=None, history=0, patch_torch=True, stitch_lend=None,
           stitch_granule=None, timing=False):
    """Makes vram's allocator PyTorch's CUDA allocator. Must run before PyTorch allocates CUDA memory
    (before CUDA is initialised). policy: "stitch", "pytorch" or "expandable"; fraction: cap reserved
    memory at this fraction of each GPU; history: allocator events kept for snapshot() (0 = off);
    stitch_lend: policy stitch lends a request of a new size a mapping up to this percent larger (0 = never;
    None: the library's default, 100, which halves BERT's step time against 0, bench/torch_alloc/README.md);
    stitch_granule: policy stitch's physical allocations, in bytes (rounded up to a multiple of 2 MiB; None: the
    library's default, 8 MiB; 0: 2 MiB): the driver's cuMemSetAccess and cuMemUnmap cost ~20-30 us per allocation in a range, so larger
    ones make new mappings cheaper (bench/alloc/vmm_cost.c) and stitching coarser;
    timing: measure the host time inside every malloc and free (allocator_costs' malloc_ns, free_ns; two clock
    reads a call);
    patch_torch: torch.cuda.memory_stats / memory_allocated / max_memory_reserved / reset_peak_memory_stats
    / memory_snapshot / _snapshot / _dump_snapshot / _record_memory_history then read vram's figures
    (PyTorch raises "not supported" for them under a pluggable allocator), and CUDA graph capture is
    refused up front with a clear error. Calling it again with the same policy does nothing."""
    global _L
    if _L is not None:
        if policy != _state["policy"]:
            raise RuntimeError(f"vram_torch: already enabled with policy {_state['policy']!r}")
        return
    import torch
    path = _lib.find(lib)
    L = _lib.load(path)
    if stitch_lend is not None:
        L.vram_torch_set_stitch_lend(int(stitch_lend))
    if stitch_granule is not None:
        L.vram_torch_set_stitch_granule(int(stitch_granule))
    L.vram_torch_set_timing(1 if timing else 0)
    if L.vram_torch_configure(policy.encode(), float(fraction or 0.0), int(history), None) != 0:
        raise ValueError(_lib.last_error(L))
    alloc = torch.cuda.memory.CUDAPluggableAllocator(path, "vram_torch_malloc", "vram_torch_free")
    raw = alloc.allocator()
    missing = []
    for setter, fn in (("set_reset_fn", "vram_torch_empty_cache"),
                       ("set_memory_fraction_fn", "vram_torch_memory_fraction"),
                       ("set_record_stream_fn", "vram_torch_record_stream"),
                       ("set_base_alloc_fn", "vram_torch_base_alloc"),
                       ("set_init_fn", "vram_torch_init")):
        if hasattr(raw, setter):
            getattr(raw, setter)(_lib.address(L, fn))
        else:
            missing.append(setter)
    if "set_record_stream_fn" in missing:
        print("vram_torch: this PyTorch cannot pass Tensor.record_stream to a pluggable allocator; a tensor "
              "used on a second stream must be kept alive until that stream is done", file=sys.stderr)
    try:
        torch.cuda.memory.change_current_allocator(alloc)
    except RuntimeError as e:
        raise RuntimeError("vram_torch.enable() must run before PyTorch initialises CUDA or allocates GPU "
                           f"memory (PyTorch says: {e}); call it first thing, or use VRAM_TORCH=1 with "
                           "python/ on PYTHONPATH") from e
    _L = L
    _state.update(policy=policy, path=path, allocator=alloc, missing_hooks=missing)
    if patch_torch:
        from . import _patch
        _patch.apply(torch, sys.modules[__name__])


def _device(device):
    if device is None:
        import torch
        return torch.cuda.current_device()
    if isinstance(device, int):
        return device
    import torch
    return torch.cuda._get_device_index(device, optional=True)


def _raw_stats(device):
    L = _require()
    return json.loads(_lib.take_string(L, L.vram_torch_stats_json(_device(device))))


def memory_stats(device=None):
    """torch.cuda.memory_stats(device) with vram's figures (same keys, sorted OrderedDict)."""
    return _stats.flat(_raw_stats(device))


def memory_stats_as_nested_dict(device=None):
    return _stats.nested(_raw_stats(device))


def allocator_costs(device=None):
    """What vram's allocator has cost so far on a device (not a PyTorch statistic): malloc_calls, free_calls,
    the host nanoseconds inside them (malloc_ns, free_ns: 0 unless enable(timing=True)) and the driver calls it made (map, unmap,
    set_access, device_sync, event_sync, ...). {} while nothing is allocated there."""
    L = _require()
    text = _lib.take_string(L, L.vram_torch_costs_json(_device(device)))
    return json.loads(text) if text is not None else {}


def memory_summary(device=None, abbreviated=False):
    """vram's table, laid out like torch.cuda.memory_summary()."""
    L = _require()
    d = _device(device)
    text = _lib.take_string(L, L.vram_torch_summary(d))
    return text if text is not None else f"vram_torch: nothing allocated on GPU {d} yet\n"


def snapshot(device=None):
    """The dict torch.cuda.memory._snapshot() gives, every device vram serves (device=None) or one: segments
    with their blocks, and device_traces when history is on (enable(history=N) or record_memory_history)."""
    L = _require()
    import torch
    count = torch.cuda.device_count()
    devs = range(max(count, 1)) if device is None else [_device(device)]
    per = {}
    for d in devs:
        if L.vram_torch_device_active(d):
            per[d] = json.loads(_lib.take_string(L, L.vram_torch_snapshot_json(d)))
    return _snapshot.merge(per, count)


def dump_snapshot(filename="dump_snapshot.pickle"):
    """torch.cuda.memory._dump_snapshot: the snapshot() dict pickled (memory_viz, tools/torch_snapshot.py)."""
    with open(filename, "wb") as f:
        pickle.dump(snapshot(), f)


MAX_HISTORY = 1_000_000


def record_memory_history(enabled="all", *_args, max_entries=100000, **_ignored):
    """torch.cuda.memory._record_memory_history: starts (or, enabled=None/False, stops) vram's history ring
    of max_entries events (at most MAX_HISTORY; PyTorch's default is unbounded). vram records no stack
    frames; context/stacks/device are ignored."""
    n = min(int(max_entries), MAX_HISTORY) if enabled not in (None, False) else 0
    _require().vram_torch_record_history(n)


def reset_peak_memory_stats(device=None):
    _require().vram_torch_reset_peak(_device(device))


def reset_accumulated_memory_stats(device=None):
    _require().vram_torch_reset_accumulated(_device(device))


def empty_cache():
    """Returns every cached segment of every GPU to the device (torch.cuda.empty_cache() does the same)."""
    _require().vram_torch_empty_cache()


def last_oom():
    """The last out-of-memory message vram gave in this process ("" when none)."""
    return (_require().vram_torch_last_oom() or b"").decode("utf-8", "replace")


def is_oom(exc):
    """True for torch.OutOfMemoryError and for vram_torch's out-of-memory error, which a pluggable
    allocator can only raise as a RuntimeError whose message starts with "CUDA out of memory."."""
    import torch
    oom = getattr(torch, "OutOfMemoryError", None) or getattr(torch.cuda, "OutOfMemoryError", None)
    if oom is not None and isinstance(exc, oom):
        return True
    return isinstance(exc, RuntimeError) and "CUDA out of memory." in str(exc)
