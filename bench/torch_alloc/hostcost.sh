#!/usr/bin/env bash
# The allocator's host time per GPT-2 step inside PyTorch, native against vram_torch, on the GPU machine from the
# repository root (the traces copied into .deps/traces/ and carried: ../shared does not travel):
#     bash bench/torch_alloc/hostcost.sh        # TRACES (.deps/traces or ../shared/traces), MODES (native stitch),
#                                               # ROUNDS (3), PASSES (5)
# Each trace replayed through PyTorch's allocator entry points (bench/torch_alloc/hostcost.py), the modes in turn,
# ROUNDS times, each a fresh process; prints every run's JSON line and, per trace, each mode's median ms a step and
# its ratio to native's.
set -u -o pipefail
cd "$(dirname "$0")/../.."
if ls .deps/*.deb >/dev/null 2>&1; then . scripts/gpu-setup.sh; fi
export PYTHONPATH=$PWD/python:${PYTHONPATH:-}
if [ -z "${VRAM_TORCH_LIB:-}" ]; then
  for d in build-carry build-gpu; do
    if [ -f $d/libvram_torch.so ]; then export VRAM_TORCH_LIB=$PWD/$d/libvram_torch.so; break; fi
  done
fi
[ -n "${VRAM_TORCH_LIB:-}" ] || { echo "hostcost.sh: no libvram_torch.so in build-carry/ or build-gpu/"; exit 1; }
TRACES=${TRACES:-$( [ -d .deps/traces ] && echo .deps/traces || echo ../shared/traces )}
MODES=${MODES:-native stitch}
OUT=${OUT:-$(mktemp -d /tmp/hostcost.XXXXXX)}; mkdir -p "$OUT"
declare -A STEPS=([gpt2_bf16_b32]=3 [gpt2_bf16_varlen_b16]=6 [bert_varlen]=40)   # ../shared/traces/README.md; bench/alloc/gen_traces.py
fail=0
for t in "$TRACES"/*.csv.gz; do
  name=$(basename "$t" .csv.gz); n=${STEPS[$name]:-}
  [ -n "$n" ] || { echo "-- $name: steps unknown, skipped"; continue; }
  for r in $(seq "${ROUNDS:-3}"); do
    for m in $MODES; do
      python3 bench/torch_alloc/hostcost.py "$m" "$t" "$n" --passes "${PASSES:-5}" | tee -a "$OUT/$name.jsonl" || fail=1
    done
  done
  python3 - "$OUT/$name.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
by = {}
for r in rows:
    by.setdefault(r["mode"], []).append(r["ms_per_step"])
nat = statistics.median(by["native"]) if "native" in by else None
for m, v in by.items():
    med = statistics.median(v)
    ratio = f", {med / nat:.3f}x native" if nat else ""
    print(f"{rows[0]['trace']}: {m} {med:.3f} ms a step ({len(v)} runs: {', '.join(f'{x:.3f}' for x in v)}){ratio}")
PY
done
exit $fail
