#!/usr/bin/env bash
# vram --model llama: every preset plans on the meta device with its published parameter count,
# freezing 'layers.*.mlp.*' leaves fewer trainable parameters and a smaller plan, any shape by flags
# plans, a tiny Llama trains on the CPU with a falling loss, and a bad llama flag exits 2 naming it.
set -euo pipefail
vram="$1"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

for p in "llama3.2-1b 1235814400" "llama3.2-3b 3212749824" "llama3.1-8b 8030261248" \
         "smollm2-135m 134515008" "smollm2-360m 361821120" "qwen2.5-0.5b 494032768"; do
  set -- $p
  "$vram" plan --model llama --preset "$1" --batch 1 --seq 256 --precision bf16 >"$tmp/out" 2>&1 ||
    { echo "plan $1 failed"; cat "$tmp/out"; exit 1; }
  grep -q "^model     llama .*: $2 params, $2 trainable" "$tmp/out" || { echo "$1: param count"; cat "$tmp/out"; exit 1; }
done
set -- "$vram"

"$vram" plan --model llama --preset llama3.2-1b --batch 8 --seq 2048 --precision bf16 --json >"$tmp/full.json"
"$vram" plan --model llama --preset llama3.2-1b --batch 8 --seq 2048 --precision bf16 --json \
  --freeze 'layers.*.mlp.*' >"$tmp/frozen.json"
python3 - "$tmp/full.json" "$tmp/frozen.json" <<'PY'
import json, sys
full, frozen = (json.load(open(p)) for p in sys.argv[1:3])
mlp = 16 * 3 * 8192 * 2048
assert full["model"]["kind"] == "llama", full["model"]
assert full["model"]["trainable"] - frozen["model"]["trainable"] == mlp, (full["model"], frozen["model"])
assert frozen["arena"]["bytes"] < full["arena"]["bytes"], "freezing the MLPs should shrink the plan"
PY

"$vram" plan --model llama --layers 3 --channels 96 --heads 6 --kv-heads 2 --head-dim 32 --intermediate 200 \
  --vocab 1000 --rope-theta 10000 --untied --qkv-bias --batch 2 --seq 32 >"$tmp/flags" ||
  { echo "plan by flags failed"; exit 1; }
grep -q "NKV=2 hd=32 I=200 .* untied qkv-bias" "$tmp/flags" || { echo "shape flags"; cat "$tmp/flags"; exit 1; }

"$vram" train --model llama --steps 20 --batch 4 --seq 16 --lr 0.01 >"$tmp/train" 2>&1 ||
  { echo "llama train failed"; cat "$tmp/train"; exit 1; }
python3 - "$tmp/train" <<'PY'
import re, sys
m = re.search(r"loss ([0-9.]+) -> ([0-9.]+)", open(sys.argv[1]).read())
assert m and float(m.group(2)) < float(m.group(1)), "the loss should fall"
PY

# a vocabulary over 65536 trains from a version-2 (uint32) token file, and from the generated corpus
python3 - "$tmp/wide.bin" <<'PY'
import struct, sys, random
random.seed(1)
tok = [random.randrange(70000) for _ in range(4096)] + [69999]
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", 20240520, 2, len(tok), *([0] * 253)))
    f.write(struct.pack(f"<{len(tok)}I", *tok))
PY
"$vram" train --model llama --layers 1 --channels 32 --heads 2 --kv-heads 1 --intermediate 64 --vocab 70000 \
  --data "$tmp/wide.bin" --steps 2 --batch 2 --seq 16 >"$tmp/wide" 2>&1 || { echo "uint32 tokens"; cat "$tmp/wide"; exit 1; }
if "$vram" train --model llama --layers 1 --channels 32 --heads 2 --kv-heads 1 --intermediate 64 --vocab 69999 \
  --data "$tmp/wide.bin" --steps 2 --batch 2 --seq 16 >"$tmp/o" 2>"$tmp/e"; then echo "token 69999 >= vocab 69999"; exit 1; fi
grep -q "wide.bin" "$tmp/e" || { echo "the error should name the file"; cat "$tmp/e"; exit 1; }
"$vram" train --model llama --layers 1 --channels 32 --heads 2 --kv-heads 1 --intermediate 64 --vocab 128256 \
  --steps 2 --batch 2 --seq 16 >"$tmp/wide" 2>&1 || { echo "generated corpus, vocab 128256"; cat "$tmp/wide"; exit 1; }

expect_fail() { # flag, args...
  local flag="$1"; shift
  if "$vram" plan "$@" >"$tmp/o" 2>"$tmp/e"; then echo "should fail: $*"; exit 1; fi
  [ "$(wc -l <"$tmp/e")" -eq 1 ] && grep -q -- "$flag" "$tmp/e" || { echo "error for $*:"; cat "$tmp/e"; exit 1; }
}
expect_fail --kv-heads --model llama --heads 4 --kv-heads 3
expect_fail --head-dim --model llama --head-dim 7
expect_fail --rope-theta --model llama --rope-theta zero
expect_fail --kv-heads --model gpt --kv-heads 2
expect_fail --preset --model llama --preset llama9
echo "llama cli ok"
