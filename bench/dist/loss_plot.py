#!/usr/bin/env python3
"""Loss curves of several vram runs as one SVG (no plotting library needed).

    python3 bench/dist/loss_plot.py OUT.svg LABEL=RUN.txt [LABEL=RUN.txt ...]

RUN.txt: a `vram train` log (its "step N/M | loss X" lines) or JSON Lines (--json). Prints, per run, the loss
at a few steps and the largest relative difference to the first run over the steps they share."""
import json, re, sys


def losses(path):
    out = {}
    for line in open(path, errors="replace"):
        line = line.strip()
        if line.startswith("{"):
            try:
                j = json.loads(line)
            except ValueError:
                continue
            if j.get("event") == "step" and "loss" in j:
                out[int(j["step"])] = float(j["loss"])
            continue
        m = re.search(r"step\s+(\d+)/\d+\s*\|\s*loss\s+([-0-9.eE+]+)", line)
        if m:
            out[int(m.group(1))] = float(m.group(2))
    return out


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    runs = []
    for arg in sys.argv[2:]:
        label, path = arg.rsplit("=", 1)
        runs.append((label, losses(path)))
    W, H, L, R, T, B = 720, 420, 60, 20, 30, 40
    steps = sorted({s for _, d in runs for s in d})
    vals = [v for _, d in runs for v in d.values()]
    if not steps:
        print("loss_plot.py: no losses found")
        return 1
    x0, x1, y0, y1 = steps[0], steps[-1], min(vals), max(vals)
    X = lambda s: L + (W - L - R) * (s - x0) / max(1, x1 - x0)
    Y = lambda v: T + (H - T - B) * (y1 - v) / max(1e-9, y1 - y0)
    colors = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e"]
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<line x1="{L}" y1="{H - B}" x2="{W - R}" y2="{H - B}" stroke="black"/>',
           f'<line x1="{L}" y1="{T}" x2="{L}" y2="{H - B}" stroke="black"/>',
           f'<text x="{W / 2}" y="{H - 8}" text-anchor="middle">step</text>',
           f'<text x="14" y="{H / 2}" transform="rotate(-90 14 {H / 2})" text-anchor="middle">training loss</text>']
    for k in range(5):
        v = y0 + (y1 - y0) * k / 4
        svg.append(f'<text x="{L - 6}" y="{Y(v) + 4:.1f}" text-anchor="end">{v:.2f}</text>')
        svg.append(f'<line x1="{L}" y1="{Y(v):.1f}" x2="{W - R}" y2="{Y(v):.1f}" stroke="#ddd"/>')
    for s in (x0, (x0 + x1) // 2, x1):
        svg.append(f'<text x="{X(s):.1f}" y="{H - B + 16}" text-anchor="middle">{s}</text>')
    ref = runs[0][1]
    for i, (label, d) in enumerate(runs):
        c = colors[i % len(colors)]
        pts = " ".join(f"{X(s):.1f},{Y(d[s]):.1f}" for s in sorted(d))
        dash = ' stroke-dasharray="6 4"' if i else ""
        svg.append(f'<polyline fill="none" stroke="{c}" stroke-width="1.5"{dash} points="{pts}"/>')
        svg.append(f'<text x="{W - R - 10}" y="{T + 16 * (i + 1)}" text-anchor="end" fill="{c}">{label}</text>')
        shared = [s for s in d if s in ref]
        rel = max((abs(d[s] - ref[s]) / abs(ref[s]) for s in shared), default=0.0)
        marks = ", ".join(f"{s}: {d[s]:.4f}" for s in sorted(d)[:: max(1, len(d) // 5)])
        print(f"{label}: {len(d)} steps; {marks}; largest relative difference to {runs[0][0]}: {rel:.2e}")
    svg.append("</svg>")
    open(sys.argv[1], "w").write("\n".join(svg) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
