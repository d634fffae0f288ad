#!/usr/bin/env bash
# vram's allocator inside PyTorch, on the GPU machine, in ONE command from the repository root:
#     bash bench/torch_alloc/run.sh
# 1. libvram_torch.so: build-carry/ (carried CUDA build), else build-gpu/, else built into build-gpu
#    (only the vram_torch target: the util, device and alloc layers);
# 2. bench/torch_alloc/check.py (stitch, then pytorch policy): statistics = live tensors rounded to 512,
#    empty_cache gives memory back, side stream + record_stream, OOM message, snapshot, two GPUs,
#    CUDA graphs refused;
# 3. GPT-2 (nanoGPT-style, AdamW), transformers BERT (variable sequence lengths), torchvision ResNet-50
#    (AMP; skipped without torchvision), each natively, with expandable_segments:True, and under
#    vram_torch with policies stitch and pytorch (bench/torch_alloc/workload.py), nvidia-smi sampled
#    every 50 ms (bench/gpu/gpumon.sh);
# 4. a markdown table on stdout (bench/torch_alloc/table.py); raw JSON and logs under $OUT (WORKLOADS: a subset)
#    (default: a temporary folder). STEPS (25) steps per run, WARMUP (8) of them left out of the step times
#    (their total apart); MODES (default "native expandable vram_stitch vram_pytorch"): a subset; ROUNDS (1):
#    the modes run again in turn, and the step times are the median over the rounds (the lent machines' host
#    speed moves between runs). Exit 1 if a check failed.
set -u -o pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$(mktemp -d /tmp/torch_alloc.XXXXXX)}; mkdir -p "$OUT"
export STEPS=${STEPS:-25} WARMUP=${WARMUP:-8}
if ls .deps/*.deb >/dev/null 2>&1; then . scripts/gpu-setup.sh; fi
export PATH=/usr/local/cuda/bin:$PATH
export CUBLAS_WORKSPACE_CONFIG=:4096:8 TOKENIZERS_PARALLELISM=false TRANSFORMERS_OFFLINE=1 HF_HUB_OFFLINE=1
export PYTHONPATH=$PWD/python:$PWD/bench/gpu:${PYTHONPATH:-}
t_start=$(date +%s)
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" | tee "$OUT/torch.txt"

lib=""
for d in build-carry build-gpu; do
  if [ -f $d/libvram_torch.so ] && ! ldd $d/libvram_torch.so | grep -q "not found"; then lib=$PWD/$d/libvram_torch.so; break; fi
done
if [ -z "$lib" ]; then
  echo "== building libvram_torch.so into build-gpu"
  cmake -S . -B build-gpu -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF \
    > "$OUT/cmake.log" 2>&1 || { tail -30 "$OUT/cmake.log"; exit 1; }
  cmake --build build-gpu -j16 --target vram_torch > "$OUT/build.log" 2>&1 || { grep -E "error" "$OUT/build.log" | head -30; exit 1; }
  lib=$PWD/build-gpu/libvram_torch.so
fi
export VRAM_TORCH_LIB=$lib
echo "== $lib"

fail=0
for p in stitch pytorch; do
  timeout 180 python3 bench/torch_alloc/check.py --policy $p 2>&1 | tee "$OUT/check-$p.log" | grep -E "^(PASS|FAIL|SKIP|==)"
  [ "${PIPESTATUS[0]}" -eq 0 ] || fail=1
done

OUT=$OUT . bench/gpu/gpumon.sh     # $base: idle nvidia-smi memory.used, MiB
for r in $(seq 1 "${ROUNDS:-1}"); do   # rounds after the first: <w>-<m>.rN.json (table.py: median over rounds)
  sfx=""; [ "$r" -gt 1 ] && sfx=".r$r"
  for w in ${WORKLOADS:-gpt2 bert resnet50}; do
    for m in ${MODES:-native expandable vram_stitch vram_pytorch}; do
      if [ $m = expandable ]; then conf="expandable_segments:True"; else conf=""; fi
      f="$OUT/$w-$m$sfx"
      PYTORCH_CUDA_ALLOC_CONF=$conf PYTORCH_ALLOC_CONF=$conf gpumon "$w-$m$sfx" \
        timeout 240 python3 bench/torch_alloc/workload.py $w $m > "$f.json" 2> "$f.log"
      rc=$?
      if [ $rc -eq 3 ]; then echo "-- $w: skipped (torchvision not importable)"; break; fi
      [ $rc -eq 0 ] && echo "-- $w $m$sfx: $(python3 -c "import json,sys; r=json.loads(open(sys.argv[1]).read().splitlines()[-1]); print('%.1f ms/step, peak reserved %.2f GiB' % (r['step_ms_median'], r['peak_reserved']/2**30))" "$f.json")" \
                    || { echo "-- $w $m$sfx: FAILED (rc $rc), last lines of $f.log:"; tail -5 "$f.log"; }
    done
  done
done
echo
python3 bench/torch_alloc/table.py "$OUT" "$base" | tee "$OUT/table.md"
echo
echo "== $(( $(date +%s) - t_start )) s; raw results in $OUT"
exit $fail
