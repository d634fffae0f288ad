#!/usr/bin/env bash
# vram plan: a plan runs and prints the role table, --json parses and its
# figures hang together, --timeline has a line per node, and every bad flag
# exits 2 with a one-line error naming the flag.
set -euo pipefail
vram="$1"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$vram" plan --preset tiny --batch 4 >"$tmp/out" 2>"$tmp/err" || { echo "vram plan failed:"; cat "$tmp/out" "$tmp/err"; exit 1; }
cat "$tmp/out"
for role in params master grads optim inputs acts temp peak arena; do
  grep -q "^$role " "$tmp/out" || { echo "no '$role' line"; exit 1; }
done
grep -q "CUDA context none" "$tmp/out" || { echo "meta should say no CUDA context"; exit 1; }
# whose kernels' scratch the plan counts: on meta the CPU kernels' unless --kernels cuda, and it says how to plan a GPU run
grep -q "^          CPU kernels' scratch (--kernels cuda: a GPU run's" "$tmp/out" || { echo "meta: the CPU kernels line"; exit 1; }
cpu=$("$vram" plan --preset tiny --batch 4 --device cpu)
echo "$cpu" | grep -q "^          CPU kernels' scratch$" || { echo "cpu: the CPU kernels line, no hint"; echo "$cpu"; exit 1; }

# GPT-2 124M: the parameter count and a fit against a capacity
"$vram" plan --preset gpt2 --batch 2 --seq 256 --capacity 1GiB >"$tmp/gpt2" || { echo "gpt2 plan failed"; exit 1; }
grep -q "124475904 params" "$tmp/gpt2" || { echo "gpt2 param count"; cat "$tmp/gpt2"; exit 1; }
grep -q "DOES NOT FIT" "$tmp/gpt2" || { echo "1 GiB should not fit gpt2 training"; exit 1; }

# a GPU run planned on any machine: meta with the CUDA kernels' scratch == --device cuda (no GPU needed)
m=$("$vram" plan --preset gpt2 --batch 4 --seq 256 --precision bf16 --device meta --kernels cuda --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["arena"]["bytes"])')
c=$("$vram" plan --preset gpt2 --batch 4 --seq 256 --precision bf16 --device cuda --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["arena"]["bytes"])')
p=$("$vram" plan --preset gpt2 --batch 4 --seq 256 --precision bf16 --device meta --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["arena"]["bytes"])')
[ "$m" = "$c" ] || { echo "meta --kernels cuda arena $m != cuda arena $c"; exit 1; }
[ "$m" != "$p" ] || { echo "the CUDA kernels' scratch should change the arena ($m)"; exit 1; }

# --norm-backward output: said in the step line and the JSON; the residual stream no longer saved (GPT-2 124M
# B=4 T=256 fp32: 24 norm inputs of 4 x 256 x 768 x 4 bytes less, ln_f's output more, 25 means less)
"$vram" plan --preset gpt2 --batch 4 --seq 256 --norm-backward output >"$tmp/nb" || { echo "norm-backward plan failed"; exit 1; }
grep -q "norm backward from the output" "$tmp/nb" || { echo "the step line should say the norm backward"; cat "$tmp/nb"; exit 1; }
a_in=$("$vram" plan --preset gpt2 --batch 4 --seq 256 --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["roles"]["acts"]["total"])')
a_out=$("$vram" plan --preset gpt2 --batch 4 --seq 256 --norm-backward output --json | python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["step"]["norm_backward"]=="output"; print(d["roles"]["acts"]["total"])')
[ $((a_in - a_out)) -eq $((24 * 4 * 256 * 768 * 4 + 25 * 4 * 256 * 4)) ] || { echo "acts $a_in -> $a_out: not the norms' inputs"; exit 1; }

# --classifier-rows: the CUDA classifier's scratch is that many rows of 50304 16-bit logits (GPT-2 124M B=8 bf16:
# 4096 rows by default, 1024 asked for), said in the step line and the JSON; the CPU kernels' chunk is their own
cr() { "$vram" plan --preset gpt2 --batch 8 --seq 1024 --precision bf16 --kernels cuda --json "$@" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["step"]["classifier_rows"], d["roles"]["temp"]["total"])'; }
read -r r0 t0 <<<"$(cr)"; read -r r1 t1 <<<"$(cr --classifier-rows 1024)"
[ "$r0" = 0 ] && [ "$r1" = 1024 ] || { echo "classifier_rows in the JSON: $r0 $r1"; exit 1; }
[ $((t0 - t1)) -eq $(((4096 - 1024) * 50304 * 2)) ] || { echo "temp $t0 -> $t1: not 3072 rows of logits less"; exit 1; }
"$vram" plan --preset gpt2 --batch 8 --seq 1024 --precision bf16 --kernels cuda --classifier-rows 1024 | grep -q "classifier chunks of 1024 rows" || { echo "the step line should say the classifier's rows"; exit 1; }

# --json parses; roles add up to the peak; the arena is at least the peak
"$vram" plan --preset tiny --batch 4 --memory dynamic --timeline --json >"$tmp/json"
python3 - "$tmp/json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
roles = d["roles"]
assert set(roles) == {"params", "master", "grads", "optim", "inputs", "acts", "temp"}, roles
assert sum(r["at_peak"] for r in roles.values()) == d["peak"]["bytes"], d["peak"]
assert d["arena"]["bytes"] >= d["peak"]["aligned_bytes"] >= d["peak"]["bytes"] > 0
assert d["arena"]["align"] == 256
assert len(d["timeline"]) == d["graph"]["nodes"]
assert max(e["total"] for e in d["timeline"]) == d["peak"]["bytes"]
assert d["dynamic"]["peak_requested"] == d["peak"]["bytes"], d["dynamic"]
assert d["dynamic"]["peak_reserved"] >= d["dynamic"]["peak_allocated"] >= d["peak"]["bytes"]
assert d["device"]["context"] == 0 and d["device"]["fits"] is True
print("json ok: peak", d["peak"]["bytes"], "arena", d["arena"]["bytes"])
PY

# strategies run; eval keeps no activations; an MLP plans too
"$vram" plan --preset tiny --recompute block --json | python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["graph"]["recompute"] > 0'
"$vram" plan --preset tiny --eval --json | python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["roles"]["acts"]["total"] == 0 and d["roles"]["grads"]["total"] == 0'
"$vram" plan --model mlp --preset mnist --batch 64 --optim sgd --freeze 'fc0.*' >/dev/null
"$vram" plan --preset tiny --eval --inplace --json | python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["arena"]["inplace_outputs"] > 0'
"$vram" plan --preset tiny --precision bf16 --freeze 'h.*.attn*' --accum 4 --clip 1.0 --json >/dev/null
"$vram" plan --preset tiny --timeline >"$tmp/tl"
grep -q "<- peak" "$tmp/tl" || { echo "timeline marks no peak"; exit 1; }

# bad flags: exit 2, one line, naming the flag
bad() {
  local flag="$1"; shift
  set +e
  "$vram" plan "$@" >"$tmp/bout" 2>"$tmp/berr"
  local rc=$?
  set -e
  [ "$rc" -eq 2 ] || { echo "'$*' exited $rc, want 2"; cat "$tmp/berr"; exit 1; }
  [ "$(wc -l <"$tmp/berr")" -eq 1 ] || { echo "'$*': not one line:"; cat "$tmp/berr"; exit 1; }
  grep -q -- "$flag" "$tmp/berr" || { echo "'$*': error does not name $flag:"; cat "$tmp/berr"; exit 1; }
}
bad --bogus --bogus
bad --batch --batch x
bad --batch --batch 0
bad --batch --batch
bad --model --model rnn
bad --preset --preset gpt5
bad --optim --optim lion
bad --recompute --recompute some
bad --recompute-layers --recompute-layers 0 --recompute act
bad --recompute-layers --recompute-layers 2
bad --recompute-layers --recompute-layers 99 --recompute act
bad --norm-backward --norm-backward sideways
bad --norm-backward --norm-backward output --eval
bad --precision --precision fp8
bad --classifier-rows --classifier-rows 0
bad --classifier-rows --classifier-rows many
bad --classifier-rows --classifier-rows 64 --kernels cpu
bad --memory --memory lots
bad --device --device tpu
bad --kernels --kernels tpu
bad --capacity --capacity lots
bad --freeze --freeze 'nothing*'
bad --heads --heads 5
bad --seq --seq 100000 --max-seq 1024
bad --sizes --model mlp --sizes 10,x
bad --act --model mlp --act tanh
bad --clip --clip -1
bad --accum --accum 0
"$vram" plan --help >"$tmp/help"
grep -q -- --recompute "$tmp/help"
# bf16 that does not fit with a full master: the split master is named, with what it saves (half the master);
# a split master is as many bytes as the bf16 weights (every weight trainable here), and it is bf16's default
# (a full one with --offload optim, whose update runs on the host; fp16 keeps a full one)
"$vram" plan --preset small --batch 8 --precision bf16 --capacity 16MiB --master fp32 >"$tmp/nofit"
grep -q "DOES NOT FIT" "$tmp/nofit" && grep -q "^hint .*--master split" "$tmp/nofit" || { cat "$tmp/nofit"; exit 1; }
"$vram" plan --preset small --batch 8 --precision bf16 --capacity 16MiB >"$tmp/nofit"
! grep -q "^hint" "$tmp/nofit" || { cat "$tmp/nofit"; exit 1; }
"$vram" plan --preset small --batch 8 --precision bf16 --json |
  python3 -c 'import json,sys; d=json.load(sys.stdin); r=d["roles"]; assert d["step"]["master"] == "split" and r["master"]["total"] == r["params"]["total"], (d["step"], r["master"], r["params"])'
for f in "--precision bf16 --offload optim" "--precision fp16"; do
  "$vram" plan --preset small --batch 8 $f --json |
    python3 -c 'import json,sys; d=json.load(sys.stdin); r=d["roles"]; assert d["step"]["master"] == "fp32", d["step"]'
done
echo ok
