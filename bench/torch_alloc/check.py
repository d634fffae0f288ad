#!/usr/bin/env python3
"""PyTorch's allocator-facing behaviour under vram_torch, on the GPU (bench/torch_alloc/run.sh runs it).

    python3 bench/torch_alloc/check.py [--policy stitch]    (python/ on PYTHONPATH or found from here)

One line per check, PASS or FAIL (or SKIP), exit 1 if any failed:
  stats        memory_stats()["allocated_bytes.all.current"] grows by the live tensors' storage sizes
               rounded up to 512 bytes (PyTorch's rule), and torch.cuda.memory_allocated() (patched) agrees
  empty_cache  after freeing 2 GiB, torch.cuda.empty_cache() returns it: device-wide used memory
               (nvidia-smi, else cudaMemGetInfo) drops by at least 1.5 GiB
  streams      a tensor read by a long kernel chain on a side stream, record_stream'ed and freed: its block
               is not handed out until the side stream is done (results intact, active > allocated meanwhile)
  oom          an impossible allocation raises RuntimeError "CUDA out of memory. ..." with vram's
               explanation (vram_torch.is_oom, last_oom), and the process goes on allocating
  snapshot     dump_snapshot's pickle converts with tools/torch_snapshot.py; memory_viz's trace_plot opens it
  two_gpus     (device_count > 1) tensors on cuda:1 from a thread whose current device is 0: per-device
               statistics, the current device unchanged, a copy between them
  graphs       torch.cuda.graph capture is refused with vram_torch's message; a child process that
               bypasses that refusal gets the library's own error on the first allocation in the capture
"""
import argparse
import os
import pickle
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "python"))

results = []


POLICY = "stitch"


def report(name, ok, detail=""):
    tag = "PASS" if ok is True else "SKIP" if ok is None else "FAIL"
    results.append(tag)
    print(f"{tag} {name}: {detail}", flush=True)


def check(name):
    def wrap(fn):
        def run(*a):
            try:
                fn(*a)
            except Exception as e:  # a check that crashes is a failed check
                report(name, False, f"{type(e).__name__}: {e}")
        return run
    return wrap


def smi_used(dev):
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i",
                              str(dev)], capture_output=True, text=True, timeout=20).stdout.strip()
        return int(out.splitlines()[0]) << 20, "nvidia-smi"
    except Exception:
        import torch
        free, total = torch.cuda.mem_get_info(dev)
        return total - free, "cudaMemGetInfo"


@check("stats")
def stats(torch, vt):
    torch.cuda.synchronize()
    before = vt.memory_stats()["allocated_bytes.all.current"]
    sizes = [1, 100, 511, 512, 513, 1000, 4096, (1 << 20) - 1, 1 << 20, 3 * (1 << 20) + 7, 123456789]
    ts = [torch.empty(n, dtype=torch.uint8, device="cuda") for n in sizes]
    ts.append(torch.empty(1000, 1000, dtype=torch.float32, device="cuda"))
    view = ts[-1][10:20]    # a view: no storage of its own
    expected = sum(-(-t.untyped_storage().nbytes() // 512) * 512 for t in ts)
    st = vt.memory_stats()
    got = st["allocated_bytes.all.current"] - before
    patched = torch.cuda.memory_allocated() - before
    # stitch hands out exactly the rounded request; PyTorch's policy (and vram's "pytorch") may hand out a whole
    # cached block when what would be left is too small to split (under 1 MiB in the large pool): allocated then
    # counts the block, as torch.cuda.memory_allocated does natively
    slack = 0 if POLICY == "stitch" else len(ts) * (1 << 20)
    ok = got == patched and expected <= got <= expected + slack and \
        st["requested_bytes.all.current"] >= sum(sizes) and view.numel() == 10000
    report("stats", ok, f"allocated grew {got} B (torch.cuda.memory_allocated: {patched}), live storages rounded to "
                        f"512: {expected} B (policy {POLICY}: up to {slack} B more); reserved "
                        f"{st['reserved_bytes.all.current']} B")
    del ts, view


@check("empty_cache")
def empty_cache(torch, vt):
    x = torch.empty(2 << 30, dtype=torch.uint8, device="cuda")
    x.fill_(1)
    torch.cuda.synchronize()
    del x
    res = vt.memory_stats()["reserved_bytes.all.current"]
    used0, how = smi_used(0)
    torch.cuda.empty_cache()
    time.sleep(0.3)
    used1, _ = smi_used(0)
    res1 = vt.memory_stats()["reserved_bytes.all.current"]
    drop = used0 - used1
    report("empty_cache", drop >= 1.5 * (1 << 30) and res1 < res,
           f"{how} used {used0 >> 20} -> {used1 >> 20} MiB (drop {drop >> 20} MiB); vram reserved {res >> 20} -> "
           f"{res1 >> 20} MiB")


@check("streams")
def streams(torch, vt):
    n = 4096
    x = torch.randn(n, n, device="cuda")
    w = torch.randn(n, n, device="cuda") / n ** 0.5
    ref = x.clone()
    for _ in range(20):
        ref = torch.tanh(ref @ w)
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    old = x.data_ptr()
    with torch.cuda.stream(s):
        torch.cuda._sleep(200_000_000)     # ~0.1 s of GPU time before the chain reads x
        y = x
        for _ in range(20):
            y = torch.tanh(y @ w)
    x.record_stream(s)
    del x                                  # freed on the default stream while s still reads it
    st = vt.memory_stats()
    pending = st["active_bytes.all.current"] - st["allocated_bytes.all.current"]
    z = torch.full((n, n), float("nan"), device="cuda")   # same size, default stream, garbage at once
    reused = z.data_ptr() == old
    torch.cuda.synchronize()
    same = bool(torch.allclose(y, ref, rtol=1e-3, atol=1e-5))   # NaN had x's block been reused
    report("streams", same and not reused and pending >= n * n * 4,
           f"side-stream result {'intact' if same else 'CORRUPTED'}; block reused before the stream was done: "
           f"{reused}; pending free bytes {pending}")


@check("oom")
def oom(torch, vt):
    try:
        torch.empty(1 << 44, dtype=torch.uint8, device="cuda")   # 16 TiB
        report("oom", False, "16 TiB allocation did not fail")
        return
    except Exception as e:
        err = e                                                    # `e` is unbound after the except block
        msg = str(e)
        kind = type(e).__name__
    x = torch.ones(1 << 20, device="cuda")                         # the process goes on
    ok = vt.is_oom(err) and msg.startswith("CUDA out of memory.") and "vram_torch (policy" in msg and \
        vt.last_oom() and float(x.sum()) == float(1 << 20)
    # one the device could hold but not now: vram's full explanation (reserved, allocated, largest block)
    free, total = torch.cuda.mem_get_info()
    held = torch.empty(free - (256 << 20), dtype=torch.uint8, device="cuda")
    try:
        torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
        report("oom", False, "1 GiB on a full device did not fail")
        return
    except RuntimeError as e2:
        err2 = e2
        msg2 = str(e2)
    del held
    ok = ok and vt.is_oom(err2) and "vram holds" in msg2
    report("oom", ok, f"{kind}: {msg[:200]} ... and on a full device: {msg2[:600]}")


@check("snapshot")
def snapshot(torch, vt):
    vt.record_memory_history(max_entries=100000)
    a = [torch.empty(n << 20, device="cuda") for n in (1, 3, 9)]
    del a[1]
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "s.pickle")
        torch.cuda.memory._dump_snapshot(p)          # patched: vram's snapshot
        snap = pickle.load(open(p, "rb"))
        sys.path.insert(0, os.path.join(REPO, "tools"))
        import torch_snapshot as conv
        rows, peak_a, peak_r, _, _ = conv.convert(p, conv.load(p), torch.cuda.current_device())
        viz = "memory_viz: not tried"
        try:
            from torch.cuda import _memory_viz
            html = _memory_viz.trace_plot(snap)
            viz = f"memory_viz trace_plot: {len(html)} chars of HTML"
        except Exception as e:
            viz = f"memory_viz trace_plot failed: {type(e).__name__}: {e}"
    vt.record_memory_history(enabled=None)
    ok = len(snap["segments"]) > 0 and len(rows) >= 4 and "failed" not in viz
    report("snapshot", ok, f"{len(snap['segments'])} segments, {len(rows)} trace events -> vram replay rows, "
                           f"peak allocated {peak_a}; {viz}")


@check("two_gpus")
def two_gpus(torch, vt):
    if torch.cuda.device_count() < 2:
        report("two_gpus", None, "one GPU")
        return
    torch.cuda.set_device(0)
    b1 = vt.memory_stats(1)["allocated_bytes.all.current"]
    t1 = torch.ones(5 << 20, device="cuda:1")
    cur = torch.cuda.current_device()
    t0 = t1.to("cuda:0")
    s1 = vt.memory_stats(1)["allocated_bytes.all.current"] - b1
    ok = cur == 0 and s1 == 20 << 20 and float(t0.sum()) == float(5 << 20)
    del t1
    torch.cuda.synchronize(1)
    report("two_gpus", ok, f"cuda:1 allocated +{s1} B, current device after allocating there: {cur}")


@check("graphs")
def graphs(torch, vt):
    x = torch.ones(1024, device="cuda")
    g = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(g):
            y = x * 2  # noqa: F841
        report("graphs", False, "capture was not refused")
        return
    except RuntimeError as e:
        first = str(e)
    # the library's own refusal, with the Python-level one bypassed (a child: a failed capture may leave
    # the CUDA context unusable)
    r = subprocess.run([sys.executable, __file__, "--raw-graph", "--policy", vt._state["policy"]],
                       capture_output=True, text=True, timeout=120)
    ok = "CUDA graph capture is not supported" in first and "RAW-GRAPH-REFUSED" in r.stdout
    report("graphs", ok, f"torch.cuda.graph: {first[:120]}...; in the library: "
                         f"{(r.stdout + r.stderr).strip().splitlines()[-1][:200] if (r.stdout + r.stderr).strip() else r.returncode}")


def raw_graph(torch, vt):
    orig = vt._state["originals"][("CUDAGraph", "capture_begin")]
    torch.cuda.CUDAGraph.capture_begin = orig
    x = torch.ones(1024, device="cuda")
    g = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(g):
            y = x * 2  # noqa: F841
        print("RAW-GRAPH-CAPTURED")
    except Exception as e:
        chain, c = [], e
        while c is not None:
            chain.append(str(c))
            c = c.__context__ or c.__cause__
        print("RAW-GRAPH-REFUSED" if any("CUDA graph capture" in m for m in chain) else "RAW-GRAPH-OTHER",
              " | ".join(m[:160] for m in chain))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--policy", default="stitch")
    ap.add_argument("--raw-graph", action="store_true")
    a = ap.parse_args()
    global POLICY
    POLICY = a.policy
    import torch
    import vram_torch as vt
    vt.enable(policy=a.policy)
    if a.raw_graph:
        raw_graph(torch, vt)
        return 0
    print(f"== vram_torch checks, policy {a.policy}, torch {torch.__version__}, "
          f"{torch.cuda.device_count()} x {torch.cuda.get_device_name(0)}", flush=True)
    for fn in (stats, empty_cache, streams, oom, snapshot, two_gpus, graphs):
        fn(torch, vt)
    failed = results.count("FAIL")
    print(f"== {results.count('PASS')} passed, {failed} failed, {results.count('SKIP')} skipped")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
