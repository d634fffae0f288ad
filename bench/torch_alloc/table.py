#!/usr/bin/env python3
"""The markdown table of bench/torch_alloc/run.sh from OUT/<workload>-<mode>.json and .smi files.

    python3 bench/torch_alloc/table.py OUT [BASE_MIB]

Per workload, one row per mode: losses against native (bitwise, else the largest difference), peak
reserved and allocated (PyTorch's statistics for native/expandable, vram_torch.memory_stats for vram),
reserved/allocated, nvidia-smi's peak above the idle baseline (50-ms samples), median step time and its
ratio to native, and the mean step time (the total time, which the median hides when a few steps are slow,
e.g. BERT's steps that meet a new sequence length) and its ratio, both over the steps after the warm-up
(workload.py's --warmup, 8: the steps where the allocators still make their device allocations), and the
warm-up's own total with its ratio. With rounds (run.sh's ROUNDS: the
modes run again in turn, OUT/<workload>-<mode>.r2.json, ...), both step times are the median over the rounds of
each run's figure, so that a host whose speed moves between runs does not decide the ratio, and a last column
pairs each round's mean with native's of the same round (runs minutes apart): the median of those ratios and
their range; losses and memory are the first round's. Writes OUT/summary.json too."""
import statistics
import json
import os
import sys

WORKLOADS = ("gpt2", "bert", "resnet50")
MODES = ("native", "expandable", "vram_stitch", "vram_pytorch")
GiB = float(1 << 30)


def mean_ms(r):
    w = r.get("warmup", 2)
    t = r["step_ms"][w:] if len(r["step_ms"]) > w + 2 else r["step_ms"]
    return sum(t) / len(t)


def load(out, w, m, suffix=""):
    try:
        with open(os.path.join(out, f"{w}-{m}{suffix}.json")) as f:
            lines = [l for l in f if l.startswith("{")]
        return json.loads(lines[-1]) if lines else {"error": "no result (see the .log)"}
    except OSError:
        return {"error": "not run"}


def rounds(out, w, m, first):
    """The runs of (w, m) with step times: the first, then .r2, .r3, ... while they exist."""
    runs = [first] if "step_ms" in first else []
    k = 2
    while os.path.exists(os.path.join(out, f"{w}-{m}.r{k}.json")):
        r = load(out, w, m, f".r{k}")
        if "step_ms" in r:
            runs.append(r)
        k += 1
    return runs


def step_times(runs):
    """(median step ms, mean step ms): each the median over the runs of that run's figure."""
    return (statistics.median(r["step_ms_median"] for r in runs), statistics.median(mean_ms(r) for r in runs))


def paired(runs, nat_runs):
    """Each round's mean step against native's of the same round: (median ratio, lowest, highest), or None."""
    q = [mean_ms(a) / mean_ms(b) for a, b in zip(runs, nat_runs)]
    return (statistics.median(q), min(q), max(q)) if len(q) > 1 else None


def smi_peak(out, w, m, base):
    try:
        vals = [int(x) for x in open(os.path.join(out, f"{w}-{m}.smi")).read().split() if x.strip().isdigit()]
        return (max(vals) - base) / 1024 if vals else None
    except OSError:
        return None


def main():
    out = sys.argv[1]
    base = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    summary = {}
    lines = []
    for w in WORKLOADS:
        rs = {m: load(out, w, m) for m in MODES}
        if "skipped" in rs["native"]:
            lines += [f"\n**{w}**: skipped ({rs['native']['skipped']})"]
            continue
        nat = rs["native"]
        runs = {m: rounds(out, w, m, rs[m]) for m in MODES}
        t = {m: step_times(runs[m]) for m in MODES if runs[m]}
        nr = max(len(v) for v in runs.values())
        lines += [f"\n**{w}**" + (f" ({nat.get('steps')} steps, {nat.get('device', '')}, torch {nat.get('torch', '')}"
                                  + (f"; step times: the median of {nr} rounds" if nr > 1 else "") + ")"
                                  if "losses" in nat else ""),
                  "", "| mode | losses vs native | peak reserved GiB | peak allocated GiB | reserved/allocated "
                  "| nvidia-smi peak GiB | step ms (median) | vs native | step ms (mean) | vs native | paired by round "
                  "| warm-up ms | vs native |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for m in MODES:
            r = rs[m]
            if "losses" not in r:
                lines.append(f"| {m} | {r.get('error') or r.get('skipped')} | | | | | | | | | | | |")
                continue
            if m == "native":
                lv = "(reference) last %.4f" % r["losses"][-1]
            elif "losses" in nat:
                d = max(abs(a - b) for a, b in zip(r["losses"], nat["losses"]))
                lv = "bitwise equal" if r["losses"] == nat["losses"] else f"max diff {d:.2e}"
            else:
                lv = "no native run"
            smi = smi_peak(out, w, m, base)
            ratio = r["peak_reserved"] / r["peak_allocated"] if r["peak_allocated"] else float("nan")
            med, mean = t[m]
            both = "losses" in nat and "native" in t
            vs = f"{100 * (med / t['native'][0] - 1):+.1f}%" if both else ""
            vm = f"{100 * (mean / t['native'][1] - 1):+.1f}%" if both else ""
            pr = paired(runs[m], runs["native"]) if m != "native" and runs["native"] else None
            wu = statistics.median(sum(x["step_ms"][:x.get("warmup", 2)]) for x in runs[m])
            wn = statistics.median(sum(x["step_ms"][:x.get("warmup", 2)]) for x in runs["native"]) if both else 0
            vw = f"{100 * (wu / wn - 1):+.1f}%" if both and wn else ""
            pv = f"{100 * (pr[0] - 1):+.1f}% ({100 * (pr[1] - 1):+.1f}..{100 * (pr[2] - 1):+.1f})" if pr else ""
            lines.append(f"| {m} | {lv} | {r['peak_reserved'] / GiB:.2f} | {r['peak_allocated'] / GiB:.2f} | "
                         f"{ratio:.3f} | {'' if smi is None else f'{smi:.2f}'} | {med:.1f} | {vs} | "
                         f"{mean:.1f} | {vm} | {pv} | {wu:.0f} | {vw} |")
            summary[f"{w}-{m}"] = dict(r, smi_peak_gib=smi, rounds=len(runs[m]), step_ms_rounds_median=med,
                                       step_ms_rounds_mean=mean, paired_vs_native=pr)
    print("\n".join(lines))
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)


if __name__ == "__main__":
    main()
