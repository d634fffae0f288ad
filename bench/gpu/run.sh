#!/usr/bin/env bash
# vram against PyTorch on GPT-2 124M training (B=16, T=1024, AdamW, bf16, clip 1.0), in ONE command on
# the GPU machine, from the repo root with .deps carried:   bash bench/gpu/run.sh
#
# 1. builds vram (Release, CMAKE_CUDA_ARCHITECTURES=90) into build-gpu, unless build-carry/ holds a
#    vram and test_exec_cuda built elsewhere for sm_90 whose libraries all resolve here;
# 2. correctness: tests/exec/test_exec_cuda (fp32 CUDA step == CPU step, bf16 close, plan == run),
#    and a tiny GPT trained 5 steps in fp32 on cpu and on cuda (losses side by side);
# 3. vram train --preset gpt2 --precision bf16 for STEPS steps (median step time -> tokens/s; the arena);
# 4. the same model in PyTorch eager (bf16 autocast) and torch.compile (bench/gpu/torch_gpt2.py);
# 5. a table: tokens/s and peak memory (vram: arena + CUDA context; torch: max_memory_reserved +
#    context) with the ratios vram/torch.
# Logs under $OUT (default ./out/gpu-bench). STEPS (30), SKIP_COMPILE=1 to leave torch.compile out.
set -u -o pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/out/gpu-bench}; mkdir -p "$OUT"
STEPS=${STEPS:-30}
. scripts/gpu-setup.sh
export PATH=/usr/local/cuda/bin:$PATH
export OMP_WAIT_POLICY=passive
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"

BIN=build-gpu
if [ -x build-carry/vram ] && [ -x build-carry/test_exec_cuda ] && ! ldd build-carry/vram build-carry/test_exec_cuda | grep -q "not found"; then
  BIN=build-carry
  echo "== using the carried build in build-carry/"
else
  t0=$(date +%s)
  cmake -S . -B build-gpu -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_BUILD_TYPE=Release > "$OUT/cmake.log" 2>&1 \
    || { tail -30 "$OUT/cmake.log"; exit 1; }
  cmake --build build-gpu -j16 --target vram_cli test_exec_cuda > "$OUT/build.log" 2>&1 \
    || { grep -E "error|Error" "$OUT/build.log" | head -40; exit 1; }
  echo "== build ok ($(( $(date +%s) - t0 )) s)"
fi
VRAM=$BIN/vram

echo "== test_exec_cuda"
timeout 120 $BIN/test_exec_cuda 2>&1 | tee "$OUT/test_exec_cuda.log" | grep -E "fp32:|bf16:|PASSED|FAILED|OK|FAIL|SKIP"

echo "== tiny GPT, fp32, 5 steps: cpu vs cuda"
for d in cpu cuda; do
  timeout 60 $VRAM train --preset tiny --steps 5 --device $d --json --eval-every -1 > "$OUT/tiny_$d.jsonl" 2>&1
done
python3 - "$OUT" <<'EOF'
import json, sys
out = sys.argv[1]
def losses(d):
    try:
        return [json.loads(l)["loss"] for l in open(f"{out}/tiny_{d}.jsonl") if l.startswith("{") and '"event":"step"' in l.replace(" ", "")]
    except Exception as e:
        return [str(e)]
c, g = losses("cpu"), losses("cuda")
print("cpu ", " ".join(f"{x:.6f}" if isinstance(x, float) else x for x in c))
print("cuda", " ".join(f"{x:.6f}" if isinstance(x, float) else x for x in g))
if c and g and all(isinstance(x, float) for x in c + g):
    print("max |diff| %.2e" % max(abs(a - b) for a, b in zip(c, g)))
EOF

echo "== vram GPT-2 124M bf16, B=16 T=1024, $STEPS steps"
timeout 180 $VRAM train --preset gpt2 --batch 16 --seq 1024 --precision bf16 --clip 1.0 --lr 6e-4 --warmup 0 \
  --lr-schedule constant --steps "$STEPS" --device cuda --eval-every -1 --json > "$OUT/vram_gpt2.jsonl" 2> "$OUT/vram_gpt2.err"
echo "rc $?"; tail -3 "$OUT/vram_gpt2.err"
timeout 60 $VRAM info > "$OUT/vram_info.txt" 2>&1

echo "== torch eager"
PYTHONUNBUFFERED=1 timeout 150 python3 bench/gpu/torch_gpt2.py --mode eager --steps "$STEPS" > "$OUT/torch_eager.json" 2> "$OUT/torch_eager.err"
echo "rc $?"; tail -2 "$OUT/torch_eager.err"
if [ "${SKIP_COMPILE:-0}" != 1 ]; then
  echo "== torch.compile"
  PYTHONUNBUFFERED=1 timeout 170 python3 bench/gpu/torch_gpt2.py --mode compile --steps "$STEPS" > "$OUT/torch_compile.json" 2> "$OUT/torch_compile.err"
  echo "rc $?"; tail -2 "$OUT/torch_compile.err"
fi

python3 - "$OUT" <<'EOF' | tee "$OUT/table.txt"
import json, statistics, sys
out = sys.argv[1]
GiB = 1 << 30
rows = []
ctx = None
def load_torch(name):
    try:
        return json.loads(open(f"{out}/torch_{name}.json").read().strip().splitlines()[-1])
    except Exception:
        return None
te, tc = load_torch("eager"), load_torch("compile")
for t in (te, tc):
    if t and ctx is None:
        ctx = t["context"]
try:
    recs = [json.loads(l) for l in open(f"{out}/vram_gpt2.jsonl") if l.startswith("{")]
    steps = [r for r in recs if r.get("event") == "step"]
    summ = [r for r in recs if r.get("event") == "summary"][-1]
    ms = statistics.median([s["ms"] for s in steps[5:]] or [s["ms"] for s in steps])
    m = summ["memory"]
    vram = {"tok": 16 * 1024 / ms * 1000, "ms": ms, "mem": m["run_arena"] + (ctx or 0),
            "plan_arena": m["plan_arena"], "run_arena": m["run_arena"], "plan_peak": m["plan_peak"],
            "run_peak": m["run_peak"], "device_peak": m["device_peak"],
            "loss": (steps[0]["loss"], steps[-1]["loss"])}
except Exception as e:
    vram = None
    print("vram: no result:", e)
print(f"device: {(te or tc or {}).get('device', '?')}, torch {(te or tc or {}).get('torch', '?')}; "
      f"CUDA context (torch's, added to both) {(ctx or 0) / GiB:.2f} GiB")
print(f"{'run':28s} {'step ms':>8s} {'tokens/s':>10s} {'peak GiB':>9s} {'loss 1st->last':>16s}")
if vram:
    print(f"{'vram bf16 (arena+ctx)':28s} {vram['ms']:8.1f} {vram['tok']:10.0f} {vram['mem'] / GiB:9.2f} "
          f"{vram['loss'][0]:7.3f}->{vram['loss'][1]:.3f}")
for name, t in (("torch eager bf16 autocast", te), ("torch.compile bf16", tc)):
    if t:
        print(f"{name:28s} {t['median_ms']:8.1f} {t['tokens_per_s']:10.0f} {(t['max_reserved'] + t['context']) / GiB:9.2f} "
              f"{t['losses'][0]:7.3f}->{t['losses'][-1]:.3f}")
    else:
        print(f"{name:28s} (no result)")
if vram:
    print(f"vram plan: arena {vram['plan_arena']} B planned, {vram['run_arena']} B allocated "
          f"({'equal' if vram['plan_arena'] == vram['run_arena'] else 'DIFFER'}); peak live {vram['plan_peak']} planned, "
          f"{vram['run_peak']} measured ({'equal' if vram['plan_peak'] == vram['run_peak'] else 'DIFFER'}); "
          f"device used at most {vram['device_peak'] / GiB:.2f} GiB")
    for name, t in (("eager", te), ("compile", tc)):
        if t:
            print(f"vram/torch {name}: tokens/s x{vram['tok'] / t['tokens_per_s']:.2f}, "
                  f"peak memory x{vram['mem'] / (t['max_reserved'] + t['context']):.2f}")
EOF
