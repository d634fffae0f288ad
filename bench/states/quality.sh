#!/usr/bin/env bash
# Training quality of the optimizer-state formats: one GPT trained on real text with fp32, bf16 and 8-bit
# AdamW state (and bf16 weights without a master copy where the device runs bf16), same init, same batches,
# held-out loss every EVAL steps. Prints a table (final held-out loss and its ratio to the first run's) and writes
# the curves as an SVG plot. CPU by default (DEVICE=cuda for the GPU, which adds bf16 + no master).
#     bash bench/states/quality.sh            # from the repo root, after building ./build/vram
# The text: the licence texts Debian ships in every installation (/usr/share/common-licenses), read as bytes,
# or CORPUS=FILE (any text). MODEL, LR (1e-3), EXTRA (flags added to every run) and RUNS ("name:flag,flag ...", the
# first run is the reference the others are compared with) change what is trained; bench/gpu/state_quality.sh
# uses them for GPT-2 124M on the H100.
set -euo pipefail
cd "$(dirname "$0")/../.."
VRAM=${VRAM:-./build/vram}
OUT=${OUT:-out/states}; mkdir -p "$OUT"
STEPS=${STEPS:-600}; EVAL=${EVAL:-50}; DEVICE=${DEVICE:-cpu}; LR=${LR:-1e-3}
if [ -n "${CORPUS:-}" ]; then cp "$CORPUS" "$OUT/corpus.txt"; else cat /usr/share/common-licenses/* > "$OUT/corpus.txt"; fi
MODEL=${MODEL:---preset small --vocab 256 --seq 128 --batch 16}
common="$MODEL --data $OUT/corpus.txt --steps $STEPS --eval-every $EVAL --eval-batches 16 --lr $LR --clip 1.0 --device $DEVICE --json ${EXTRA:-}"
runs="fp32:--optim-state=fp32 bf16:--optim-state=bf16 8bit:--optim-state=8bit"
[ "$DEVICE" = cuda ] && runs="$runs bf16w-8bit:--precision=bf16,--optim-state=8bit,--master=none bf16w:--precision=bf16"
runs=${RUNS:-$runs}
for r in $runs; do
  name=${r%%:*}; flags=$(echo "${r#*:}" | tr ',=' '  ')
  echo "== $name: $VRAM train $common $flags"
  "$VRAM" train $common $flags > "$OUT/$name.jsonl" 2> "$OUT/$name.err" || { tail -3 "$OUT/$name.err"; exit 1; }
done
python3 - "$OUT" $(for r in $runs; do echo "${r%%:*}"; done) <<'PY'
import json, sys
out, names = sys.argv[1], sys.argv[2:]
curves = {}
for n in names:
    ev = [json.loads(l) for l in open(f"{out}/{n}.jsonl") if l.startswith("{")]
    curves[n] = [(e["step"], e["val_loss"]) for e in ev if e.get("event") == "eval"]
ref = curves[names[0]][-1][1]
print(f"{'run':12s} {'final held-out loss':>20s} {'vs ' + names[0]:>12s} {'max |diff| on the way':>22s}")
r0 = dict(curves[names[0]])
for n in names:
    s, l = curves[n][-1]
    d = max(abs(v - r0[k]) for k, v in curves[n] if k in r0)
    print(f"{n:12s} {l:20.4f} {100 * (l / ref - 1):+11.2f}% {d:22.4f}   (step {s})")
W, H, P = 640, 400, 50
xs = [s for c in curves.values() for s, _ in c]; ys = [l for c in curves.values() for _, l in c]
x0, x1, y0, y1 = min(xs), max(xs), min(ys), max(ys)
X = lambda s: P + (s - x0) / max(x1 - x0, 1) * (W - 2 * P)
Y = lambda l: H - P - (l - y0) / max(y1 - y0, 1e-9) * (H - 2 * P)
colors = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd"]
svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
       f'<rect width="{W}" height="{H}" fill="white"/>',
       f'<text x="{W/2}" y="20" text-anchor="middle">held-out loss, AdamW state formats (same init and batches)</text>',
       f'<line x1="{P}" y1="{H-P}" x2="{W-P}" y2="{H-P}" stroke="black"/><line x1="{P}" y1="{P}" x2="{P}" y2="{H-P}" stroke="black"/>',
       f'<text x="{W/2}" y="{H-15}" text-anchor="middle">step</text>']
for k in range(5):
    l = y0 + (y1 - y0) * k / 4; s = x0 + (x1 - x0) * k / 4
    svg.append(f'<text x="{P-5}" y="{Y(l)+4}" text-anchor="end">{l:.2f}</text>')
    svg.append(f'<text x="{X(s)}" y="{H-P+15}" text-anchor="middle">{s:.0f}</text>')
for i, (n, c) in enumerate(curves.items()):
    pts = " ".join(f"{X(s):.1f},{Y(l):.1f}" for s, l in c)
    svg.append(f'<polyline fill="none" stroke="{colors[i % 5]}" stroke-width="1.5" points="{pts}"/>')
    svg.append(f'<text x="{W-P-120}" y="{P+15*i}" fill="{colors[i % 5]}">{n}: {c[-1][1]:.4f}</text>')
svg.append("</svg>")
open(f"{out}/curves.svg", "w").write("\n".join(svg))
print(f"plot: {out}/curves.svg")
PY
