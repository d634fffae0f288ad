#!/usr/bin/env bash
# The Linear + GELU fusion (src/exec/cuda_fuse.h) on GPT-2 124M, fused (--fuse on, the default) against
# unfused (--fuse off), in ONE command on the GPU machine (repo root, .deps carried):
#     bash bench/gpu/fuse.sh           # logs in $OUT (default ./out/gpu-fuse); STEPS=30
# 1. correctness: test_kernels_cuda (the DGELU product) and test_exec_cuda (fuse_pairs, fuse_matches: fused vs
#    unfused vs the CPU, fp32 and bf16);
# 2. per mode, B=16 T=1024 bf16 AdamW clip 1.0 (run.sh's setup): the step time (median of steps 6..STEPS, the
#    losses beside it: the same to bf16 rounding) and the VRAM_PROFILE rows of the nodes the fusion moves work
#    between (fch, fch_gelu, fcproj.bwd, fch_gelu.bwd: fused, the gelu nodes hold the products).
set -u -o pipefail
cd "$(dirname "$0")/../.."
export OUT=${OUT:-$PWD/out/gpu-fuse}; mkdir -p "$OUT"
STEPS=${STEPS:-30}
. bench/gpu/lib.sh
gpu_bin vram test_exec_cuda test_kernels_cuda
echo "== test_kernels_cuda (matmul)"
timeout 300 $BIN/test_kernels_cuda > "$OUT/test_kernels_cuda.log" 2>&1; echo "rc $?"
grep -E "dgelu|matmul_gelu|PASSED|FAILED" "$OUT/test_kernels_cuda.log" | head -40
echo "== test_exec_cuda"
timeout 400 $BIN/test_exec_cuda > "$OUT/test_exec_cuda.log" 2>&1; echo "rc $?"
grep -E "fusion|fuse pairs|PASSED|FAILED" "$OUT/test_exec_cuda.log"
for f in on off; do
  echo "== vram --fuse $f: $STEPS steps"
  timeout 180 $BIN/vram train --preset gpt2 --batch 16 --seq 1024 --precision bf16 --clip 1.0 --lr 6e-4 --warmup 0 \
    --lr-schedule constant --steps "$STEPS" --device cuda --eval-every -1 --json --fuse $f \
    > "$OUT/vram_fuse_$f.jsonl" 2> "$OUT/vram_fuse_$f.err"
  echo "rc $?"
  VRAM_PROFILE=1 timeout 120 $BIN/vram train --preset gpt2 --batch 16 --seq 1024 --precision bf16 --clip 1.0 \
    --lr 6e-4 --warmup 0 --lr-schedule constant --steps 12 --device cuda --eval-every -1 --json --fuse $f \
    > "$OUT/vram_profile_$f.jsonl" 2> "$OUT/vram_profile_$f.err"
  echo "rc $?"
  grep -E "vram profile|h\.\*\.(fch|fch_gelu|fcproj\.bwd|fch_gelu\.bwd) |^  (gelu|gelu_bwd|matmul|matmul_bwd) |fused" \
    "$OUT/vram_profile_$f.err"
done
python3 - "$OUT" <<'EOF' | tee "$OUT/table.txt"
import json, statistics, sys
out = sys.argv[1]
ms = {}
for f in ("on", "off"):
    try:
        steps = [json.loads(l) for l in open(f"{out}/vram_fuse_{f}.jsonl") if l.startswith("{")]
        steps = [r for r in steps if r.get("event") == "step"]
        ms[f] = statistics.median([s["ms"] for s in steps[5:]] or [s["ms"] for s in steps])
        print(f"--fuse {f:3s}: step {ms[f]:.2f} ms, {16 * 1024 / ms[f] * 1000:.0f} tokens/s, "
              f"losses {steps[0]['loss']:.4f} -> {steps[-1]['loss']:.4f}")
    except Exception as e:
        print(f"--fuse {f}: no result ({e})")
if len(ms) == 2:
    print(f"fused saves {ms['off'] - ms['on']:.3f} ms/step (x{ms['off'] / ms['on']:.3f} tokens/s)")
EOF
