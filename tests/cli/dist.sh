#!/usr/bin/env bash
# Data parallel on CPU ranks (mpirun, the MPI engine): 2 and 3 ranks (3 does not divide the parameters), ZeRO
# 0, 1, 2 and 3 (the checkpoint gathered from the ranks' shards), and 4 ranks ZeRO 3, with parameters cut into
# pieces at the ranks' shares, fp32, AdamW, clipping and accumulation on:
# the weights after 6 steps equal one process's with the same global batch (N x B rows) to 1e-6 relative, and
# so do the losses; a state saved by the ranks (one file per rank) resumes to the same weights as a straight
# run; the plan per rank shows the sharded state; ranks given different flags are refused; bad combinations
# are refused with one line naming the flag. Skipped where this vram has no MPI or no mpirun.
set -euo pipefail
vram="$1"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
command -v mpirun >/dev/null || { echo "SKIP: no mpirun"; exit 0; }
"$vram" info 2>/dev/null | grep -q "mpi: yes" || { echo "SKIP: this vram was built without MPI"; exit 0; }
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
py=/usr/bin/python3
# OpenMPI's own allocations are never freed (~120 KB a rank): LeakSanitizer off for the ranks (ASan build)
run() { local n=$1; shift; ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" mpirun -np "$n" "$vram" train "$@"; }

common="--device cpu --preset tiny --batch 2 --seq 32 --lr 5e-4 --lr-schedule constant --warmup 0 --clip 0.5 --accum 2"
close() { # close A.bin B.bin WHAT: llm.c checkpoints equal to 1e-6 relative (L2 of the difference / L2 of A)
  $py - "$1" "$2" "$3" <<'PY'
import os, sys, numpy as np
a = np.fromfile(sys.argv[1], dtype=np.float32)[256:]; b = np.fromfile(sys.argv[2], dtype=np.float32)[256:]
assert a.shape == b.shape, "sizes differ"
rel = float(np.linalg.norm(a - b) / np.linalg.norm(a))
print(f"{sys.argv[3]}: relative difference {rel:.2e}, largest {float(np.abs(a - b).max()):.2e}")
sys.exit(0 if rel < float(os.environ.get("TOL", "1e-6")) else 1)
PY
}
losses() { grep '"event":"step"' "$1" | sed 's/.*"loss":\([-0-9.e]*\).*/\1/'; }

# the tiny model's shares cut parameters into pieces (each with its owner) on 2, 3 and 4 ranks: the runs below
# train them; every rank updates its equal share to VR_PIECE_ALIGN (4096) elements
for n in 2 3 4; do
  "$vram" plan --preset tiny --batch 2 --seq 32 --gpus $n --zero 3 --json >"$tmp/pp$n.json"
  $py - "$tmp/pp$n.json" $n <<'PY' || fail "plan --gpus $n --zero 3: no parameter cut into pieces, or unequal shares"
import json, sys
d = json.load(open(sys.argv[1])); n = int(sys.argv[2])
owned = [r["owned"] for r in d["ranks"]]; share = d["model"]["trainable"] / n
print(f"plan --gpus {n} --zero 3: {d['graph']['pieces']} pieces, elements per rank {owned} (share {share:.0f})")
assert d["graph"]["pieces"] >= 2 and sum(owned) == d["model"]["trainable"]
assert all(abs(o - share) <= 3 * 4096 for o in owned)
PY
done

for n in 2 3 4; do
  rows=$((2 * n))
  "$vram" train ${common/--batch 2/--batch $rows} --steps 6 --save "$tmp/one$n.bin" --json >"$tmp/one$n.json"
  zs="0 1 2 3"; [ $n = 4 ] && zs=3
  for z in $zs; do
    run $n $common --steps 6 --zero $z --save "$tmp/d$n$z.bin" --json >"$tmp/d$n$z.json" 2>"$tmp/err" ||
      { cat "$tmp/err"; fail "mpirun -np $n --zero $z failed"; }
    close "$tmp/one$n.bin" "$tmp/d$n$z.bin" "np $n zero $z vs one process" || fail "np $n zero $z: weights differ"
    paste <(losses "$tmp/one$n.json") <(losses "$tmp/d$n$z.json") | awk -v w="np $n zero $z" '
      { d = $1 - $2; if (d < 0) d = -d; if (d > 1e-5 * $1) { print w ": step " NR " loss " $1 " vs " $2; bad = 1 } }
      END { if (NR != 6) { print w ": " NR " losses"; bad = 1 } exit bad }' || fail "np $n zero $z: losses differ"
  done
done

# with the other strategies: 8-bit state, frozen parameters, recompute (2 ranks vs one process)
for extra in "--optim-state 8bit" "--optim-state bf16" "--freeze wpe" "--recompute block"; do
  "$vram" train ${common/--batch 2/--batch 4} $extra --steps 4 --save "$tmp/ox.bin" --quiet
  for z in 1 3; do
    run 2 $common $extra --steps 4 --zero $z --save "$tmp/dx.bin" --quiet 2>"$tmp/err" ||
      { cat "$tmp/err"; fail "mpirun -np 2 --zero $z $extra failed"; }
    # 8-bit codes and bf16 state: a last-bit difference of a sum moves a code or a rounding (the random bits of
    # the bf16 state's rounding follow the parameter's element, so a rank's share rounds as one process does)
    tol=1e-6; case $extra in *8bit) tol=1e-4 ;; *bf16) tol=1e-5 ;; esac
    TOL=$tol close "$tmp/ox.bin" "$tmp/dx.bin" "np 2 zero $z $extra vs one process" || fail "np 2 zero $z $extra: weights differ"
  done
done

# offload with ranks: each rank's share of master and state on its host (the gradients collected, copied down,
# updated there, copied up; under ZeRO 1 and 2 broadcast): every stage, and 3 ranks, against one process
"$vram" train ${common/--batch 2/--batch 4} --steps 4 --save "$tmp/oo.bin" --quiet
for z in 0 1 2 3; do
  run 2 $common --offload optim --steps 4 --zero $z --save "$tmp/do.bin" --quiet 2>"$tmp/err" ||
    { cat "$tmp/err"; fail "mpirun -np 2 --zero $z --offload optim failed"; }
  close "$tmp/oo.bin" "$tmp/do.bin" "np 2 zero $z --offload optim vs one process" || fail "np 2 zero $z offload: weights differ"
done
"$vram" train ${common/--batch 2/--batch 6} --steps 4 --save "$tmp/o3.bin" --quiet
run 3 $common --offload optim --steps 4 --zero 2 --save "$tmp/d3o.bin" --quiet 2>"$tmp/err" ||
  { cat "$tmp/err"; fail "mpirun -np 3 --zero 2 --offload optim failed"; }
close "$tmp/o3.bin" "$tmp/d3o.bin" "np 3 zero 2 --offload optim vs one process" || fail "np 3 zero 2 offload: weights differ"
# the plan: each rank's pinned host bytes, their sum over the ranks checked against the host
"$vram" plan --preset tiny --batch 2 --seq 32 --gpus 3 --zero 2 --offload optim --json >"$tmp/po.json"
$py - "$tmp/po.json" <<'PY' || fail "plan --gpus 3 --offload optim: host bytes per rank"
import json, sys
d = json.load(open(sys.argv[1]))
hosts = [r["host"] for r in d["ranks"]]
assert len(hosts) == 3 and all(h > 0 for h in hosts), hosts
assert d["host"]["need"] == sum(hosts), (d["host"]["need"], hosts)
assert d["host"]["bytes"] == hosts[0] and max(hosts) < 0.5 * sum(hosts), "the state is not sharded: %s" % hosts
print("plan --gpus 3 --offload optim: host bytes per rank", hosts)
PY

# resume: the ranks' states (one file each) continue to the straight run's weights
run 2 $common --steps 3 --zero 1 --save-state "$tmp/s3" --quiet
[ -f "$tmp/s3.rank0" ] && [ -f "$tmp/s3.rank1" ] || fail "no state file per rank"
run 2 $common --steps 6 --zero 1 --resume "$tmp/s3" --save "$tmp/r6.bin" --quiet
close "$tmp/d21.bin" "$tmp/r6.bin" "resumed vs straight" || fail "a resumed run differs from the straight run"
run 2 $common --steps 3 --zero 3 --save-state "$tmp/z3" --quiet
run 2 $common --steps 6 --zero 3 --resume "$tmp/z3" --save "$tmp/z6.bin" --quiet
close "$tmp/d23.bin" "$tmp/z6.bin" "ZeRO 3 resumed vs straight" || fail "a resumed ZeRO 3 run differs from the straight run"
# ZeRO 3 with evaluation: the no-grad graph gathers the weights too
run 2 $common --steps 2 --zero 3 --eval-every 1 --json >"$tmp/ev.json" || fail "ZeRO 3 with --eval-every failed"
grep -q '"event":"eval"' "$tmp/ev.json" || fail "ZeRO 3: no evaluation"

# a rank killed mid-run: the others stop within 60 s (mpirun ends the job), and the last state resumes
run 2 $common --steps 100000 --save-every 5 --save-state "$tmp/k" --quiet >/dev/null 2>&1 &
job=$!
for i in $(seq 100); do [ -f "$tmp/k.rank1" ] && break; sleep 0.2; done
[ -f "$tmp/k.rank1" ] || fail "the ranks saved no state"
victim=$(pgrep -f "vram train $common --steps 100000" | tail -1)
kill -9 "$victim"
t0=$(date +%s)
for i in $(seq 600); do kill -0 $job 2>/dev/null || break; sleep 0.1; done
kill -0 $job 2>/dev/null && { kill -9 $job; fail "a rank was killed and the job still runs after 60 s"; }
echo "a killed rank: the job ended in $(( $(date +%s) - t0 )) s"
wait $job && fail "a job with a killed rank exited 0"
if ! run 2 $common --steps 12 --resume "$tmp/k" --quiet 2>"$tmp/err"; then
  # killed between the two ranks' saves: the files are of different steps, which resume must say
  grep -q -- "--resume: the ranks' state files are of steps" "$tmp/err" || { cat "$tmp/err"; fail "the state of a killed job does not resume"; }
  echo "the kill fell between two ranks' saves: refused as such"
fi

# the plan per rank: ZeRO 1 keeps a share of the optimizer state
"$vram" plan --preset gpt2-medium --gpus 4 --zero 0 --json >"$tmp/p0.json"
"$vram" plan --preset gpt2-medium --gpus 4 --zero 1 --json >"$tmp/p1.json"
$py - "$tmp/p0.json" "$tmp/p1.json" <<'PY' || fail "plan --zero 1 does not shard the optimizer state"
import json, sys
def optim(p):
    j = json.load(open(p)); return j["ranks"][0]["roles"]["optim"] if "ranks" in j else None
a, b = optim(sys.argv[1]), optim(sys.argv[2])
print("optim bytes per rank: zero 0", a, "zero 1", b)
sys.exit(0 if a and b and b < a / 3 else 1)
PY
# ZeRO 3 keeps a share of the weights (plus those gathered: about two layers, or wte, the largest)
"$vram" plan --preset gpt2-medium --gpus 4 --zero 3 --json >"$tmp/p3.json"
$py - "$tmp/p0.json" "$tmp/p3.json" <<'PY' || fail "plan --zero 3 does not shard the weights"
import json, sys
def params(p):
    j = json.load(open(p)); return max(r["roles"]["params"] for r in j["ranks"])
a, b = params(sys.argv[1]), params(sys.argv[2])
print("params bytes per rank (most): zero 0", a, "zero 3", b)
sys.exit(0 if b < 0.5 * a else 1)
PY

# ranks started with different flags (mpirun's MPMD form): refused on every rank before anything is allocated
c1="train --device cpu --preset tiny --batch 2 --seq 32 --steps 2 --quiet"
if out=$(ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" mpirun -np 1 "$vram" $c1 --lr 1e-3 : -np 1 "$vram" $c1 --lr 2e-3 2>&1); then
  fail "ranks with different --lr ran"
fi
grep -q "^vram train: ranks: the 2 ranks were started with different settings" <<<"$out" || { echo "$out"; fail "ranks with different flags: no clear error"; }

. "$(dirname "$0")/lib/expect.sh"
expect 2 "^vram train: --zero: stage 1 needs data parallel ranks" train --preset tiny --zero 1 --steps 1
expect 2 "^vram plan: --zero: 4 is out of range \[0, 3\]" plan --preset tiny --gpus 2 --zero 4
expect 2 "^vram train: --gpus: ranks on GPUs need --device cuda" train --preset tiny --gpus 2 --device cpu
# mpirun with --device cuda: NCCL's id over MPI, each rank on its local GPU; without a GPU every rank says why
if ! command -v nvidia-smi >/dev/null; then
  ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" mpirun -np 2 "$vram" train --device cuda --preset tiny \
    --steps 1 >"$tmp/out" 2>"$tmp/err" && fail "mpirun --device cuda without a GPU exited 0"
  # (a build without CUDA: rank 0 cannot make the NCCL id, and says so)
  grep -Eq "^vram train: mpirun( --device cuda)?: rank [01]( of 2 on cuda:[01]| could not make an NCCL id)?: " "$tmp/err" ||
    { cat "$tmp/err"; fail "mpirun --device cuda without a GPU: no line naming the rank"; }
  echo "mpirun --device cuda without a GPU: $(grep -m1 '^vram train' "$tmp/err")"
fi
echo "dist: ok"
