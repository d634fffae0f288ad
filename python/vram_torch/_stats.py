"""vram's statistics (vram_torch_stats_json: vr_alloc_stats' fields) under PyTorch's key names, as
torch.cuda.memory_stats() gives them. Pure: no torch, no library."""
import collections

POOLS = ("all", "small_pool", "large_pool")          # VR_POOL_ALL, SMALL, LARGE
POOL_STATS = ("allocation", "segment", "active", "inactive_split", "allocated_bytes", "reserved_bytes",
              "active_bytes", "inactive_split_bytes", "requested_bytes")
METRICS = ("current", "peak", "allocated", "freed")
SINGLE_STATS = ("oversize_allocations", "oversize_segments")
COUNTERS = ("num_alloc_retries", "num_ooms", "num_device_alloc", "num_device_free", "num_sync_all_streams",
            "max_split_size")


def nested(raw):
    """torch.cuda.memory_stats_as_nested_dict()'s structure from the raw JSON dict."""
    out = {}
    for name in POOL_STATS:
        out[name] = {pool: {m: int(raw[name][i][m]) for m in METRICS} for i, pool in enumerate(POOLS)}
    for name in SINGLE_STATS:
        out[name] = {m: int(raw[name][m]) for m in METRICS}
    for name in COUNTERS:
        out[name] = int(raw[name])
    return out


def flat(raw):
    """torch.cuda.memory_stats(): "allocated_bytes.all.current"-style keys, sorted, in an OrderedDict."""
    items = []

    def walk(prefix, obj):
        if isinstance(obj, dict):
            for k, v in obj.items():
                walk(prefix + "." + k if prefix else k, v)
        else:
            items.append((prefix, obj))

    walk("", nested(raw))
    items.sort()
    return collections.OrderedDict(items)


def zeros():
    """The raw dict of a device with no allocator."""
    z = {m: 0 for m in METRICS}
    raw = {name: [dict(z) for _ in POOLS] for name in POOL_STATS}
    raw.update({name: dict(z) for name in SINGLE_STATS})
    raw.update({name: 0 for name in COUNTERS})
    raw["max_split_size"] = -1
    return raw
