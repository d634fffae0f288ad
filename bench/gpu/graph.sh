#!/usr/bin/env bash
# vram's CUDA graph mode (VRAM_CUDA_GRAPH=1: step 1 node by node, step 2 captured, later steps
# replayed) against node by node and torch.compile, in ONE command on the GPU machine (repo root,
# .deps carried; a prebuilt build-perf-carry/ with vram + test_exec_cuda is used as build-carry/):
#     bash bench/gpu/graph.sh
# 1. test_exec_cuda (includes cuda_graph_equals_nodes: 7 bf16 steps, graph == nodes, plan == run);
# 2. vram GPT-2 124M bf16 B=16 T=1024 with VRAM_CUDA_GRAPH=1 (the flags of run.sh);
# 3. bench/gpu/run.sh with VRAM_CUDA_GRAPH=0 (node-by-node vram: graph mode is the default since 2026-11-26),
#    torch eager, torch.compile;
# 4. a table: graph mode vs node by node vs torch.compile, and the losses of both vram runs.
set -u -o pipefail
cd "$(dirname "$0")/../.."
export OUT=${OUT:-$PWD/out/gpu-bench}; mkdir -p "$OUT"
STEPS=${STEPS:-30}
if [ -x build-perf-carry/vram ]; then rm -rf build-carry; cp -r build-perf-carry build-carry; fi
. scripts/gpu-setup.sh
export PATH=/usr/local/cuda/bin:$PATH
BIN=build-carry
if [ ! -x $BIN/vram ] || ldd $BIN/vram $BIN/test_exec_cuda | grep -q "not found"; then
  cmake -S . -B build-gpu -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_BUILD_TYPE=Release > "$OUT/cmake.log" 2>&1
  cmake --build build-gpu -j16 --target vram_cli test_exec_cuda > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
  rm -rf build-carry; mkdir -p build-carry; cp build-gpu/vram build-gpu/test_exec_cuda build-carry/
fi
echo "== test_exec_cuda"
timeout 120 $BIN/test_exec_cuda > "$OUT/test_exec_cuda_graph.log" 2>&1; echo "rc $?"
grep -E "fp32:|bf16:|cuda graph:|PASSED|FAILED|OK|FAIL|SKIP" "$OUT/test_exec_cuda_graph.log"
echo "== vram GPT-2 124M bf16, CUDA graph, $STEPS steps"
VRAM_CUDA_GRAPH=1 timeout 120 $BIN/vram train --preset gpt2 --batch 16 --seq 1024 --precision bf16 --clip 1.0 --lr 6e-4 \
  --warmup 0 --lr-schedule constant --steps "$STEPS" --device cuda --eval-every -1 --json \
  > "$OUT/vram_gpt2_graph.jsonl" 2> "$OUT/vram_gpt2_graph.err"
echo "rc $?"; tail -3 "$OUT/vram_gpt2_graph.err"
VRAM_CUDA_GRAPH=0 bash bench/gpu/run.sh
python3 - "$OUT" <<'PY' | tee "$OUT/graph_table.txt"
import json, statistics, sys
out = sys.argv[1]
def vram(f):
    try:
        recs = [json.loads(l) for l in open(f"{out}/{f}") if l.startswith("{")]
    except Exception as e:
        return None
    steps = [r for r in recs if r.get("event") == "step"]
    summ = [r for r in recs if r.get("event") == "summary"]
    if not steps: return None
    ms = statistics.median([s["ms"] for s in steps[5:]] or [s["ms"] for s in steps])
    m = summ[-1]["memory"] if summ else {}
    return {"ms": ms, "tok": 16 * 1024 / ms * 1000, "loss": [s["loss"] for s in steps], "m": m,
            "all": [s["ms"] for s in steps]}
g, n = vram("vram_gpt2_graph.jsonl"), vram("vram_gpt2.jsonl")
try:
    tc = json.loads(open(f"{out}/torch_compile.json").read().strip().splitlines()[-1])
except Exception:
    tc = None
for name, r in (("vram node by node", n), ("vram CUDA graph", g)):
    if not r:
        print(f"{name}: no result"); continue
    m = r["m"]
    print(f"{name:20s} {r['ms']:7.2f} ms {r['tok']:9.0f} tok/s  arena planned {m.get('plan_arena')} allocated "
          f"{m.get('run_arena')} ({'equal' if m.get('plan_arena') == m.get('run_arena') else 'DIFFER'}), peak "
          f"{m.get('plan_peak')} / {m.get('run_peak')}; steps 1-4 ms {[round(x, 1) for x in r['all'][:4]]}")
    if tc:
        print(f"   vs torch.compile {tc['median_ms']:.2f} ms {tc['tokens_per_s']:.0f} tok/s: x{r['tok'] / tc['tokens_per_s']:.3f}")
if g and n:
    d = max(abs(a - b) for a, b in zip(g["loss"], n["loss"]))
    print(f"losses graph vs nodes: max |diff| {d:.3g} over {min(len(g['loss']), len(n['loss']))} steps; "
          f"last {g['loss'][-1]:.5f} / {n['loss'][-1]:.5f}")
PY
