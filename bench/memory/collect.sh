#!/usr/bin/env bash
# Regenerates the tables of bench/memory/README.md: runs each `vram plan`
# command below (JSON output) and prints one markdown row per command.
# Usage: bench/memory/collect.sh [path/to/vram]   (default: build/vram)
set -euo pipefail
vram="${1:-build/vram}"
row() {
  local label="$1"; shift
  "$vram" plan "$@" --json | python3 -c '
import json, shlex, sys
label, cmd = sys.argv[1], shlex.join(sys.argv[2:])
d = json.load(sys.stdin)
r = d["roles"]; G = 2**30
f = lambda b: "%.2f" % (b / G)
dyn = d.get("dynamic")
print("| %s | %s | %s | %s | %s | %s | %s | %s | %s | `vram plan %s` |" % (
    label, f(r["params"]["at_peak"] + r["master"]["at_peak"]), f(r["grads"]["at_peak"]), f(r["optim"]["at_peak"]),
    f(r["acts"]["at_peak"]), f(r["temp"]["at_peak"] + r["inputs"]["at_peak"]), f(d["peak"]["bytes"]),
    f(d["arena"]["bytes"]), f(dyn["peak_reserved"]) if dyn else "-", cmd))
' "$label" "$@"
}
echo "| case | params+master | grads | optim | acts | temp+inputs | peak | arena | dyn. reserved | command |"
echo "|---|---|---|---|---|---|---|---|---|---|"
G=(--preset gpt2 --seq 1024)
row "B=16 none"            "${G[@]}" --batch 16 --memory dynamic
row "B=16 selective"       "${G[@]}" --batch 16 --recompute selective --memory dynamic
row "B=16 block"           "${G[@]}" --batch 16 --recompute block --memory dynamic
row "B=8"                  "${G[@]}" --batch 8 --memory dynamic
row "B=2 x accum 4"        "${G[@]}" --batch 2 --accum 4 --memory dynamic
row "B=16 eval (no grad)"  "${G[@]}" --batch 16 --eval --memory dynamic
row "B=16 eval, in place"  "${G[@]}" --batch 16 --eval --inplace --memory dynamic
row "B=16 freeze attn"     "${G[@]}" --batch 16 --freeze 'h.*.attn*' --memory dynamic
row "B=16 freeze all but top 2 blocks" "${G[@]}" --batch 16 --freeze 'wte,wpe,h.?.*' --memory dynamic
row "B=16 bf16"            "${G[@]}" --batch 16 --precision bf16 --memory dynamic
row "B=16 bf16 + block"    "${G[@]}" --batch 16 --precision bf16 --recompute block --memory dynamic
