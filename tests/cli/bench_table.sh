#!/usr/bin/env bash
# bench/gpu/speed.sh's table from logs (TABLE_ONLY=1, no GPU): ms/step is the median of the steps after the first
# five; with ROUNDS the median of the rounds' medians, the peak the largest of the rounds that ran, a note with each
# round's figures and ratio (a failed round "n/a"); ROUNDS=0 is refused. $1 (the vram binary) is not used.
set -euo pipefail
src=${VRAM_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
command -v python3 > /dev/null || { echo "python3 missing: skipped"; exit 0; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

printf 'kind=gpt\npreset=gpt2\nB=16\nT=1024\nL=12\nC=768\nNH=12\nsteps=20\n' > "$tmp/gpt2-b16.config"
echo "date=test" > "$tmp/env.txt"
# LOG SYSTEM RC PEAK_MIB MS...: one system's logs (vram: JSON step records; torch: times_ms)
log() {
  local n=$1 rc=$2 pk=$3; shift 3
  printf 'rc=%s\nseconds=1\npeak_mib=%s\nbase_mib=500\n' "$rc" "$pk" > "$tmp/gpt2-b16.$n.meta"
  python3 - "$n" "$@" > "$tmp/gpt2-b16.$n.out" <<'PY'
import json, sys
n, ms = sys.argv[1], [float(x) for x in sys.argv[2:]]
if n.startswith("vram"):
    for x in ms:
        print(json.dumps({"event": "step", "ms": x}))
    print(json.dumps({"event": "summary", "memory": {"plan_arena": 7, "run_arena": 7, "plan_peak": 7, "run_peak": 7, "roles": {}}}))
else:
    print(json.dumps({"times_ms": ms, "losses": [11.0, 10.0]}))
PY
}
# steps 1-5 are left out of each median: 99 there must not count
w="99 99 99 99 99"
log vram 0 7500 $w 27 28 27
log compile 0 10740 $w 34 34 33
OUT=$tmp TABLE_ONLY=1 bash "$src/bench/gpu/speed.sh" > "$tmp/one"
grep -q '^| gpt2-b16 (gpt2, B=16, T=1024) | vram | 27.0 |' "$tmp/one" || { echo "one round: vram's median"; cat "$tmp/one"; exit 1; }
grep -q '| torch.compile | 34.0 | .* | 1.26x | 0.68x |$' "$tmp/one" || { echo "one round: ratios"; cat "$tmp/one"; exit 1; }
if grep -q "rounds" "$tmp/one"; then echo "one round: no rounds note"; cat "$tmp/one"; exit 1; fi

# three rounds: vram 27 / 28 / 30 (median 28), torch.compile 34 / failed / 35 (median 34.5; the failed round's
# peak not counted), vram's peak the largest of its rounds
log vram-2 0 7600 $w 28 28 28
log vram-3 0 7400 $w 30 30 30
log compile-2 124 20000 $w 20 20 20
log compile-3 0 10900 $w 35 35 35
OUT=$tmp TABLE_ONLY=1 bash "$src/bench/gpu/speed.sh" > "$tmp/three"
cat "$tmp/three"
grep -q '^| gpt2-b16 (gpt2, B=16, T=1024) | vram | 28.0 | .* | 6.93 |' "$tmp/three" || { echo "rounds: vram's median or peak"; exit 1; }
grep -q '| torch.compile | 34.5 | .* | 10.16 | 1.23x | 0.68x |$' "$tmp/three" || { echo "rounds: torch.compile's median, peak or ratios"; exit 1; }
grep -q '3 rounds in turn.*vram 27.0 / 28.0 / 30.0; torch.compile 34.0 / n/a / 35.0; vram x tokens/s by round 1.26x / - / 1.17x$' \
  "$tmp/three" || { echo "rounds: the note"; exit 1; }

if out=$(ROUNDS=0 DRY=1 bash "$src/bench/gpu/speed.sh" 2>&1); then echo "ROUNDS=0 accepted"; exit 1; fi
echo "$out" | grep -q "ROUNDS=0: a positive integer" || { echo "ROUNDS=0: $out"; exit 1; }
echo "bench table ok"
