#!/usr/bin/env bash
# tools/torch_snapshot.py: a synthetic snapshot in PyTorch's structure
# (segments with blocks, device_traces with alloc / free_requested /
# free_completed / segment_alloc) converts to vram's trace format, vram replay
# reads it and its peaks are the trace's; corrupt pickles, a trace of 0 events
# and an unwritable output give one line, exit 1, and no file.
set -euo pipefail
vram="$1"
here=$(cd "$(dirname "$0")/../.." && pwd)
conv="$here/tools/torch_snapshot.py"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
MiB=1048576
python3 - "$tmp" <<'PY'
import pickle, sys
d = sys.argv[1]
MiB = 1 << 20
A, B, P = 0x7f0000000000, 0x7f0000200000, 0x7f0001600000
S = 140000000000001     # a CUDA stream handle
tr = [
  # block at P was allocated before the history began: only its free is recorded
  {"action": "free_requested", "addr": P, "size": 4096, "stream": S, "frames": []},
  {"action": "free_completed", "addr": P, "size": 4096, "stream": S, "frames": []},
  {"action": "segment_alloc", "addr": A, "size": 2 * MiB, "stream": S, "frames": []},
  {"action": "alloc", "addr": A, "size": 512, "stream": S, "frames": [{"filename": "x.py", "line": 1, "name": "f"}]},
  {"action": "alloc", "addr": A + 512, "size": 1024, "stream": S, "frames": []},
  {"action": "segment_alloc", "addr": B, "size": 20 * MiB, "stream": S, "frames": []},
  {"action": "alloc", "addr": B, "size": 3 * MiB, "stream": S, "frames": []},
  {"action": "free_requested", "addr": A, "size": 512, "stream": S, "frames": []},
  {"action": "free_completed", "addr": A, "size": 512, "stream": S, "frames": []},
  {"action": "alloc", "addr": B + 3 * MiB, "size": 5 * MiB, "stream": S, "frames": []},
  {"action": "free_requested", "addr": B, "size": 3 * MiB, "stream": S, "frames": []},
  {"action": "free_completed", "addr": B, "size": 3 * MiB, "stream": S, "frames": []},
]
blocks = lambda *b: [{"address": a, "size": s, "requested_size": s, "state": st, "frames": []} for a, s, st in b]
snap = {
  "segments": [
    {"device": 0, "address": A, "total_size": 2 * MiB, "stream": S, "segment_type": "small", "allocated_size": 1024,
     "active_size": 1024, "requested_size": 1024, "is_expandable": False,
     "blocks": blocks((A, 512, "inactive"), (A + 512, 1024, "active_allocated"), (A + 1536, 2 * MiB - 1536, "inactive"))},
    {"device": 0, "address": B, "total_size": 20 * MiB, "stream": S, "segment_type": "large", "allocated_size": 5 * MiB,
     "active_size": 5 * MiB, "requested_size": 5 * MiB, "is_expandable": False,
     "blocks": blocks((B, 3 * MiB, "inactive"), (B + 3 * MiB, 5 * MiB, "active_allocated"), (B + 8 * MiB, 12 * MiB, "inactive"))},
    {"device": 0, "address": P - 2 * MiB, "total_size": 2 * MiB * 2, "stream": S, "segment_type": "small", "blocks": []},
  ],
  "device_traces": [tr],
}
pickle.dump(snap, open(d + "/snap.pickle", "wb"))
# a block allocated before the history began and never freed (a cuBLAS workspace): in the segments only
W = 0x7f0100000000
kept = {"device": 0, "address": W, "total_size": 32 * MiB, "stream": S, "segment_type": "large",
        "blocks": blocks((W, 32 * MiB, "active_allocated"))}
pickle.dump({"segments": snap["segments"] + [kept], "device_traces": [tr]}, open(d + "/kept.pickle", "wb"))
pickle.dump({"segments": snap["segments"], "device_traces": [[]]}, open(d + "/empty.pickle", "wb"))
pickle.dump({"segments": []}, open(d + "/nokeys.pickle", "wb"))
open(d + "/corrupt.pickle", "wb").write(pickle.dumps(snap)[:200])
import collections  # a pickle that names a class: refused, never executed
pickle.dump(collections.OrderedDict(a=1), open(d + "/class.pickle", "wb"))
PY

python3 "$conv" "$tmp/snap.pickle" "$tmp/t.csv" || { echo "conversion failed"; exit 1; }
head -3 "$tmp/t.csv"
python3 - "$tmp/t.csv" <<'PY'
import json, sys
lines = open(sys.argv[1]).read().splitlines()
head = json.loads(lines[0][2:])
MiB = 1 << 20
assert lines[1] == "action,addr,size,stream"
rows = [l.split(",") for l in lines[2:]]
# the segment held before the trace (at P - 2 MiB, never allocated in it) is rebuilt first: allocated, freed
assert rows[:2] == [["alloc", str(0x7f0001600000 - 2 * MiB), str(4 * MiB), "0"],
                    ["free_completed", str(0x7f0001600000 - 2 * MiB), str(4 * MiB), "0"]], rows[:2]
assert head["warmup_ops"] == 2, head
assert rows[2][0] == "alloc" and int(rows[2][2]) == 4096, rows[2]          # the block from before the trace
assert len(rows) == 15 and {r[3] for r in rows} == {"0"}, rows
# allocated peaks after the 5 MiB alloc: 1024 + 3 MiB + 5 MiB (4096 and 512 freed by then)
assert head["peak_allocated"] == 1024 + 8 * MiB, head
# reserved: 4 MiB held before the trace + 2 + 20 MiB of segment_alloc
assert head["peak_reserved"] == 26 * MiB, head
PY
python3 "$conv" "$tmp/kept.pickle" "$tmp/k.csv" >/dev/null || { echo "conversion failed (kept)"; exit 1; }
python3 - "$tmp/k.csv" <<'PY'
import json, sys
lines = open(sys.argv[1]).read().splitlines()
head, rows = json.loads(lines[0][2:]), [l.split(",") for l in lines[2:]]
MiB = 1 << 20
assert ["alloc", str(0x7f0100000000), str(32 * MiB), "0"] in rows[4:6], rows[:6]   # seeded after the segments
assert head["warmup_ops"] == 4 and len(rows) == 18, (head, rows)
assert head["peak_allocated"] == 1024 + 8 * MiB + 32 * MiB, head
PY
"$vram" replay "$tmp/k.csv" --json >"$tmp/kreplay.json" || { echo "vram replay rejected the seeded trace"; exit 1; }
python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); assert r["peak_allocated"] >= 32 << 20, r' "$tmp/kreplay.json"
"$vram" replay "$tmp/t.csv" --json >"$tmp/replay.json" || { echo "vram replay rejected the converted trace"; exit 1; }
python3 - "$tmp/replay.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
txt = json.dumps(r)
assert str(1024 + 8 * (1 << 20)) in txt, "replay's figures do not carry the trace's peak allocated: " + txt[:400]
print("replay ok")
PY

# a workload recorded after another in one process: its first blocks are carved out of a segment the earlier one
# left (64 MiB, holding a live 8 MiB block); PyTorch then reserves nothing new. The replay rebuilds that segment
# and reserves what PyTorch did (without it: a 20 MiB segment for the 8 MiB block and one more for 16 MiB).
python3 - "$tmp" <<'PY'
import pickle, sys
MiB, X, S = 1 << 20, 0x7f2000000000, 7
tr = [{"action": "alloc", "addr": X + 8 * MiB, "size": 16 * MiB, "stream": S},
      {"action": "free_requested", "addr": X + 8 * MiB, "size": 16 * MiB, "stream": S},
      {"action": "free_completed", "addr": X + 8 * MiB, "size": 16 * MiB, "stream": S}]
seg = {"device": 0, "address": X, "total_size": 64 * MiB, "stream": S, "segment_type": "large",
       "blocks": [{"address": X, "size": 8 * MiB, "requested_size": 8 * MiB, "state": "active_allocated"},
                  {"address": X + 8 * MiB, "size": 56 * MiB, "requested_size": 0, "state": "inactive"}]}
pickle.dump({"segments": [seg], "device_traces": [tr]}, open(sys.argv[1] + "/warm.pickle", "wb"))
PY
python3 "$conv" "$tmp/warm.pickle" "$tmp/w.csv" >/dev/null || { echo "conversion failed (warm)"; exit 1; }
"$vram" replay "$tmp/w.csv" --json >"$tmp/wreplay.json" || { echo "vram replay rejected the warm trace"; exit 1; }
python3 - "$tmp/w.csv" "$tmp/wreplay.json" <<'PY'
import json, sys
MiB = 1 << 20
head = json.loads(open(sys.argv[1]).readline()[2:])
r = json.load(open(sys.argv[2]))
assert head["peak_reserved"] == 64 * MiB and head["peak_allocated"] == 24 * MiB, head
assert r["peak_reserved"] == 64 * MiB, ("replay reserved", r["peak_reserved"])
assert r["peak_allocated"] == 24 * MiB, ("replay allocated (the rebuilt segment is not a peak)", r["peak_allocated"])
print("warm segments: replay reserved", r["peak_reserved"], "= PyTorch's")
PY

fails=0
expect_fail() { # pattern snapshot output
  set +e; python3 "$conv" "$2" "$3" >/dev/null 2>"$tmp/err"; local rc=$?; set -e
  if [ "$rc" != 1 ] || [ "$(wc -l <"$tmp/err")" != 1 ] || ! grep -q -- "$1" "$tmp/err"; then
    echo "FAIL: $2 -> $3: exit $rc, want 1 and one line naming '$1':"; cat "$tmp/err"; fails=$((fails + 1))
  fi
  [ ! -e "$3" ] || { echo "FAIL: $3 left behind"; fails=$((fails + 1)); }
}
expect_fail "corrupt.pickle" "$tmp/corrupt.pickle" "$tmp/o1.csv"
expect_fail "plain data only" "$tmp/class.pickle" "$tmp/o2.csv"
expect_fail "device_traces" "$tmp/nokeys.pickle" "$tmp/o3.csv"
expect_fail "no alloc events (0 events)" "$tmp/empty.pickle" "$tmp/o4.csv"
expect_fail "missing.pickle" "$tmp/missing.pickle" "$tmp/o5.csv"
expect_fail "$tmp/nodir/o.csv" "$tmp/snap.pickle" "$tmp/nodir/o.csv"
ls "$tmp" | grep -q '\.tmp\.' && { echo "FAIL: temporary file left"; fails=$((fails + 1)); }
[ "$fails" = 0 ] && echo "torch_snapshot: all ok"
exit "$fails"
