#!/usr/bin/env bash
# The GPU half of seeing where memory goes, in ONE command on the GPU machine (repo root, .deps and a
# build-carry/ with vram carried):   bash bench/gpu/report.sh
# 1. vram report of GPT-2 124M (B=16, T=1024, bf16) planned and measured on the GPU (--run 5), and in dynamic
#    mode: $OUT/report_gpu.html, $OUT/report_dynamic.html (screenshots are taken where Chromium is);
# 2. vram watch --json beside a running vram train (its GPU rows and the run's planned vs used);
# 3. PyTorch snapshots of two workloads (bench/gpu/snapshot_record.py) -> tools/torch_snapshot.py ->
#    vram replay --policy pytorch, whose peak reserved is compared with PyTorch's own max_memory_reserved.
set -u -o pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/out/report}; mkdir -p "$OUT"
. scripts/gpu-setup.sh
VRAM=${VRAM:-build-carry/vram}
G="--preset gpt2 --batch 16 --seq 1024 --precision bf16"
echo "== 1. reports"
timeout 180 $VRAM report $G --run 5 --device cuda --kernels cuda -o "$OUT/report_gpu.html" 2>&1 | tail -2; echo "rc $?"
timeout 120 $VRAM report $G --kernels cuda --memory dynamic -o "$OUT/report_dynamic.html" 2>&1 | tail -2
echo "== 2. vram watch beside vram train"
timeout 120 $VRAM train $G --device cuda --steps 400 --eval-every -1 --quiet &
tr=$!
sleep 10
timeout 30 $VRAM watch --json --interval 1 --count 6 > "$OUT/watch.jsonl" 2> "$OUT/watch.err"; echo "watch rc $?"
wait $tr; echo "train rc $?"
head -c 1500 "$OUT/watch.jsonl"; echo
echo "== 3. PyTorch snapshots -> vram replay"
timeout 300 python3 bench/gpu/snapshot_record.py "$OUT/snap" > "$OUT/snap.log" 2>&1; echo "record rc $?"; tail -2 "$OUT/snap.log"
for w in gpt2 mlp_varlen; do
  python3 tools/torch_snapshot.py "$OUT/snap/$w.pickle" "$OUT/snap/$w.csv" --workload "$w" 2>&1 | tail -1
  gzip -kf "$OUT/snap/$w.csv"
  timeout 120 $VRAM replay "$OUT/snap/$w.csv" --policy pytorch --json > "$OUT/snap/$w.replay.json" 2> "$OUT/snap/$w.replay.err"
  python3 - "$OUT/snap" "$w" <<'PY'
import json, sys
d, w = sys.argv[1:]
rec = json.load(open(f"{d}/recorded.json"))[w]
try:
    r = json.load(open(f"{d}/{w}.replay.json"))
except Exception as e:
    print(w, "replay failed:", open(f"{d}/{w}.replay.err").read()[:300]); sys.exit(0)
print(f"{w}: PyTorch max_memory_reserved {rec['max_reserved']}, replay (policy pytorch) peak reserved "
      f"{r.get('peak_reserved')}, diff {r.get('peak_reserved', 0) - rec['max_reserved']:+d} B; "
      f"allocated {rec['max_allocated']} vs {r.get('peak_allocated')}")
PY
  rm -f "$OUT/snap/$w.csv" "$OUT/snap/$w.pickle" # $w.csv.gz stays: the converted trace, replayable here
done
