#!/usr/bin/env python3
"""The table of bench/dist/run.sh: reads OUT/dist-<prefix>manifest.txt (one run a line: tag, system, GPUs,
ZeRO level, rc, seconds, command) and each run's outputs, prints per system and GPU count: step ms,
tokens/s (global), scaling efficiency against the system's own 1-GPU run, peak memory per GPU above the
idle baseline (nvidia-smi every 50 ms), MFU, the losses; then vram's ratios to DDP (and FSDP2). Writes
OUT/dist-<prefix>summary.json beside. No torch needed.

  python3 bench/dist/report.py OUT [--prefix xl-] [--warmup 5] [--peak-tflops 989]
"""
import argparse
import json
import os
import statistics
import sys

GiB = 1 << 30
VP, MAXT = 50304, 1024  # GPT-2's padded vocabulary and position table, as vram's gpt presets and torch_gpt2.py


def gpt_params(L, C):
    """Parameters of the GPT-2 of bench/gpu/torch_gpt2.py and vram's presets (tied wte, padded vocabulary)."""
    return VP * C + MAXT * C + L * (12 * C * C + 13 * C) + 2 * C


def flops_per_token(L, C, T):
    """llm.c's estimate: 6N (forward + backward of the matmuls) + 6LCT (causal attention)."""
    return 6 * gpt_params(L, C) + 6 * L * C * T


def json_lines(path):
    out = []
    try:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line.startswith("{"):
                    try:
                        out.append(json.loads(line))
                    except ValueError:
                        pass
    except OSError:
        pass
    return out


def smi_peaks(path, base, n):
    """Per GPU 0..n-1: the largest memory.used sample (MiB) minus that GPU's idle baseline, in bytes."""
    top = {}
    try:
        with open(path) as f:
            for line in f:
                parts = [p.strip() for p in line.split(",")]
                if len(parts) != 2:
                    continue
                try:
                    i, mib = int(parts[0]), float(parts[1])
                except ValueError:
                    continue
                top[i] = max(top.get(i, 0.0), mib)
    except OSError:
        return None
    if not top:
        return None
    return [max(top.get(i, 0.0) - base.get(i, 0.0), 0.0) * (1 << 20) for i in range(n)]


def load_vram(path, warmup):
    recs = json_lines(path)
    steps = [r for r in recs if r.get("event") == "step"]
    summ = [r for r in recs if r.get("event") == "summary"]
    if not steps:
        return None
    skip = min(warmup, len(steps) - 1)
    ms = statistics.median(s["ms"] for s in steps[skip:])
    tokens = steps[-1]["tokens"]  # global tokens per step (B x T x accum x ranks)
    r = {"median_ms": ms, "tokens_per_s": tokens / ms * 1000, "loss_first": steps[0]["loss"],
         "loss_last": steps[-1]["loss"], "steps": len(steps)}
    if summ:
        m = summ[-1].get("memory", {})
        r["own_memory"] = m.get("process_peak") or (m.get("run_arena", 0) + m.get("context", 0))
        r["own_memory_what"] = "rank 0: process peak (NVML)" if m.get("process_peak") else "rank 0: arena + context"
        r["arena"] = m.get("run_arena")
        r["summary"] = True
    return r


def load_torch(path):
    recs = [r for r in json_lines(path) if "tokens_per_s" in r]
    if not recs:
        return None
    t = recs[-1]
    own = max(res + ctx for res, ctx in zip(t["max_reserved"], t["context"]))
    return {"median_ms": t["median_ms"], "tokens_per_s": t["tokens_per_s"], "loss_first": t["losses"][0],
            "loss_last": t["losses"][-1], "steps": t["steps"], "own_memory": own,
            "own_memory_what": "max over ranks: max_memory_reserved + context", "torch": t.get("torch"),
            "device": t.get("device")}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--prefix", default="")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--peak-tflops", type=float, default=989.0, help="bf16 dense peak per GPU (H100/H200 SXM: 989)")
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--channels", type=int, default=768)
    ap.add_argument("--seq", type=int, default=1024)
    a = ap.parse_args()
    out, pre = a.out, a.prefix
    base = {}
    for line in open(os.path.join(out, "dist-baseline.txt")) if os.path.exists(os.path.join(out, "dist-baseline.txt")) else []:
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and parts[0].isdigit():
            base[int(parts[0])] = float(parts[1])
    man = os.path.join(out, f"dist-{pre}manifest.txt")
    if not os.path.exists(man):
        sys.exit(f"report: no {man}")
    fpt = flops_per_token(a.layers, a.channels, a.seq)
    rows = []
    for line in open(man):
        f = line.rstrip("\n").split("\t")
        if len(f) < 6:
            continue
        tag, system, n, zero, rc, secs = f[0], f[1], int(f[2]), f[3], f[4], f[5]
        key = f"vram-z{zero}" if system == "vram" else system
        res = load_vram(os.path.join(out, f"dist-{tag}.json"), a.warmup) if system == "vram" else \
            load_torch(os.path.join(out, f"dist-{tag}.json"))
        row = {"tag": tag, "system": key, "gpus": n, "rc": rc, "seconds": secs, "result": res,
               "smi_peak": smi_peaks(os.path.join(out, f"dist-{tag}.smi.txt"), base, n)}
        if res:
            row["mfu"] = res["tokens_per_s"] * fpt / (n * a.peak_tflops * 1e12)
        rows.append(row)

    one = {}  # tokens/s of each system on 1 GPU (vram's ZeRO 1/2 run at 1 GPU only as ZeRO 0)
    for r in rows:
        if r["gpus"] == 1 and r["result"]:
            one[r["system"]] = r["result"]["tokens_per_s"]
    for r in rows:
        b = one.get(r["system"]) or (one.get("vram-z0") if r["system"].startswith("vram-") else None)
        r["scaling"] = r["result"]["tokens_per_s"] / (r["gpus"] * b) if r["result"] and b else None

    print(f"model L={a.layers} C={a.channels} T={a.seq}: N={gpt_params(a.layers, a.channels):,} parameters, "
          f"{fpt / 1e9:.3f} GFLOP per token (6N + 6LCT); MFU against {a.peak_tflops:g} TFLOP/s per GPU")
    print("peak/GPU: nvidia-smi memory.used above the idle baseline, largest GPU [and each GPU]; own: the "
          "system's figure (vram: NVML process peak of rank 0; torch: max_memory_reserved + context, max over ranks)")
    hdr = f"{'system':9s} {'GPUs':>4s} {'step ms':>8s} {'tokens/s':>11s} {'scaling':>7s} {'MFU':>6s} " \
          f"{'peak/GPU GiB':>12s} {'own GiB':>7s} {'loss 1st->last':>15s}  per GPU"
    print(hdr)
    for r in rows:
        res, pk = r["result"], r["smi_peak"]
        pks = f"{max(pk) / GiB:12.2f}" if pk else f"{'?':>12s}"
        each = "[" + " ".join(f"{x / GiB:.2f}" for x in pk) + "]" if pk else ""
        if not res:
            print(f"{r['system']:9s} {r['gpus']:4d} FAILED (rc {r['rc']}, {r['seconds']} s; dist-{r['tag']}.err.txt)"
                  + (f", peak/GPU {max(pk) / GiB:.2f} GiB {each}" if pk else ""))
            continue
        sc = f"{r['scaling']:7.3f}" if r["scaling"] is not None else f"{'-':>7s}"
        own = f"{res['own_memory'] / GiB:7.2f}" if res.get("own_memory") else f"{'?':>7s}"
        loss = lambda x: f"{x:.3f}" if x is not None else "?"  # a run that ended early (nan loss) has no last
        print(f"{r['system']:9s} {r['gpus']:4d} {res['median_ms']:8.1f} {res['tokens_per_s']:11.0f} {sc} "
              f"{100 * r['mfu']:5.1f}% {pks} {own} {loss(res['loss_first']):>7s}->{loss(res['loss_last'])}  {each}")

    print("\nvram / torch, same GPU count (tokens/s ratio, peak memory per GPU ratio; > 1 tokens/s and < 1 memory "
          "favour vram)")
    by = {(r["system"], r["gpus"]): r for r in rows}
    ratios = []
    for (sys_, n), r in sorted(by.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        if not sys_.startswith("vram-") or not r["result"]:
            continue
        for peer in ("ddp", "fsdp2"):
            p = by.get((peer, n))
            if not p or not p["result"]:
                continue
            tok = r["result"]["tokens_per_s"] / p["result"]["tokens_per_s"]
            mem = max(r["smi_peak"]) / max(p["smi_peak"]) if r["smi_peak"] and p["smi_peak"] and max(p["smi_peak"]) else None
            ratios.append({"vram": sys_, "peer": peer, "gpus": n, "tokens_per_s": tok, "memory": mem})
            print(f"  {sys_:8s} / {peer:5s} on {n} GPU{'s' if n > 1 else ' '}: tokens/s x{tok:.3f}"
                  + (f", peak memory per GPU x{mem:.3f}" if mem is not None else ", memory ?"))
    if not ratios:
        print("  (no pair with results)")
    with open(os.path.join(out, f"dist-{pre}summary.json"), "w") as f:
        json.dump({"layers": a.layers, "channels": a.channels, "seq": a.seq, "params": gpt_params(a.layers, a.channels),
                   "flops_per_token": fpt, "peak_tflops": a.peak_tflops, "baseline_mib": base, "runs": rows,
                   "ratios": ratios}, f, indent=1)


if __name__ == "__main__":
    main()
