#!/usr/bin/env bash
# After bench/gpu/validate.sh (its build in build-gpu): GPT-2 124M B=16 T=1024 AdamW clip 1.0, 30 steps on the
# generated corpus: bf16 node by node twice and with a CUDA graph (run-to-run spread of the losses: the fused
# attention's dQ atomics and the sumsq order are the only nondeterminism), and fp16 with dynamic loss scaling.
# Prints the losses per step and the median step time of each run.  bash bench/gpu/extra.sh
set -u -o pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/out/gpu-extra}; mkdir -p "$OUT"
. scripts/gpu-setup.sh
V=${VRAM:-build-gpu/vram}
G="--preset gpt2 --batch 16 --seq 1024 --clip 1.0 --lr 6e-4 --warmup 0 --lr-schedule constant --steps 30 --device cuda --eval-every -1 --json"
$V train $G --precision bf16 > "$OUT/bf16_a.jsonl" 2>&1
$V train $G --precision bf16 > "$OUT/bf16_b.jsonl" 2>&1
VRAM_CUDA_GRAPH=1 $V train $G --precision bf16 > "$OUT/bf16_graph.jsonl" 2>&1
$V train $G --precision fp16 > "$OUT/fp16.jsonl" 2>&1
python3 - "$OUT" <<'PY'
import json, statistics, sys
out = sys.argv[1]
runs = {}
for n in ["bf16_a", "bf16_b", "bf16_graph", "fp16"]:
    recs = [json.loads(l) for l in open(f"{out}/{n}.jsonl") if l.startswith("{")]
    st = [r for r in recs if r.get("event") == "step"]
    sm = [r for r in recs if r.get("event") == "summary"]
    runs[n] = st
    if not st:
        print(n, "no steps:", open(f"{out}/{n}.jsonl").read()[-400:]); continue
    ms = statistics.median(r["ms"] for r in st[5:])
    extra = ""
    if n == "fp16" and sm:
        extra = f", loss scale {sm[-1].get('loss_scale')}, skipped {sm[-1].get('skipped_steps')}"
    print(f"{n:10s} median {ms:.2f} ms = {16 * 1024 / ms * 1000:.0f} tok/s, loss {st[0]['loss']:.4f} -> {st[-1]['loss']:.4f}{extra}")
print("step " + " ".join(f"{k:>7s}" for k in runs))
for i in range(30):
    print(f"{i + 1:4d} " + " ".join(f"{runs[k][i]['loss']:7.4f}" if i < len(runs[k]) else "      -" for k in runs))
PY
