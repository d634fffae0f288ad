#!/usr/bin/env bash
# vram train --trace: the trace is valid trace-event JSON (required keys, known
# ph types, monotonic ts per track, a slice per node per step and one per step),
# its "live bytes" counters equal the run's figures (the CPU run holds exactly
# the plan: the largest total is vram plan's peak, the bytes per role at that
# node its per-role figures), dynamic mode adds allocator counters; an
# unwritable --trace gives one line, exit 1, no file.
set -euo pipefail
vram="$1"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
flags=(--preset tiny --batch 2 --seq 32)

check() { # trace plan.json steps dynamic
python3 - "$@" <<'PY'
import json, sys
tr = json.load(open(sys.argv[1]))
plan = json.load(open(sys.argv[2]))
steps, dynamic = int(sys.argv[3]), sys.argv[4] == "1"
ev = tr["traceEvents"]
assert isinstance(ev, list) and ev, "no events"
last = {}
for e in ev:
    for k in ("name", "ph", "pid", "tid"):
        assert k in e, ("missing " + k, e)
    assert e["ph"] in ("X", "C", "i", "M"), e
    if e["ph"] == "M":
        continue
    assert isinstance(e["ts"], (int, float)) and e["ts"] >= 0, e
    if e["ph"] == "X":
        assert e["dur"] >= 0, e
    track = (e["pid"], e["tid"], e["ph"] if e["ph"] != "C" else "C:" + e["name"])
    assert e["ts"] >= last.get(track, 0), ("ts goes back on track", track, e)
    last[track] = e["ts"]
N = plan["graph"]["nodes"]
nodes = [e for e in ev if e["ph"] == "X" and e["tid"] == 1]
step_slices = [e for e in ev if e["ph"] == "X" and e["tid"] == 0]
assert len(nodes) == steps * N, (len(nodes), steps, N)
assert len(step_slices) == steps and [e["args"]["step"] for e in step_slices] == list(range(1, steps + 1))
assert {e["args"]["step"] for e in nodes} == set(range(1, steps + 1))
live = [e for e in ev if e["ph"] == "C" and e["name"] == "live bytes"]
assert len(live) == len(nodes)
tot = [sum(e["args"].values()) for e in live]
peak = max(tot)
assert peak == plan["peak"]["bytes"], (peak, plan["peak"]["bytes"])
at = live[tot.index(peak)]["args"]
for r, v in plan["roles"].items():
    assert at[r] == v["at_peak"], (r, at[r], v["at_peak"])
alloc = [e for e in ev if e["ph"] == "C" and e["name"] == "allocator"]
if dynamic:
    assert len(alloc) == len(nodes)
    assert all(0 < e["args"]["allocated"] <= e["args"]["reserved"] for e in alloc)
    assert max(e["args"]["allocated"] for e in alloc) >= peak
else:
    assert not alloc
print("trace ok:", len(ev), "events, peak", peak)
PY
}

"$vram" train "${flags[@]}" --steps 3 --save-every 2 --save "$tmp/m.bin" --quiet --trace "$tmp/p.json" >/dev/null
python3 - "$tmp/p.json" "$tmp/m.bin" <<'PY'
import json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
ck = [e for e in ev if e["ph"] == "i"]
assert [e["name"] for e in ck] == ["checkpoint " + sys.argv[2]] * 2, ck   # at step 2 and at the end
steps = [e for e in ev if e["ph"] == "X" and e["tid"] == 0]
assert steps[1]["ts"] + steps[1]["dur"] <= ck[0]["ts"] <= steps[2]["ts"], (steps, ck)
PY
"$vram" plan "${flags[@]}" --json >"$tmp/p.plan"
check "$tmp/p.json" "$tmp/p.plan" 3 0
"$vram" train "${flags[@]}" --steps 2 --quiet --memory dynamic --trace "$tmp/d.json" >/dev/null
"$vram" plan "${flags[@]}" --memory dynamic --json >"$tmp/d.plan"
check "$tmp/d.json" "$tmp/d.plan" 2 1

set +e
"$vram" train "${flags[@]}" --steps 1 --quiet --trace "$tmp/nodir/t.json" >/dev/null 2>"$tmp/err"; rc=$?
set -e
[ "$rc" = 1 ] && [ "$(wc -l <"$tmp/err")" = 1 ] && grep -q -- "--trace: .*$tmp/nodir/t.json" "$tmp/err" ||
  { echo "unwritable --trace: exit $rc"; cat "$tmp/err"; exit 1; }
[ ! -e "$tmp/nodir" ] || { echo "unwritable --trace left something"; exit 1; }
ls "$tmp" | grep -q '\.tmp\.' && { echo "temporary file left"; exit 1; }
echo "trace: all ok"
