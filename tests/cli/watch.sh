#!/usr/bin/env bash
# vram watch: N samples then exit 0 (without a GPU: a one-line note per sample);
# --json is one JSON line per sample; a running vram train shows up with its
# planned bytes (the plan's arena) from its status file; bad flags exit 2.
set -euo pipefail
vram="$1"
tmp=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$tmp"' EXIT

"$vram" watch --count 2 --interval 0.05 >"$tmp/out"
[ "$(grep -c '^--- ' "$tmp/out")" = 2 ] || { echo "want 2 samples"; cat "$tmp/out"; exit 1; }
"$vram" watch --count 3 --interval 0.05 --json >"$tmp/json"
python3 - "$tmp/json" <<'PY'
import json, sys
lines = open(sys.argv[1]).read().splitlines()
assert len(lines) == 3, lines
for l in lines:
    d = json.loads(l)
    assert isinstance(d["gpus"], list) and isinstance(d["vram"], list)
    assert d["gpus"] or d["note"], d
PY

# a training run is visible with its plan
flags=(--preset tiny --batch 2 --seq 32)
"$vram" train "${flags[@]}" --steps 100000 --quiet --eval-every -1 >/dev/null 2>&1 &
pid=$!
arena=$("$vram" plan "${flags[@]}" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["arena"]["bytes"])')
seen=
for _ in $(seq 100); do
  "$vram" watch --count 1 --json >"$tmp/one"
  if python3 - "$tmp/one" "$pid" "$arena" <<'PY'
import json, sys
d = json.loads(open(sys.argv[1]).read())
pid, arena = int(sys.argv[2]), int(sys.argv[3])
mine = [p for p in d["vram"] if p["pid"] == pid]
sys.exit(0 if mine and mine[0]["planned"] == arena and mine[0]["step"] >= 1 and mine[0]["used"] > 0 else 1)
PY
  then seen=1; break; fi
  sleep 0.1
done
[ -n "$seen" ] || { echo "vram watch did not show the training run $pid"; cat "$tmp/one"; exit 1; }
"$vram" watch --count 1 | grep -q "vram train pid $pid on cpu: step" || { echo "no text line for the run"; exit 1; }
kill "$pid"; wait "$pid" 2>/dev/null || true; pid=

for bad in "--bogus" "--count 0" "--interval x" "--count"; do
  set +e; "$vram" watch $bad >/dev/null 2>"$tmp/err"; rc=$?; set -e
  [ "$rc" = 2 ] && [ "$(wc -l <"$tmp/err")" = 1 ] || { echo "watch $bad: exit $rc"; cat "$tmp/err"; exit 1; }
done
echo "watch: all ok"
