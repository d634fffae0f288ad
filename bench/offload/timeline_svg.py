#!/usr/bin/env python3
"""One offloaded step of a `vram train --trace` file as an SVG timeline.

Lanes: "GPU compute" (tid 2: each node's span on the GPU, backward in blue, forward in grey),
"GPU copies" (tid 3: gradients down in orange, weights up in green), "host" (tid 1, the host's
update and sumsq nodes of the optimizer phase, in purple). The step drawn is the last complete one.
usage: timeline_svg.py TRACE.json OUT.svg
"""
import json
import sys

trace = json.load(open(sys.argv[1]))
ev = [e for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("tid") in (1, 2, 3)]
steps = sorted({e["args"].get("step", 0) for e in ev if "args" in e})
step = steps[-1] if steps else 0
ev = [e for e in ev if e["args"].get("step") == step]
host = [e for e in ev if e["tid"] == 1 and e.get("cat") == "optimizer" and e["args"]["op"] != "copy"]
gpu = [e for e in ev if e["tid"] == 2]
cp = [e for e in ev if e["tid"] == 3]
if not gpu:
    sys.exit("no GPU spans in the trace (run on cuda with --trace)")
t0 = min(e["ts"] for e in gpu + cp + host)
t1 = max(e["ts"] + e["dur"] for e in gpu + cp + host)
W, X0, lane_h = 1200, 110, 34
scale = (W - X0 - 20) / max(t1 - t0, 1e-9)
lanes = [("GPU compute", gpu), ("GPU copies", cp), ("host update", host)]
out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{70 + lane_h * len(lanes) + 40}" '
       'font-family="sans-serif" font-size="12">',
       f'<text x="10" y="20" font-size="14">vram train --offload optim: step {step}, '
       f'{(t1 - t0) / 1e3:.1f} ms (GPU spans from CUDA events, host spans from the host clock)</text>']


def color(e, lane):
    if lane == 0:
        return "#4a78c2" if e.get("cat") in ("backward", "recompute") else "#9a9a9a"
    if lane == 1:
        return "#e08a2c" if e.get("cat") == "backward" else "#3c9a50"
    return "#8a4fb0"


for k, (name, es) in enumerate(lanes):
    y = 40 + k * lane_h
    out.append(f'<text x="10" y="{y + 20}">{name}</text>')
    out.append(f'<rect x="{X0}" y="{y}" width="{W - X0 - 20}" height="{lane_h - 6}" fill="#f4f4f4"/>')
    for e in es:
        x = X0 + (e["ts"] - t0) * scale
        w = max(e["dur"] * scale, 0.5)
        out.append(f'<rect x="{x:.2f}" y="{y}" width="{w:.2f}" height="{lane_h - 6}" fill="{color(e, k)}">'
                   f'<title>{e["name"]} {e["dur"] / 1e3:.2f} ms</title></rect>')
y = 40 + len(lanes) * lane_h + 16
for i in range(11):
    x = X0 + i * (W - X0 - 20) / 10
    out.append(f'<text x="{x:.0f}" y="{y}" text-anchor="middle">{(t1 - t0) * i / 10 / 1e3:.0f} ms</text>')
legend = [("#9a9a9a", "forward"), ("#4a78c2", "backward"), ("#e08a2c", "gradient down"),
          ("#3c9a50", "weights up"), ("#8a4fb0", "host AdamW / sumsq")]
for i, (c, t) in enumerate(legend):
    out.append(f'<rect x="{X0 + i * 190}" y="{y + 12}" width="12" height="12" fill="{c}"/>'
               f'<text x="{X0 + i * 190 + 16}" y="{y + 22}">{t}</text>')
out.append("</svg>")
open(sys.argv[2], "w").write("\n".join(out))


def busy(spans):
    """Merged [start, end) intervals of a lane."""
    iv = sorted((e["ts"], e["ts"] + e["dur"]) for e in spans)
    out = []
    for a, b in iv:
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


def overlap(xs, ys):
    """Time of the xs intervals during which ys is busy."""
    t, j = 0.0, 0
    for a, b in xs:
        for c, d in ys:
            t += max(0.0, min(b, d) - max(a, c))
    return t


g = busy([e for e in gpu if e.get("cat") in ("backward", "recompute")])
down = busy([e for e in cp if e.get("cat") == "backward"])
hs = busy(host)
tot = lambda iv: sum(b - a for a, b in iv)
print(f"step {step}: {(t1 - t0) / 1e3:.1f} ms; backward on the GPU {tot(g) / 1e3:.1f} ms; copies down "
      f"{tot(down) / 1e3:.1f} ms, {overlap(down, g) / max(tot(down), 1e-9) * 100:.0f}% of it during the backward; "
      f"host updates {tot(hs) / 1e3:.1f} ms, {overlap(hs, g) / max(tot(hs), 1e-9) * 100:.0f}% of it during the "
      f"backward; {len(gpu)} GPU nodes, {len(cp)} copies, {len(host)} host nodes")
