#!/usr/bin/env python3
"""Convert a PyTorch CUDA memory snapshot to vram's allocator trace format.

    python3 tools/torch_snapshot.py snapshot.pickle trace.csv [--device N] [--workload NAME]

The input is what torch.cuda.memory._dump_snapshot(path) writes: a plain pickle
of dicts and lists (no torch needed to read it):

    {"segments": [{"device", "address", "total_size", "stream", "blocks": [...], ...}],
     "device_traces": [[{"action", "addr", "size", "stream", ...}, ...], ...]}   # one list per device

The output is the CSV that `vram replay` reads (src/alloc/trace.c, ../shared/traces/README.md):

    # {"workload": ..., "peak_allocated": N, "peak_reserved": N, "torch": "snapshot", "source": ...}
    action,addr,size,stream
    alloc,ADDR,SIZE,STREAM
    ...

Rules:
  - actions are kept as PyTorch names them (alloc, free_requested, free_completed, segment_alloc,
    segment_free, segment_map, segment_unmap, oom, snapshot); an older snapshot's "free" becomes
    free_completed, and when a trace has no free_completed at all, free_requested stands for it;
  - the history is a ring buffer: a block freed in the trace but allocated before it began gets an
    alloc at the start (size from its free), and so does a block still allocated in the snapshot's
    segments that the trace never allocated (allocated before it began and never freed, such as
    cuBLAS's workspaces: size its requested_size), so the replay starts from the memory actually in use;
  - the segments the process held when the recording began (in the snapshot's segment list but not
    allocated in the trace, or freed in it without being allocated) are rebuilt first: each allocated
    whole (a small-pool segment through a 1 MiB request, which makes a 2 MiB small segment), then all
    freed, so the replay starts with the same cached segments PyTorch had (a workload run after another
    in one process carves its first blocks out of the earlier one's segments); the header's warmup_ops
    counts those rows, and the replay resets its peaks after them;
  - streams (CUDA stream handles) become 0, 1, 2, ... in order of appearance;
  - peak_allocated / peak_reserved are computed from the converted events (allocated: live block
    bytes; reserved: the segments held at the start, from the snapshot's segment list, plus the
    segment events), and the header says so ("source").
The output is written to a temporary file and renamed, so an error leaves no partial file. Errors
are one line naming the file and what is wrong, exit 1.
"""
import argparse
import json
import os
import pickle
import sys
import tempfile

ACTIONS = {"alloc", "free_requested", "free_completed", "segment_alloc", "segment_free",
           "segment_map", "segment_unmap", "oom", "snapshot"}


class PlainUnpickler(pickle.Unpickler):
    """Plain data only: a snapshot holds dicts, lists, strings and numbers, never classes."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"refers to {module}.{name}; a memory snapshot holds plain data only")


class Bad(Exception):
    pass


def load(path):
    try:
        with open(path, "rb") as f:
            snap = PlainUnpickler(f).load()
    except OSError as e:
        raise Bad(f"{path}: cannot read: {e.strerror}")
    except Exception as e:  # any unpickling failure of a corrupt file
        raise Bad(f"{path}: not a PyTorch memory snapshot pickle ({type(e).__name__}: {e})")
    if not isinstance(snap, dict) or not isinstance(snap.get("device_traces"), list):
        raise Bad(f"{path}: no 'device_traces' list (is this torch.cuda.memory._dump_snapshot output?)")
    if not isinstance(snap.get("segments", []), list):
        raise Bad(f"{path}: 'segments' is not a list")
    return snap


def events(path, snap, device):
    traces = snap["device_traces"]
    if device >= len(traces) or not isinstance(traces[device], list):
        raise Bad(f"{path}: no device_traces[{device}] (the snapshot has {len(traces)} device(s))")
    out = []
    for i, e in enumerate(traces[device]):
        where = f"{path}: device_traces[{device}][{i}]"
        if not isinstance(e, dict):
            raise Bad(f"{where}: not a dict")
        a = e.get("action")
        a = "free_completed" if a == "free" else a
        if a not in ACTIONS:
            raise Bad(f"{where}: unknown action {a!r}")
        for k in ("addr", "size"):
            if not isinstance(e.get(k), int) or e[k] < 0:
                raise Bad(f"{where}: '{k}' is not a non-negative integer ({e.get(k)!r})")
        out.append((a, e["addr"], e["size"], e.get("stream", 0)))
    if not any(a == "alloc" for a, *_ in out):
        raise Bad(f"{path}: device_traces[{device}] has no alloc events "
                  f"({len(out)} events): was _record_memory_history on when the snapshot was taken?")
    return out


SMALL_SEGMENT = 2 << 20


def warmup(snap, ev, device):
    """Rows that rebuild the segments held when the recording began: all allocated whole, then all freed."""
    during = {addr for a, addr, _, _ in ev if a in ("segment_alloc", "segment_map")}
    seen, segs = set(), []
    for seg in snap.get("segments", []):
        if not isinstance(seg, dict) or seg.get("device", device) != device or seg.get("is_expandable"):
            continue
        addr, size = seg.get("address"), seg.get("total_size")
        if isinstance(addr, int) and isinstance(size, int) and size > 0 and addr not in during and addr not in seen:
            small = seg.get("segment_type") == "small" and size == SMALL_SEGMENT
            segs.append((addr, size if not small else SMALL_SEGMENT // 2, seg.get("stream", 0)))
            seen.add(addr)
    for a, addr, size, st in ev:
        if a == "segment_free" and addr not in during and addr not in seen:
            segs.append((addr, size if size != SMALL_SEGMENT else SMALL_SEGMENT // 2, st))
            seen.add(addr)
    return [("alloc", a, s, st) for a, s, st in segs] + [("free_completed", a, s, st) for a, s, st in segs]


def convert(path, snap, device):
    ev = events(path, snap, device)
    if not any(a == "free_completed" for a, *_ in ev):
        ev = [("free_completed" if a == "free_requested" else a, x, s, st) for a, x, s, st in ev]
    # blocks live before the trace began: freed without an alloc in the trace
    live, prior = {}, []
    for a, addr, size, st in ev:
        if a == "alloc":
            live[addr] = size
        elif a == "free_completed":
            if addr not in live:
                prior.append(("alloc", addr, size, st))
            live.pop(addr, None)
    # blocks live before the trace began and still live at its end: in the snapshot's segments only
    for seg in snap.get("segments", []):
        if not isinstance(seg, dict) or seg.get("device", device) != device:
            continue
        for b in seg.get("blocks", []) or []:
            if not isinstance(b, dict) or b.get("state") != "active_allocated":
                continue
            addr, size = b.get("address"), b.get("requested_size") or b.get("size")
            if isinstance(addr, int) and isinstance(size, int) and size > 0 and addr not in live:
                prior.append(("alloc", addr, size, seg.get("stream", 0)))
                live[addr] = size
    warm = warmup(snap, ev, device)
    ev = warm + prior + ev
    streams = {}
    rows = []
    for a, addr, size, st in ev:
        rows.append((a, addr, size, streams.setdefault(st, len(streams))))
    # peaks over the converted events
    seg = [s for s in snap.get("segments", []) if isinstance(s, dict) and s.get("device", device) == device]
    reserved_end = sum(int(s.get("total_size", 0)) for s in seg)
    delta = sum(s if a in ("segment_alloc", "segment_map") else -s if a in ("segment_free", "segment_unmap") else 0
                for a, _, s, _ in rows)
    reserved = max(0, reserved_end - delta)
    allocated = peak_a = 0
    peak_r = reserved
    held = {}
    for a, addr, size, _ in rows[len(warm):]:
        if a == "alloc":
            held[addr] = size
            allocated += size
        elif a == "free_completed":
            allocated -= held.pop(addr, 0)
        elif a in ("segment_alloc", "segment_map"):
            reserved += size
        elif a in ("segment_free", "segment_unmap"):
            reserved -= size
        peak_a, peak_r = max(peak_a, allocated), max(peak_r, reserved)
    return rows, peak_a, peak_r, len(prior), len(warm)


def write_atomic(path, text):
    d = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(prefix=os.path.basename(path) + ".tmp.", dir=d)
    except OSError as e:
        raise Bad(f"{path}: cannot write: {e.strerror}")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        os.unlink(tmp)
        raise Bad(f"{path}: cannot write: {e.strerror}")


def main():
    ap = argparse.ArgumentParser(description="PyTorch memory snapshot (pickle) -> vram allocator trace (CSV)")
    ap.add_argument("snapshot")
    ap.add_argument("output")
    ap.add_argument("--device", type=int, default=0)
    ap.add_argument("--workload", default=None)
    a = ap.parse_args()
    try:
        snap = load(a.snapshot)
        rows, peak_a, peak_r, prior, warm = convert(a.snapshot, snap, a.device)
        head = {"workload": a.workload or os.path.basename(a.snapshot), "peak_allocated": peak_a,
                "peak_reserved": peak_r, "warmup_ops": warm, "torch": "snapshot",
                "source": "tools/torch_snapshot.py: peaks computed from the snapshot's events"}
        lines = ["# " + json.dumps(head), "action,addr,size,stream"]
        lines += [f"{r[0]},{r[1]},{r[2]},{r[3]}" for r in rows]
        write_atomic(a.output, "\n".join(lines) + "\n")
    except Bad as e:
        print(f"torch_snapshot: {e}", file=sys.stderr)
        return 1
    print(f"wrote {a.output}: {len(rows)} events ({warm} rebuilding the segments held before the trace, {prior} blocks "
          f"live before it began), "
          f"peak allocated {peak_a}, peak reserved {peak_r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
