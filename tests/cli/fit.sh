#!/usr/bin/env bash
# vram fit: the largest batch fits and the next does not (checked against vram plan),
# the ranked table, --global-batch splits into micro x accum, --json parses and hangs
# together, no fit exits 1 naming the smallest need, every bad flag exits 2 with one line.
set -euo pipefail
vram="$1"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$vram" fit --preset tiny --capacity 4MiB >"$tmp/out" 2>"$tmp/err" || { echo "vram fit failed:"; cat "$tmp/out" "$tmp/err"; exit 1; }
cat "$tmp/out"
grep -q "^largest batch (fp32, recompute none" "$tmp/out" || { echo "no largest-batch line"; exit 1; }
grep -q "^best " "$tmp/out" || { echo "no best line"; exit 1; }
for cfg in "fp32 *none" "fp32 *selective" "fp32 *block" "bf16 *none" "bf16 *selective" "bf16 *block" \
           "bf16 *block *8bit *none" "fp32 *none *bf16 *-"; do
  grep -Eq "^ +[0-9]+\*? +$cfg " "$tmp/out" || { echo "no row for $cfg"; exit 1; }
done

# the max batch against vram plan: B fits 4 MiB, B+1 does not
B=$(sed -n 's/^largest batch .*: B=\([0-9]*\).*/\1/p' "$tmp/out")
[ -n "$B" ] && [ "$B" -ge 1 ] || { echo "no batch parsed"; exit 1; }
"$vram" plan --preset tiny --batch "$B" --capacity 4MiB >"$tmp/p1"; grep -q "capacity  4.00 MiB: fits" "$tmp/p1" || { echo "B=$B should fit per vram plan"; exit 1; }
"$vram" plan --preset tiny --batch $((B + 1)) --capacity 4MiB >"$tmp/p2" || true; grep -q "DOES NOT FIT" "$tmp/p2" || { echo "B=$((B + 1)) should not fit per vram plan"; exit 1; }

# --json: parses; rows ranked; fitting rows within the capacity; max batch boundary
"$vram" fit --preset small --seq 128 --capacity 64MiB --global-batch 24 --optim-state fp32 --master fp32 --offload none --json >"$tmp/json"
python3 - "$tmp/json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
cap = d["device"]["step_capacity"]
assert cap == d["capacity"] == 64 << 20, d["device"]
rows = d["rows"]
assert len(rows) == 8 and d["best"] == 0 and d["fits"] is True, (len(rows), d["best"])
fit = [r for r in rows if r["fits"]]
assert fit and all(r["need"] <= cap for r in fit)
assert all(r["micro_batch"] * r["accum"] == 24 for r in fit), rows
assert all(a["tokens_per_s"] >= b["tokens_per_s"] for a, b in zip(fit, fit[1:]))
mb = d["max_batch"]
assert mb["at"]["need"] <= cap < mb["next"]["need"] and mb["next"]["batch"] == mb["batch"] + 1, mb
# the cost model: same precision and micro-batch, more recompute costs more time: none < act < selective < block
by = {(r["precision"], r["recompute"]): r for r in rows}
for p in ("fp32", "bf16"):
    ladder = [by[(p, k)] for k in ("none", "act", "selective", "block")]
    for n, b in zip(ladder, ladder[1:]):
        if n["fits"] and b["fits"] and n["micro_batch"] == b["micro_batch"]:
            assert b["step_seconds"] > n["step_seconds"] and b["bytes"] > n["bytes"], (b, n)
print("json ok:", [(r["precision"], r["recompute"], r["micro_batch"], r["accum"]) for r in fit])
PY
"$vram" fit --preset tiny --capacity 4MiB --recompute block --precision bf16 --optim-state 8bit --master none --offload none --json |
  python3 -c 'import json,sys; d=json.load(sys.stdin); r=d["rows"]; assert len(r)==1 and r[0]["recompute"]=="block" and r[0]["precision"]=="bf16" and r[0]["optim_state"]=="8bit" and r[0]["master"]=="none", r'
# the best row recomputes only as many first blocks as it needs: N fits (vram plan agrees), N - 1 does not; with the
# norm backward pinned to the input, and, unpinned, with the norms' backward from their output: fewer blocks (9 GiB:
# act:M, M < N), or none (10 GiB)
best() {
  "$vram" fit --preset gpt2-medium --capacity "$1" --global-batch 8 --precision bf16 --optim-state fp32 --master split \
    --offload none --json "${@:2}" | python3 -c 'import json,sys; d=json.load(sys.stdin); b=d["rows"][d["best"]]; assert b["micro_batch"] == 8, b; print(b["recompute"], b["recompute_layers"], b["norm_backward"])'
}
plan() { "$vram" plan --preset gpt2-medium --batch 8 --precision bf16 --capacity "$@" | tail -1; }
fits() { plan "$@" | grep -q "fits" && ! plan "$@" | grep -q "DOES NOT FIT"; }
read -r r n nb <<<"$(best 9GiB --norm-backward input)"
read -r rk k kb <<<"$(best 9GiB)"
[ "$r $nb $rk $kb" = "act input act output" ] && [ "$n" -gt 0 ] && [ "$k" -gt 0 ] && [ "$k" -lt "$n" ] ||
  { echo "fit at 9 GiB: $r:$n ($nb) pinned, $rk:$k ($kb) unpinned"; exit 1; }
for nl in "$n input" "$k output"; do
  set -- $nl
  fits 9GiB --recompute act --recompute-layers "$1" --norm-backward "$2" || { echo "act:$1 ($2) does not fit"; exit 1; }
  [ "$1" -eq 1 ] || ! fits 9GiB --recompute act --recompute-layers $(($1 - 1)) --norm-backward "$2" ||
    { echo "act:$(($1 - 1)) ($2) fits too"; exit 1; }
done
"$vram" fit --preset gpt2-medium --capacity 9GiB --global-batch 8 --precision bf16 --optim-state fp32 --master split \
  --offload none | grep -q "^best .*act in the first $k blocks.*norm backward from the output (--norm-backward output)" ||
  { echo "fit's best line should name --norm-backward output"; exit 1; }
[ "$(best 10GiB)" = "none 0 output" ] && [ "$(best 10GiB --norm-backward input | cut -d' ' -f1,3)" = "act input" ] &&
  fits 10GiB --norm-backward output && ! fits 10GiB || { echo "fit at 10 GiB: the norms' backward from the output instead of recompute"; exit 1; }
# --kernels cuda on meta counts what a GPU run adds (the classifier's logits chunk, the cuBLAS workspace), as vram
# plan --kernels cuda does: 0.75 x torch.compile's 13.31 GiB for medium B=8 (context 286 MiB, vram's on an H100/H200)
# takes GELU recomputed in 2 blocks with the CUDA kernels where the CPU kernels' plan needs none
kbest() { best 9.98GiB --context 286MiB "$@"; }
[ "$(kbest --kernels cuda)" = "act 2 output" ] && [ "$(kbest)" = "none 0 output" ] ||
  { echo "fit --kernels cuda at 9.98 GiB: $(kbest --kernels cuda) (cpu kernels: $(kbest))"; exit 1; }
kfits() { "$vram" plan --preset gpt2-medium --batch 8 --precision bf16 --kernels cuda --norm-backward output \
  --context 286MiB --capacity 9.98GiB "$@" | tail -1 | grep -q ": fits"; }
kfits --recompute act --recompute-layers 2 && ! kfits --recompute act --recompute-layers 1 ||
  { echo "vram plan --kernels cuda disagrees with fit's act:2"; exit 1; }
kout=$("$vram" fit --preset gpt2-medium --capacity 9.98GiB --context 286MiB --global-batch 8 --kernels cuda)
grep -q "^device .*; CUDA kernels" <<<"$kout" || { echo "fit's device line should say CUDA kernels"; exit 1; }
"$vram" fit --model mlp --preset mnist --optim sgd --capacity 64MiB --json | python3 -c 'import json,sys; json.load(sys.stdin)'
"$vram" fit --preset tiny --capacity 128MiB --device cuda --context 32MiB --tflops bf16=300,fp32=100 --json |
  python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["device"]["step_capacity"] == 96 << 20 and d["cost_model"]["tflops"]["bf16"] == 300'

# nothing fits: exit 1, one line naming the smallest need
set +e
"$vram" fit --preset gpt2 --seq 1024 --capacity 256MiB >"$tmp/nf" 2>"$tmp/nferr"
rc=$?
set -e
[ "$rc" -eq 1 ] || { echo "no fit exited $rc, want 1"; cat "$tmp/nferr"; exit 1; }
grep -q "does not fit: the smallest step found .* needs" "$tmp/nferr" || { echo "no-fit message:"; cat "$tmp/nferr"; exit 1; }
grep -q "none: B=1 needs" "$tmp/nf" || { echo "no-fit max batch line"; cat "$tmp/nf"; exit 1; }

# bad flags: exit 2, one line, naming the flag
bad() {
  local flag="$1"; shift
  set +e
  "$vram" fit "$@" >"$tmp/bout" 2>"$tmp/berr"
  local rc=$?
  set -e
  [ "$rc" -eq 2 ] || { echo "'$*' exited $rc, want 2"; cat "$tmp/berr"; exit 1; }
  [ "$(wc -l <"$tmp/berr")" -eq 1 ] || { echo "'$*': not one line:"; cat "$tmp/berr"; exit 1; }
  grep -q -- "$flag" "$tmp/berr" || { echo "'$*': error does not name $flag:"; cat "$tmp/berr"; exit 1; }
}
bad --bogus --bogus --capacity 1GiB
bad --capacity --preset tiny
bad --capacity --capacity 12XB
bad --capacity --capacity
bad --device --device tpu --capacity 1GiB
bad --global-batch --global-batch 0 --capacity 1GiB
bad --global-batch --global-batch x --capacity 1GiB
bad --tflops --tflops x --capacity 1GiB
bad --tflops --tflops tf32=3 --capacity 1GiB
bad --bandwidth --bandwidth -1 --capacity 1GiB
bad --batch --batch 4 --capacity 1GiB
bad --accum --accum 2 --global-batch 8 --capacity 1GiB
bad --recompute --recompute most --capacity 1GiB
bad --precision --precision fp8 --capacity 1GiB
bad --preset --preset nope --capacity 1GiB
# --gpus N: the ZeRO stage is searched too; every rank is planned and the largest rank's arena must fit, which
# `vram plan --gpus N --zero S` confirms for the chosen row
"$vram" fit --preset gpt2-medium --gpus 4 --capacity 16GiB --precision bf16 --optim-state fp32 --master fp32 \
  --recompute none --json >"$tmp/fz.json"
py=/usr/bin/python3
$py - "$tmp/fz.json" "$vram" <<'PY' || { echo "fit --gpus: wrong"; exit 1; }
import json, subprocess, sys
j = json.load(open(sys.argv[1]))
rows = j["rows"]
zeros = sorted({r["zero"] for r in rows})
assert zeros == [0, 1, 2, 3], zeros
best = rows[j["best"]]
cap = 16 << 30
assert best["fits"] and best["need"] <= cap, best
# ZeRO 0 keeps every state on every rank: it fits fewer rows than ZeRO 3
mb = {r["zero"]: r["micro_batch"] for r in rows if r["offload"] == "none"}
# offloaded (with ranks too): each rank's share of master and state on the host, so ZeRO 0 fits as ZeRO 3 nearly
mbo = {r["zero"]: r["micro_batch"] for r in rows if r["offload"] != "none"}
assert sorted(mbo) == [0, 1, 2, 3] and mbo[0] > mb[0], (mbo, mb)
assert mb[3] > mb[0], mb
assert all(r["comm_seconds"] > 0 for r in rows if r["fits"]), "collectives not costed"
p = subprocess.run([sys.argv[2], "plan", "--preset", "gpt2-medium", "--gpus", "4", "--zero", str(best["zero"]),
                    "--precision", "bf16", "--master", "fp32", "--batch", str(best["micro_batch"]), "--json"],
                   capture_output=True, text=True)
plan = json.loads(p.stdout)
largest = max(r["arena"] for r in plan["ranks"])
print("fit --gpus 4: best ZeRO", best["zero"], "micro-batch", best["micro_batch"], "need", best["need"],
      "plan's largest rank", largest, "micro-batches by stage", mb)
assert largest == best["need"], (largest, best["need"])
PY
echo "fit.sh ok"
