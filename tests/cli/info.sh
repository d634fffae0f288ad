#!/usr/bin/env bash
# vram info: exits 0 with or without a GPU, lists cpu and meta, and --json parses.
set -euo pipefail
vram="$1"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$vram" info >"$tmp/out" 2>"$tmp/err" || { echo "vram info failed:"; cat "$tmp/out" "$tmp/err"; exit 1; }
cat "$tmp/out"
grep -q '^cpu ' "$tmp/out" || { echo "no cpu line"; exit 1; }
grep -q '^meta ' "$tmp/out" || { echo "no meta line"; exit 1; }
grep -q '80.00 GiB' "$tmp/out" || { echo "meta default capacity missing"; exit 1; }
grep -Eq '^(cuda:[0-9]|cuda +no CUDA device)' "$tmp/out" || { echo "neither a GPU nor 'no CUDA device'"; exit 1; }
grep -Eq '^cudnn +([0-9]+\.[0-9]+\.[0-9]+ |not loaded: .+ \(CUDA attention)' "$tmp/out" || { echo "no cudnn line"; exit 1; }

"$vram" info --json >"$tmp/json"
python3 - "$tmp/json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
kinds = [x["kind"] for x in d["devices"]]
assert "cpu" in kinds and "meta" in kinds, kinds
meta = next(x for x in d["devices"] if x["kind"] == "meta")
assert meta["total_bytes"] == 80 * 2**30, meta
cpu = next(x for x in d["devices"] if x["kind"] == "cpu")
assert cpu["total_bytes"] > 0 and 0 < cpu["free_bytes"] <= cpu["total_bytes"], cpu
dv = d["cuda"]["cudnn_version"]
assert dv == 0 and d["cuda"]["cudnn_why"] or dv >= 90000 and "cudnn_why" not in d["cuda"], d["cuda"]
n = d["cuda"]["device_count"]
assert (n == 0) == (d["cuda"]["error"] is not None), d["cuda"]
assert kinds.count("cuda") == n, kinds
for g in (x for x in d["devices"] if x["kind"] == "cuda"):
    assert "error" in g or g["total_bytes"] > 0, g
print("json ok:", kinds)
PY
"$vram" info --json | python3 -c 'import json,sys; json.load(sys.stdin)'

if "$vram" info --bogus 2>/dev/null; then echo "--bogus accepted"; exit 1; fi
"$vram" info --help >"$tmp/help" && grep -q json "$tmp/help"
echo ok
