"""torch.cuda's memory read-outs redirected to vram_torch (enable(patch_torch=True)). Under a pluggable
allocator PyTorch raises "not supported" for them; the wrappers in torch.cuda.memory that build on these
(memory_allocated, max_memory_reserved, memory_summary, _dump_snapshot, ...) then work unchanged."""

NAMES = {
    "memory_stats": "memory_stats",
    "memory_stats_as_nested_dict": "memory_stats_as_nested_dict",
    "reset_peak_memory_stats": "reset_peak_memory_stats",
    "reset_accumulated_memory_stats": "reset_accumulated_memory_stats",
    "_record_memory_history": "record_memory_history",
}


def apply(torch, vt):
    mem = torch.cuda.memory
    originals = {}

    def put(name, fn):
        for mod in (mem, torch.cuda):
            if hasattr(mod, name):
                originals.setdefault((mod.__name__, name), getattr(mod, name))
                setattr(mod, name, fn)

    for name, ours in NAMES.items():
        put(name, getattr(vt, ours))
    put("_snapshot", lambda device=None, *a, **k: vt.snapshot(device))
    put("memory_snapshot", lambda *a, **k: vt.snapshot()["segments"])
    # torch's memory_stats(device, abbreviated) -> ours takes device only
    put("memory_stats", lambda device=None, *a, **k: vt.memory_stats(device))
    put("memory_stats_as_nested_dict", lambda device=None, *a, **k: vt.memory_stats_as_nested_dict(device))
    graphs = getattr(torch.cuda, "graphs", None)
    graph_cls = getattr(graphs, "CUDAGraph", None)
    if graph_cls is not None and hasattr(graph_cls, "capture_begin"):
        original = graph_cls.capture_begin

        def capture_begin(self, *a, **k):
            raise RuntimeError("vram_torch: CUDA graph capture is not supported under vram's allocator (PyTorch "
                               "keeps a graph's memory in a private pool that a pluggable allocator cannot "
                               "provide); run graph code without vram_torch")
        originals[("CUDAGraph", "capture_begin")] = original
        graph_cls.capture_begin = capture_begin
    vt._state["originals"] = originals
