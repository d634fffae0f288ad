"""vram's snapshots (vram_torch_snapshot_json of each device) as the dict torch.cuda.memory._snapshot()
returns, so that pickles of it open in PyTorch's memory_viz and convert with tools/torch_snapshot.py
for `vram replay`. Pure: no torch, no library."""


def _trace_entry(e):
    out = {"action": e["action"], "addr": int(e["addr"]), "size": int(e["size"]),
           "stream": int(e.get("stream", 0)), "time_us": int(e.get("time_us", 0)), "frames": []}
    if e["action"] == "oom":          # vram records the device's free bytes where the address would be
        out["device_free"] = out.pop("addr")
        out["addr"] = 0
    return out


def merge(per_device, device_count):
    """per_device: {device index: vram snapshot dict}. Devices without one get an empty trace."""
    n = max([device_count] + [d + 1 for d in per_device])
    snap = {"segments": [], "device_traces": [[] for _ in range(n)], "allocator_settings": {}}
    for dev in sorted(per_device):
        s = per_device[dev]
        for seg in s.get("segments", []):
            blocks = [{"address": int(b["address"]), "size": int(b["size"]),
                       "requested_size": int(b.get("requested_size", 0)), "state": b["state"], "frames": []}
                      for b in seg.get("blocks", [])]
            snap["segments"].append({
                "device": dev, "address": int(seg["address"]), "total_size": int(seg["total_size"]),
                "stream": int(seg.get("stream", 0)), "segment_type": seg.get("segment_type", "large"),
                "segment_pool_id": (0, 0), "allocated_size": int(seg.get("allocated_size", 0)),
                "active_size": int(seg.get("active_size", 0)), "requested_size": int(seg.get("requested_size", 0)),
                "is_expandable": bool(seg.get("is_expandable", False)), "frames": [], "blocks": blocks})
        traces = s.get("device_traces") or [[]]
        snap["device_traces"][dev] = [_trace_entry(e) for e in traces[0]]
        if not snap["allocator_settings"]:
            snap["allocator_settings"] = dict(s.get("allocator_settings", {}), vram_torch=True)
    return snap
