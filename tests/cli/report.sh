#!/usr/bin/env bash
# vram report: the page is written atomically and self-contained; its embedded
# figures equal vram plan --json's to the byte; rendered in headless Chromium
# (no network) the DOM shows the same peak and per-role bytes; bad flags and an
# unwritable -o give one line and leave no file. The browser part skips (with
# a note) only when chromium is absent.
set -euo pipefail
vram="$1"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
flags=(--preset tiny --batch 4 --memory dynamic)

"$vram" report "${flags[@]}" -o "$tmp/r.html" >"$tmp/out" || { echo "vram report failed"; exit 1; }
grep -q "wrote $tmp/r.html" "$tmp/out" || { echo "no 'wrote' line"; cat "$tmp/out"; exit 1; }
"$vram" plan "${flags[@]}" --json >"$tmp/plan.json"
ls "$tmp" | grep -q tmp && { echo "temporary file left behind"; ls "$tmp"; exit 1; }

# the embedded blob: same figures as plan --json; nothing fetched from the network
python3 - "$tmp/r.html" "$tmp/plan.json" <<'PY'
import json, re, sys
html = open(sys.argv[1], encoding="utf-8").read()
plan = json.load(open(sys.argv[2]))
m = re.search(r'<script id="data" type="application/json">\n(.*?)</script>', html, re.S)
assert m, "no data blob"
d = json.loads(m.group(1))
assert d["peak"]["bytes"] == plan["peak"]["bytes"] and d["arena"]["bytes"] == plan["arena"]["bytes"]
for r, v in plan["roles"].items():
    assert d["roles"][r]["at_peak"] == v["at_peak"], r
R = len(d["role_order"]); N = len(d["nodes"]["name"])
assert N == plan["graph"]["nodes"] and len(d["live"]) == N * R
assert sum(d["live"][d["peak"]["node"] * R:(d["peak"]["node"] + 1) * R]) == plan["peak"]["bytes"]
assert sum(t["bytes"] for t in d["peak_tensors"]) == plan["peak"]["bytes"], "peak tensors do not add up to the peak"
assert d["dynamic"]["peak_reserved"] == plan["dynamic"]["peak_reserved"]
assert len(d["fit"]["rows"]) >= 2
# the allocator's segments at the peak: allocated blocks add up to the allocated bytes of that node
dy = d["dynamic"]
blocks = [b for s in dy["segments"] for b in s["blocks"]]
assert sum(b[1] for b in blocks if b[2]) == dy["allocated"][dy["snapshot_node"]], "segments vs allocated"
assert sum(s["size"] for s in dy["segments"]) == dy["reserved"][dy["snapshot_node"]], "segments vs reserved"
assert dy["largest_free"] == max([b[1] for b in blocks if not b[2]] or [0])
for bad in ("http://", "https://", "src=\"//"):
    assert bad not in html, "the page refers to the network: " + bad
print("blob ok:", N, "nodes, peak", d["peak"]["bytes"])
PY

# bad input: one line, the right status, no file
expect_fail() { # status pattern args...
  local st=$1 pat=$2; shift 2
  set +e; "$vram" report "$@" >/dev/null 2>"$tmp/err"; local rc=$?; set -e
  [ "$rc" = "$st" ] || { echo "report $*: exit $rc, want $st"; cat "$tmp/err"; exit 1; }
  [ "$(wc -l <"$tmp/err")" = 1 ] || { echo "report $*: want one line"; cat "$tmp/err"; exit 1; }
  grep -q -- "$pat" "$tmp/err" || { echo "report $*: error does not name '$pat'"; cat "$tmp/err"; exit 1; }
}
expect_fail 2 "--bogus" --bogus
expect_fail 2 "--memory" --preset tiny --memory sideways
expect_fail 2 "--capacity" --preset tiny --capacity lots
expect_fail 2 "-o" --preset tiny -o
expect_fail 1 "$tmp/nodir/r.html" --preset tiny -o "$tmp/nodir/r.html"
[ ! -e "$tmp/nodir" ] || { echo "unwritable -o left something"; exit 1; }
mkdir "$tmp/ro" && chmod 555 "$tmp/ro"
if [ ! -w "$tmp/ro" ]; then   # root writes anywhere: only check when the mode means something
  expect_fail 1 "$tmp/ro/r.html" --preset tiny -o "$tmp/ro/r.html"
  [ -z "$(ls -A "$tmp/ro")" ] || { echo "partial file left in a read-only dir"; exit 1; }
fi

# --run: a CPU run's measured live bytes per node equal the plan's, and every node has a time
"$vram" report --preset tiny --batch 4 --run 2 --no-fit -o "$tmp/run.html" >/dev/null
"$vram" plan --preset tiny --batch 4 --timeline --json >"$tmp/tl.json"
python3 - "$tmp/run.html" "$tmp/tl.json" <<'PY'
import json, re, sys
html = open(sys.argv[1], encoding="utf-8").read()
plan = json.load(open(sys.argv[2]))
d = json.loads(re.search(r'<script id="data" type="application/json">\n(.*?)</script>', html, re.S).group(1))
run = d["run"]
assert run["steps"] == 2 and run["device"] == "cpu"
assert run["live"] == [e["total"] for e in plan["timeline"]], "measured live bytes differ from the plan"
assert len(run["node_ms"]) == len(plan["timeline"]) and all(t >= 0 for t in run["node_ms"]) and sum(run["node_ms"]) > 0
assert "fit" not in d
print("run ok: measured live bytes = plan on", len(run["live"]), "nodes")
PY
expect_fail0() { set +e; "$vram" report "$@" >/dev/null 2>"$tmp/err"; local rc=$?; set -e; [ "$rc" = 2 ] || { echo "report $*: exit $rc"; cat "$tmp/err"; exit 1; }; }
expect_fail0 --preset tiny --device cpu
expect_fail0 --preset tiny --run 0

# out of memory: vram train writes the failing step's report and names it on its one error line
set +e
"$vram" train --device cpu:8MiB --batch 512 --steps 1 --quiet --oom-report "$tmp/oom.html" >/dev/null 2>"$tmp/err"; rc=$?
TMPDIR="$tmp" "$vram" train --device cpu:8MiB --memory dynamic --batch 512 --steps 1 --eval-every -1 --quiet \
  >/dev/null 2>"$tmp/err2"; rc2=$?
set -e
[ "$rc" = 1 ] && [ "$(wc -l <"$tmp/err")" = 1 ] && grep -q "memory report of the step: $tmp/oom.html" "$tmp/err" ||
  { echo "oom report: exit $rc"; cat "$tmp/err"; exit 1; }
grep -q '"peak_tensors"' "$tmp/oom.html" || { echo "oom report has no data"; exit 1; }
[ "$rc2" = 1 ] && grep -q "memory report of the step: $tmp/vram-oom-[0-9]*.html" "$tmp/err2" ||
  { echo "dynamic oom report (default path): exit $rc2"; cat "$tmp/err2"; exit 1; }
grep -q '"oom":true' "$tmp"/vram-oom-*.html || { echo "dynamic oom report does not mark the OOM"; exit 1; }

# in a real browser, network off
browser=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$browser" ]; then
  echo "note: chromium not installed: browser check skipped (scripts/setup.sh installs it)"
  exit 0
fi
timeout 120 "$browser" --headless --disable-gpu --no-sandbox --user-data-dir="$tmp/prof" \
  --proxy-server=127.0.0.1:9 --proxy-bypass-list='<-loopback>' --host-resolver-rules='MAP * ~NOTFOUND' \
  --dump-dom "file://$tmp/r.html" >"$tmp/dom.html" 2>/dev/null
python3 - "$tmp/dom.html" "$tmp/plan.json" <<'PY'
import json, re, sys
dom = open(sys.argv[1], encoding="utf-8").read()
plan = json.load(open(sys.argv[2]))
assert 'data-rendered="1"' in dom, "the page's script did not finish"
def attr(id):
    m = re.search(r'id="%s"[^>]*data-bytes="(\d+)"' % re.escape(id), dom) or \
        re.search(r'data-bytes="(\d+)"[^>]*id="%s"' % re.escape(id), dom)
    assert m, "no element #" + id
    return int(m.group(1))
assert attr("peak-bytes") == plan["peak"]["bytes"], (attr("peak-bytes"), plan["peak"]["bytes"])
assert attr("arena-bytes") == plan["arena"]["bytes"]
assert attr("reserved-bytes") == plan["dynamic"]["peak_reserved"]
for r, v in plan["roles"].items():
    assert attr("role-" + r) == v["at_peak"], r
assert "<svg" in dom and dom.count("<path") >= 7, "no chart"
assert dom.count("<tr") > 10, "no tables"
assert 'id="runsec" style="display:none"' in dom, "no run was made: the run section stays hidden"
print("rendered DOM ok: peak", plan["peak"]["bytes"])
PY
# with ranks the what-if table has a ZeRO column (the fitter searches the stages)
"$vram" report --preset tiny --gpus 2 --capacity 64MiB -o "$tmp/rz.html" >/dev/null
timeout 120 "$browser" --headless --disable-gpu --no-sandbox --user-data-dir="$tmp/prof2" \
  --proxy-server=127.0.0.1:9 --proxy-bypass-list='<-loopback>' --host-resolver-rules='MAP * ~NOTFOUND' \
  --dump-dom "file://$tmp/rz.html" >"$tmp/domz.html" 2>/dev/null
grep -q "<th>ZeRO</th>" "$tmp/domz.html" && grep -q "2 ranks: each row" "$tmp/domz.html" ||
  { echo "report --gpus 2: no ZeRO column in the what-if table"; exit 1; }
