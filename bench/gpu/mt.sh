#!/usr/bin/env bash
# Multi-tensor apply (the default: the global-norm sumsq over all gradients in one pass, the AdamW
# update of all parameters in one launch) against the per-node optimizer (VRAM_MULTI_TENSOR=0: one
# sumsq and one AdamW launch per parameter tensor, ~300 per step), in ONE command on the GPU machine
# (repo root, .deps carried):
#     bash bench/gpu/mt.sh            # STEPS=30 by default
# 1. builds vram, test_exec_cuda and test_kernels_cuda_mt (Release, sm_90) into build-gpu-mt/;
# 2. test_kernels_cuda_mt (multi-tensor kernels == per-tensor kernels, bit for bit) and test_exec_cuda
#    (multi_tensor_equals_nodes: tiny bf16 GPT, per-node vs multi-tensor planned / CUDA graph /
#    dynamic, state bit for bit when the clip factors are equal; plan == run);
# 3. vram GPT-2 124M bf16 B=16 T=1024 (run.sh's flags), per-node and multi-tensor, node by node and
#    with VRAM_CUDA_GRAPH=1: step ms (median of steps 6..), the losses of each against per-node.
set -u -o pipefail
cd "$(dirname "$0")/../.."
export OUT=${OUT:-$PWD/out/gpu-bench}; mkdir -p "$OUT"
STEPS=${STEPS:-30}
. bench/gpu/lib.sh # (its own build folder below: the multi-tensor test target)
B=build-gpu-mt
cmake -S . -B $B -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_BUILD_TYPE=Release > "$OUT/mt_cmake.log" 2>&1
cmake --build $B -j16 --target vram_cli test_exec_cuda test_kernels_cuda_mt > "$OUT/mt_build.log" 2>&1 ||
  { tail -30 "$OUT/mt_build.log"; exit 1; }
echo "== test_kernels_cuda_mt"
timeout 120 $B/test_kernels_cuda_mt > "$OUT/test_kernels_cuda_mt.log" 2>&1; echo "rc $?"
grep -E "^mt |PASSED|FAILED|FAIL|SKIP" "$OUT/test_kernels_cuda_mt.log" | tail -40
echo "== test_exec_cuda"
timeout 300 $B/test_exec_cuda > "$OUT/test_exec_cuda_mt.log" 2>&1; echo "rc $?"
grep -E "fp32:|bf16:|cuda graph:|multi-tensor|PASSED|FAILED|FAIL|SKIP|error" "$OUT/test_exec_cuda_mt.log" | tail -60
for mode in nodes mt nodes_graph mt_graph; do
  case $mode in
    nodes) env="VRAM_MULTI_TENSOR=0 VRAM_CUDA_GRAPH=0" ;;
    mt) env="VRAM_MULTI_TENSOR=1 VRAM_CUDA_GRAPH=0" ;;
    nodes_graph) env="VRAM_MULTI_TENSOR=0 VRAM_CUDA_GRAPH=1" ;;
    mt_graph) env="VRAM_MULTI_TENSOR=1 VRAM_CUDA_GRAPH=1" ;;
  esac
  echo "== vram GPT-2 124M bf16, $mode ($env), $STEPS steps"
  env $env timeout 150 $B/vram train --preset gpt2 --batch 16 --seq 1024 --precision bf16 --clip 1.0 --lr 6e-4 \
    --warmup 0 --lr-schedule constant --steps "$STEPS" --device cuda --eval-every -1 --json \
    > "$OUT/vram_gpt2_$mode.jsonl" 2> "$OUT/vram_gpt2_$mode.err"
  echo "rc $?"; tail -2 "$OUT/vram_gpt2_$mode.err"
done
python3 - "$OUT" <<'PY' | tee "$OUT/mt_table.txt"
import json, statistics, sys
out = sys.argv[1]
def vram(f):
    try:
        recs = [json.loads(l) for l in open(f"{out}/{f}") if l.startswith("{")]
    except Exception:
        return None
    steps = [r for r in recs if r.get("event") == "step"]
    summ = [r for r in recs if r.get("event") == "summary"]
    if not steps: return None
    ms = statistics.median([s["ms"] for s in steps[5:]] or [s["ms"] for s in steps])
    return {"ms": ms, "tok": 16 * 1024 / ms * 1000, "loss": [s["loss"] for s in steps],
            "norm": [s.get("grad_norm") for s in steps], "m": summ[-1]["memory"] if summ else {}}
runs = {m: vram(f"vram_gpt2_{m}.jsonl") for m in ("nodes", "mt", "nodes_graph", "mt_graph")}
base = runs["nodes"]
for name, r in runs.items():
    if not r:
        print(f"{name:12s} no result"); continue
    m = r["m"]
    line = (f"{name:12s} {r['ms']:7.2f} ms {r['tok']:9.0f} tok/s  arena planned {m.get('plan_arena')} allocated "
            f"{m.get('run_arena')} ({'equal' if m.get('plan_arena') == m.get('run_arena') else 'DIFFER'})")
    if base and r is not base:
        d = max(abs(a - b) for a, b in zip(r["loss"], base["loss"]))
        line += f"; {base['ms'] - r['ms']:+.2f} ms vs nodes; losses vs nodes max |diff| {d:.3g}"
    print(line)
PY
