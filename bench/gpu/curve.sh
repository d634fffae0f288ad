#!/usr/bin/env bash
# Loss curves of vram and PyTorch eager from the same initial weights and the same batches (GPT-2 124M,
# B=16 T=1024, AdamW lr 6e-4 warmup 5 cosine to 10%, wd 0.1, clip 1.0), at PREC=fp32 (default: both
# exact fp32, TF32 off) or PREC=bf16, STEPS=50. Needs build-gpu/vram (bench/gpu/validate.sh builds it).
#     PREC=fp32 bash bench/gpu/curve.sh
set -u -o pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/out/gpu-curve}; mkdir -p "$OUT"
W=/tmp/vram-curve; rm -rf "$W"; mkdir -p "$W"
. scripts/gpu-setup.sh
V=${VRAM:-build-gpu/vram}; P=${PREC:-fp32}; S=${STEPS:-50}
H="--lr 6e-4 --warmup 5 --min-lr-frac 0.1 --steps $S"
$V train --preset gpt2 --seq 1024 --batch 16 --precision "$P" --device cuda $H --lr-schedule cosine --weight-decay 0.1 \
  --beta1 0.9 --beta2 0.95 --clip 1.0 --eval-every -1 --save-init "$W/init.bin" --dump-batches "$W/batches.bin" --json \
  > "$OUT/curve_vram_$P.jsonl" 2> "$OUT/curve_vram_$P.err" || { tail -3 "$OUT/curve_vram_$P.err"; exit 1; }
python3 bench/gpu/torch_gpt2.py --mode eager --precision "$P" --batch 16 --seq 1024 $H --schedule cosine \
  --weight-decay 0.1 --init "$W/init.bin" --tokens "$W/batches.bin" --vocab-loss real > "$OUT/curve_torch_$P.json" \
  2> "$OUT/curve_torch_$P.err" || { tail -3 "$OUT/curve_torch_$P.err"; exit 1; }
python3 - "$OUT/curve_vram_$P.jsonl" "$OUT/curve_torch_$P.json" "$P" <<'PY'
import json, sys
v = [json.loads(l)["loss"] for l in open(sys.argv[1]) if '"event":"step"' in l.replace(" ", "")]
t = json.loads(open(sys.argv[2]).read().strip().splitlines()[-1])["losses"]
n = min(len(v), len(t))
d = [abs(a - b) for a, b in zip(v, t)]
print(f"{sys.argv[3]}: step vram torch |d|")
for i in range(n):
    print(f"{i + 1:4d} {v[i]:9.5f} {t[i]:9.5f} {d[i]:8.5f}")
k = max(range(n), key=lambda i: d[i])
print(f"{sys.argv[3]}: max |dloss| {d[k]:.5f} at step {k + 1} over {n} steps; final vram {v[n - 1]:.5f} torch {t[n - 1]:.5f}")
PY
