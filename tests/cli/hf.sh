#!/usr/bin/env bash
# Hugging Face Llama-family directories: a checkpoint with random weights written by a pure-PyTorch
# reference (tests/cli/hf_oracle.py, transformers' semantics) gives vram the reference's loss (fp32, within
# 1e-5 relative) through `train --init DIR` and `eval --init DIR`, for a Llama 3 (GQA, rope scaling, untied)
# and a Qwen2 (q/k/v biases, tied); --save-init / --save write directories that hold the same tensors and
# load again; `plan --hf` takes the shape from config.json; bad directories get one clear line.
set -euo pipefail
vram="$1"
here="$(cd "$(dirname "$0")" && pwd)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
py=/usr/bin/python3 # Debian's, with python3-torch (scripts/setup.sh)
[ -x "$py" ] && "$py" -c "import torch" 2>/dev/null || { echo "python3-torch missing: skipped"; exit 0; }
B=2 T=32
close() { "$py" -c "import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); sys.exit(abs(a - b) > 1e-5 * abs(b))" "$1" "$2"; }
for kind in llama3 qwen2; do
  d="$tmp/$kind"
  ref=$("$py" "$here/hf_oracle.py" write "$d" $kind $B $T)
  "$vram" train --init "$d" --data "$d/tokens.bin" --batch $B --seq $T --steps 2 --lr 1e-3 --eval-every -1 --json \
    --save-init "$tmp/init_$kind" --save "$tmp/out_$kind" >"$tmp/train.jsonl" 2>"$tmp/err" ||
    { echo "$kind: train failed"; cat "$tmp/err"; exit 1; }
  got=$("$py" -c "import json, sys
print([r for r in map(json.loads, open(sys.argv[1])) if r.get('event') == 'step'][0]['loss'])" "$tmp/train.jsonl")
  close "$got" "$ref" || { echo "$kind: vram train's first loss $got, the reference's $ref"; exit 1; }
  # eval on the same first batch (--split all: the training batches)
  ev=$("$vram" eval --init "$d" --data "$d/tokens.bin" --split all --batch $B --seq $T --batches 1 --json |
       "$py" -c "import json, sys; print(json.load(sys.stdin)['loss'])")
  close "$ev" "$ref" || { echo "$kind: vram eval $ev, the reference's $ref"; exit 1; }
  "$py" "$here/hf_oracle.py" same "$d" "$tmp/init_$kind" || { echo "$kind: --save-init changed the weights"; exit 1; }
  "$py" - "$tmp/init_$kind/config.json" "$d/config.json" <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
for k in ("model_type", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
          "num_key_value_heads", "head_dim", "vocab_size", "max_position_embeddings", "rms_norm_eps", "rope_theta",
          "rope_scaling", "tie_word_embeddings"):
    assert a.get(k) == b.get(k), (k, a.get(k), b.get(k))
PY
  # the trained directory loads again and is not the initial one
  "$vram" eval --init "$tmp/out_$kind" --data "$d/tokens.bin" --split all --batch $B --seq $T --batches 1 >"$tmp/o" 2>&1 ||
    { echo "$kind: the saved directory does not load"; cat "$tmp/o"; exit 1; }
  if "$py" "$here/hf_oracle.py" same "$d" "$tmp/out_$kind" 2>/dev/null; then echo "$kind: training changed nothing"; exit 1; fi
done

"$vram" plan --hf "$tmp/llama3/config.json" --batch 2 --seq 32 >"$tmp/plan"
grep -q "^model     llama .*NKV=2 hd=16 I=96 V=300.*untied rope 500000 llama3" "$tmp/plan" ||
  { echo "plan --hf: shape"; cat "$tmp/plan"; exit 1; }

fails() { # what, expected text, vram args...
  local what="$1" want="$2"; shift 2
  if "$vram" "$@" >"$tmp/o" 2>"$tmp/e"; then echo "$what: should fail"; exit 1; fi
  [ "$(wc -l <"$tmp/e")" -eq 1 ] && grep -q -- "$want" "$tmp/e" || { echo "$what:"; cat "$tmp/e"; exit 1; }
}
bad="$tmp/bad"; cp -r "$tmp/llama3" "$bad"
"$py" - "$bad/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); del c["hidden_size"]; json.dump(c, open(sys.argv[1], "w"))
PY
fails "config without hidden_size" '"hidden_size"' plan --hf "$bad" --batch 1 --seq 8
cp "$tmp/qwen2/config.json" "$bad/config.json"   # another model's config: tensors missing
fails "missing tensor" 'missing tensor "model.layers.0.self_attn.q_proj.bias"' train --init "$bad" --steps 1 --batch 1 --seq 8
"$py" - "$tmp/llama3/config.json" "$bad/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); c["intermediate_size"] = 100; json.dump(c, open(sys.argv[2], "w"))
PY
fails "wrong shape" 'model.safetensors: tensor "model.layers.0.mlp.gate_proj.weight" has shape (96, 64), expected (100, 64)' \
  eval --init "$bad" --batch 1 --seq 8
rm "$bad/model.safetensors"
fails "no weights" "$bad" eval --init "$bad" --batch 1 --seq 8
echo "hf ok"
