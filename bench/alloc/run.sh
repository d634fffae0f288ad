#!/usr/bin/env bash
# Replays every shared allocator trace, and the synthetic ones of
# gen_traces.py (generated into out/traces when missing), under every policy
# and prints the markdown table of bench/alloc/README.md.
#   bash bench/alloc/run.sh [PATH/TO/vram] [TRACES_DIR] [SYNTHETIC_DIR]
set -euo pipefail
vram=${1:-build/vram}
traces=${2:-$(dirname "$0")/../../../shared/traces}
synth=${3:-out/traces}
[ -f "$synth/random_mix.csv.gz" ] || python3 "$(dirname "$0")/gen_traces.py" "$synth" >/dev/null
field() { sed -n "s/^[[:space:]]*\"$1\":[[:space:]]*\([-0-9.e+]*\).*/\1/p" | head -1; }
gib() { awk -v b="$1" 'BEGIN { printf "%.2f", b / 1073741824 }'; }
echo "| trace | policy | peak allocated (bytes) | peak reserved (bytes) | reserved / allocated | PyTorch's recorded ratio | peak reserved vs PyTorch's | ns/op | ns/op, device direct (peer) |"
echo "|---|---|---|---|---|---|---|---|---|"
for t in "$traces"/*.csv.gz "$synth"/*.csv.gz; do
  for p in pytorch expandable stitch; do
    out=$("$vram" replay "$t" --policy "$p" --repeat 5 --json)
    pa=$(field peak_allocated <<<"$out"); pr=$(field peak_reserved <<<"$out"); ratio=$(field ratio <<<"$out")
    ns=$(field ns_per_op <<<"$out"); peer=$(field device_ns_per_op <<<"$out")
    tpa=$(sed -n '/"pytorch"/,$p' <<<"$out" | field peak_allocated)
    tpr=$(sed -n '/"pytorch"/,$p' <<<"$out" | field peak_reserved)
    diff=$(field peak_reserved_diff_pct <<<"$out")
    if [ -n "$diff" ]; then
      tr=$(awk -v a="$tpa" -v r="$tpr" 'BEGIN { printf "%.3f", r / a }'); df=$(printf '%+.3f%%' "$diff")
    else
      tr="(synthetic)"; df="—"
    fi
    printf '| %s | %s | %.0f (%s GiB) | %.0f (%s GiB) | %.3f | %s | %s | %.0f | %.0f (%.1fx) |\n' \
      "$(basename "$t" .csv.gz)" "$p" "$pa" "$(gib "$pa")" "$pr" "$(gib "$pr")" "$ratio" "$tr" "$df" "$ns" "$peer" \
      "$(awk -v a="$ns" -v b="$peer" 'BEGIN { print a / b }')"
  done
done
