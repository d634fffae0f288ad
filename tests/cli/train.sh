#!/usr/bin/env bash
# vram train / vram eval: the default run's loss falls and its summary shows the
# planned bytes equal to the allocated ones (planned and dynamic); JSON records;
# an MLP; llm.c checkpoints through train and eval; a resumed run ends with the
# same bytes as a straight one; bad flags exit 2 and bad files exit 1, each with
# one line naming the flag or file.
set -euo pipefail
vram="$1"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# the default model, short: memory table first, then progress, then the summary
"$vram" train --steps 60 >"$tmp/out" 2>"$tmp/err" || { cat "$tmp/out" "$tmp/err"; fail "vram train"; }
cat "$tmp/out"
for role in params grads optim inputs acts temp; do grep -q "^$role " "$tmp/out" || fail "no '$role' line"; done
grep -q "^step 60/60" "$tmp/out" || fail "no progress line for the last step"
grep -q "plan at peak" "$tmp/out" || fail "no planned-vs-allocated table"
! grep -q DIFFERS "$tmp/out" || fail "planned and allocated bytes differ"
python3 - "$tmp/out" <<'PY'
import re, sys
m = re.search(r"loss ([0-9.]+) -> ([0-9.]+)", open(sys.argv[1]).read())
a, b = float(m.group(1)), float(m.group(2))
assert a > 5.0 and b < a - 1.5, (a, b)
print(f"loss falls: {a} -> {b}")
PY

# JSON lines; dynamic memory; the figures agree
"$vram" train --steps 8 --memory dynamic --recompute block --json >"$tmp/json"
python3 - "$tmp/json" <<'PY'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
kinds = [r["event"] for r in recs]
assert kinds[0] == "plan" and kinds.count("step") == 8 and kinds[-1] == "summary", kinds
s = recs[-1]["memory"]
assert s["mode"] == "dynamic" and s["plan_peak"] == s["run_peak"] > 0, s
assert s["plan_peak_reserved"] == s["run_peak_reserved"] and s["plan_peak_allocated"] == s["run_peak_allocated"], s
for role, r in s["roles"].items():
    assert r["plan_at_peak"] == r["run_at_peak"] and r["plan_max"] == r["run_max"], (role, r)
print("json ok:", recs[-1]["loss_first"], "->", recs[-1]["loss_last"])
PY

# an MLP with SGD + momentum, accumulation and clipping; frozen first layer
"$vram" train --model mlp --preset tiny --optim momentum --lr 0.05 --accum 2 --clip 1.0 --freeze 'fc0.*' \
  --steps 30 >"$tmp/mlp"
grep -q "summary   30 steps" "$tmp/mlp" || fail "mlp run"
! grep -q DIFFERS "$tmp/mlp" || fail "mlp: planned and allocated differ"

# llm.c checkpoints: save, evaluate, start from one; a shape mismatch is named
"$vram" train --steps 20 --save "$tmp/ck.bin" --save-state "$tmp/st.bin" --quiet
[ -s "$tmp/ck.bin" ] && [ -s "$tmp/st.bin" ] || fail "checkpoints not written"
"$vram" eval --init "$tmp/ck.bin" --batches 4 >"$tmp/eval"
grep -q "^loss " "$tmp/eval" || fail "eval prints no loss"
"$vram" eval --init "$tmp/ck.bin" --batches 2 --json | python3 -c 'import json,sys; d=json.load(sys.stdin); assert 0 < d["loss"] < 5.5 and d["plan_peak"] == d["run_peak"], d'
"$vram" train --init "$tmp/ck.bin" --steps 2 --quiet

# resume: 4 steps, save, resume to 10 == 10 straight (same bytes)
flags="--steps 10 --lr-schedule constant --warmup 0 --accum 2 --clip 1.0 --quiet"
"$vram" train $flags --save "$tmp/a.bin"
"$vram" train ${flags/--steps 10/--steps 4} --save-state "$tmp/s4.bin"
"$vram" train $flags --resume "$tmp/s4.bin" --save "$tmp/b.bin"
cmp "$tmp/a.bin" "$tmp/b.bin" || fail "resumed run differs from the straight one"
# the same with 8-bit (codes, absmax, small tensors' f32 state) and bf16 optimizer state
for os in 8bit bf16; do
  "$vram" train $flags --optim-state $os --save "$tmp/a.bin" --quiet
  "$vram" train ${flags/--steps 10/--steps 4} --optim-state $os --save-state "$tmp/s4.bin" --quiet
  "$vram" train $flags --optim-state $os --resume "$tmp/s4.bin" --save "$tmp/b.bin" --quiet
  cmp "$tmp/a.bin" "$tmp/b.bin" || fail "resumed run differs from the straight one ($os state)"
done

# errors: exit 2 (flags) or 1 (files, devices), one line naming the culprit
expect() {
  local want="$1" name="$2"; shift 2
  set +e
  "$vram" "$@" >"$tmp/bout" 2>"$tmp/berr"
  local rc=$?
  set -e
  [ "$rc" -eq "$want" ] || { cat "$tmp/berr"; fail "'$*' exited $rc, want $want"; }
  [ "$(wc -l <"$tmp/berr")" -eq 1 ] || { cat "$tmp/berr"; fail "'$*': not one line"; }
  grep -q -- "$name" "$tmp/berr" || { cat "$tmp/berr"; fail "'$*': error does not name $name"; }
}
expect 2 --bogus train --bogus
expect 2 --steps train --steps 0
expect 2 --lr train --lr fast
expect 2 --memory train --memory lots
expect 2 --device train --device tpu
expect 2 --optim train --optim lion
expect 2 --optim-state train --optim-state 4bit
expect 2 --optim-state train --optim-state 8bit --optim sgd
expect 2 --master train --master none
expect 2 --master train --master fp64
expect 2 --master train --master split
expect 2 --master train --master split --precision fp16
expect 2 --master train --master split --precision bf16 --offload optim
expect 2 --eval-every train --eval-every often
expect 2 --threads train --threads 0
expect 2 --warmup train --steps 10 --warmup 50
expect 2 --policy train --policy pytorch
expect 2 --init eval --batches 2
expect 1 nothing.txt train --data "$tmp/nothing.txt" --steps 1
printf 'garbage' >"$tmp/garbage.bin"
expect 1 garbage.bin train --init "$tmp/garbage.bin" --steps 1
expect 1 garbage.bin eval --init "$tmp/garbage.bin"
expect 2 --classifier-rows eval --init "$tmp/ck.bin" --classifier-rows 2
expect 2 --classifier-rows eval --init "$tmp/ck.bin" --classifier-rows 0
expect 1 channels train --init "$tmp/ck.bin" --channels 128 --steps 1
python3 - "$tmp/st.bin" "$tmp/bad.bin" <<'PY'
import sys
b = bytearray(open(sys.argv[1], "rb").read())
b[-50] ^= 0xFF
open(sys.argv[2], "wb").write(b)
PY
expect 1 bad.bin train --resume "$tmp/bad.bin" --steps 30
for i in $(seq 300); do printf 'the quick brown fox jumps over the lazy dog. '; done >"$tmp/text.txt"
expect 1 "other data" train --resume "$tmp/st.bin" --data "$tmp/text.txt" --steps 30
gpus=$("$vram" info --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["cuda"]["device_count"])')
if [ "$gpus" -eq 0 ]; then
  expect 1 cuda train --device cuda --steps 1
else
  "$vram" train --device cuda --steps 2 --quiet || fail "--device cuda fails on a machine with a GPU"
  # fp16: dynamic loss scaling reported per step and in the summary; a resumed state keeps the scale
  "$vram" train --device cuda --precision fp16 --steps 6 --loss-scale-window 3 --save-state "$tmp/h.bin" \
    >"$tmp/h.out" || fail "fp16 training failed"
  grep -q "scale 65536" "$tmp/h.out" || fail "fp16 steps show no loss scale"
  grep -q "fp16 loss scale 262144; 0 steps skipped" "$tmp/h.out" || { cat "$tmp/h.out"; fail "fp16 summary: want 2 doublings"; }
  "$vram" train --device cuda --precision fp16 --steps 9 --loss-scale-window 3 --resume "$tmp/h.bin" \
    >"$tmp/h2.out" || fail "fp16 resume failed"
  grep -q "^step 7/9 .*| scale 262144" "$tmp/h2.out" || { cat "$tmp/h2.out"; fail "fp16 resume: the scale should go on from 262144"; }
  # vram eval on the GPU: the fp32 loss of a checkpoint equals the CPU's (same kernels' arithmetic to rounding)
  "$vram" train --steps 5 --save "$tmp/ev.bin" --quiet || fail "save for eval"
  lc=$("$vram" eval --init "$tmp/ev.bin" --batches 4 --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["loss"])')
  lg=$("$vram" eval --init "$tmp/ev.bin" --batches 4 --device cuda --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["loss"])')
  python3 -c "import sys; c, g = float('$lc'), float('$lg'); sys.exit(0 if abs(c - g) <= 1e-4 * abs(c) else 1)" ||
    fail "eval on cuda: loss $lg, cpu $lc"
  "$vram" eval --init "$tmp/ev.bin" --batches 4 --device cuda --precision bf16 >/dev/null || fail "eval bf16 on cuda"
  # --classifier-rows: the same loss in smaller chunks (fp32), a smaller planned peak that the run matches
  read -r l1 p1 q1 <<<"$("$vram" eval --init "$tmp/ev.bin" --batches 4 --device cuda --classifier-rows 1 --json |
    python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["loss"], d["plan_peak"], d["run_peak"])')"
  python3 -c "import sys; sys.exit(abs($l1 - $lg) > 1e-5 or $p1 != $q1)" || fail "eval --classifier-rows 1: loss $l1 (default $lg), peak $p1 planned, $q1 run"
  # compact optimizer state on the GPU: plan == run, the loss falls; fp32 + 8-bit state close to the CPU's
  for f in "--optim-state 8bit" "--optim-state bf16" "--optim-state 8bit --master none" "--master none" \
           "--optim momentum --optim-state 8bit" "--master fp32" "--master fp32 --optim-state 8bit"; do
    "$vram" train --device cuda --precision bf16 --steps 30 $f >"$tmp/cs.out" || fail "cuda bf16 $f"
    ! grep -q DIFFERS "$tmp/cs.out" || { cat "$tmp/cs.out"; fail "cuda bf16 $f: planned and allocated differ"; }
    python3 - "$tmp/cs.out" "$f" <<'PY' || fail "cuda bf16 $f: the loss does not fall"
import re, sys
m = re.search(r"loss ([0-9.]+) -> ([0-9.]+)", open(sys.argv[1]).read())
assert m and float(m.group(2)) < float(m.group(1)) - 1.0, (sys.argv[2], m and m.groups())
PY
  done
  for d in cpu cuda; do
    "$vram" train --device $d --steps 8 --optim-state 8bit --json >"$tmp/q8_$d.jsonl" || fail "8-bit state on $d"
  done
  python3 - "$tmp/q8_cpu.jsonl" "$tmp/q8_cuda.jsonl" <<'PY' || fail "8-bit state: cuda and cpu losses differ"
import json, sys
a, b = ([json.loads(l)["loss"] for l in open(f) if '"event":"step"' in l] for f in sys.argv[1:])
assert len(a) == len(b) == 8 and max(abs(x - y) for x, y in zip(a, b)) < 1e-3, (a, b)
PY
  # bf16's default master is split; a state saved with a full one (as states were before) resumes with it when
  # --master is not given, one saved with the default with the split one: each equals its straight run
  for m in fp32 split; do
    "$vram" train $flags --device cuda --precision bf16 --master $m --save "$tmp/a.bin" --quiet
    "$vram" train ${flags/--steps 10/--steps 4} --device cuda --precision bf16 --master $m --save-state "$tmp/s4_$m.bin" --quiet
    "$vram" train $flags --device cuda --precision bf16 --resume "$tmp/s4_$m.bin" --save "$tmp/b.bin" --quiet
    cmp "$tmp/a.bin" "$tmp/b.bin" || fail "bf16 resumed without --master differs from the straight run (--master $m)"
  done
  "$vram" train --device cuda --precision bf16 --steps 1 --json |
    python3 -c 'import json,sys; d=[json.loads(l) for l in sys.stdin][0]; assert d["plan"]["step"]["master"] == "split", d["plan"]["step"]'
  expect 1 master train --device cuda --precision bf16 --master split $flags --resume "$tmp/s4_fp32.bin"
fi
expect 2 "--loss-scale" train --loss-scale 1024 --steps 1
"$vram" train --help >"$tmp/help" && grep -q -- --resume "$tmp/help"
"$vram" eval --help >"$tmp/help" && grep -q -- --init "$tmp/help"
echo ok
