#!/usr/bin/env bash
# Policy stitch in the steady state, on the meta device: driver calls per warm pass (mean of passes 3..10 of
# each trace: the calls of a 10-pass replay minus those of a 2-pass one, over 8), host waits (event syncs)
# per pass, reserved / allocated after 10 passes, and the allocator's ns per alloc/free in the third pass
# (--passes 3 --repeat 3, fastest); for bert_varlen (a new sequence length every step) the calls of steps
# 21..40 (bert_varlen minus bert_varlen_w20, over 20) and ns/op over its 40 steps. Prints a markdown table.
#   [LEND=P] [GRANULE=SIZE] bash bench/alloc/stitch_calls.sh [PATH/TO/vram] [SHARED_TRACES_DIR] [SYNTHETIC_DIR]
# LEND: vram replay --stitch-lend P (lending on; default 0, off); GRANULE: --stitch-granule SIZE (default the
# device's, 2MiB). Calls count a cuMemMap per physical allocation, a cuMemSetAccess per new mapping.
set -euo pipefail
vram=${1:-build/vram}
traces=${2:-$(dirname "$0")/../../../shared/traces}
synth=${3:-out/traces}
[ -f "$synth/bert_varlen.csv.gz" ] || python3 "$(dirname "$0")/gen_traces.py" "$synth" >/dev/null
tests=$(dirname "$0")/../../tests/data/traces
run() { # trace passes [repeat] -> total map sync ratio ns_last
  "$vram" replay "$1" --policy stitch --stitch-lend "${LEND:-0}" --stitch-granule "${GRANULE:-2MiB}" --passes "$2" --repeat "${3:-1}" --json | python3 -c "
import json, sys; d = json.load(sys.stdin); c = d['device_calls']
print(c['total'], c['map'], c['event_sync'], '%.4f' % d['ratio'], '%.0f' % d['ns_per_op_last_pass'])"
}
echo "| trace | calls / warm pass (cuMemMap) | host waits / pass | reserved / allocated | ns / op (warm) |"
echo "|---|---|---|---|---|"
for t in "$traces/gpt2_bf16_b32.csv.gz" "$traces/gpt2_bf16_varlen_b16.csv.gz" "$synth/varlen_gpt.csv.gz" \
         "$tests/mlp_varlen_h100.csv.gz" "$tests/resnet50_h100.csv.gz"; do
  read -r a am as _ _ <<<"$(run "$t" 2)"
  read -r b bm bs r _ <<<"$(run "$t" 10)"
  read -r _ _ _ _ ns <<<"$(run "$t" 3 3)"
  printf '| %s | %d (%d) | %.1f | %s | %s |\n' "$(basename "$t" .csv.gz)" $(((b - a) / 8)) $(((bm - am) / 8)) \
    "$(awk -v x="$bs" -v y="$as" 'BEGIN { print (x - y) / 8 }')" "$r" "$ns"
done
read -r a am as _ _ <<<"$(run "$synth/bert_varlen_w20.csv.gz" 1)"
read -r b bm bs r ns <<<"$(run "$synth/bert_varlen.csv.gz" 1 3)"
printf '| bert_varlen (per step, steps 21-40) | %d (%d) | %.1f | %s | %s (all 40 steps) |\n' $(((b - a) / 20)) \
  $(((bm - am) / 20)) "$(awk -v x="$bs" -v y="$as" 'BEGIN { print (x - y) / 20 }')" "$r" "$ns"
