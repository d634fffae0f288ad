#!/usr/bin/env bash
# Out of memory natively, fits under vram_torch: transformers BERT-base with a new sequence length every
# step (bench/torch_alloc/workload.py bert), at batch sizes near the 80 GB H100's limit, run natively, with
# expandable_segments:True and under vram_torch (policy stitch), each in a process of its own. On the GPU
# machine, repo root, build-carry/libvram_torch.so (or build-gpu/) present:
#     bash bench/torch_alloc/oom_case.sh            # BATCHES="96 112" STEPS=6 (defaults)
#     FRACTION=0.3 BATCHES=32 bash bench/torch_alloc/oom_case.sh   # the same on a GPU capped at 30%
# Prints per run: finished or the step that ran out of memory, peak reserved / allocated, median step ms.
set -u -o pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$(mktemp -d /tmp/oom_case.XXXXXX)}; mkdir -p "$OUT"
BATCHES=${BATCHES:-96 112}; STEPS=${STEPS:-6}; MODES=${MODES:-native expandable vram_stitch}; FRACTION=${FRACTION:-0}
export CUBLAS_WORKSPACE_CONFIG=:4096:8 TOKENIZERS_PARALLELISM=false TRANSFORMERS_OFFLINE=1 HF_HUB_OFFLINE=1
export PYTHONPATH=$PWD/python:$PWD/bench/gpu:${PYTHONPATH:-}
for d in build-carry build-gpu; do [ -f $d/libvram_torch.so ] && { export VRAM_TORCH_LIB=$PWD/$d/libvram_torch.so; break; }; done
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
for B in $BATCHES; do
  for m in $MODES; do
    conf=""; [ $m = expandable ] && conf="expandable_segments:True"
    PYTORCH_CUDA_ALLOC_CONF=$conf PYTORCH_ALLOC_CONF=$conf timeout 600 python3 bench/torch_alloc/workload.py bert $m \
      --steps "$STEPS" --batch "$B" --fraction "$FRACTION" > "$OUT/bert-b$B-$m.json" 2> "$OUT/bert-b$B-$m.log"
    rc=$?
    python3 - "$OUT/bert-b$B-$m.json" "$OUT/bert-b$B-$m.log" "$B" "$m" "$rc" <<'PY'
import json, sys
js, log, B, m, rc = sys.argv[1:]
lines = [l for l in open(js).read().splitlines() if l.startswith("{")]
if rc == "0" and lines:
    r = json.loads(lines[-1])
    print(f"bert B={B:>4} {m:<12} finished {r['steps']} steps: peak reserved {r['peak_reserved']/2**30:6.2f} GiB, "
          f"allocated {r['peak_allocated']/2**30:6.2f} GiB, {r['step_ms_median']:.0f} ms/step")
else:
    err = [l for l in open(log).read().splitlines() if "out of memory" in l.lower()]
    print(f"bert B={B:>4} {m:<12} FAILED (rc {rc}): " + (err[-1][:300] if err else open(log).read()[-300:].replace("\n", " ")))
PY
  done
done
