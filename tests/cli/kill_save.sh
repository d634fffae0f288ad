#!/usr/bin/env bash
# Kill while saving: 40 times, a run that saves an llm.c checkpoint (--save) and
# a resumable state (--save-state) over existing files is SIGKILLed at a random
# moment after its first temporary file appears. Each file must afterwards be
# byte-equal to the old one or to the complete new one (never partial), and
# `vram train --resume` from the state must work. Runs with the binary as $1.
set -euo pipefail
vram="$1"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
export OMP_NUM_THREADS=1   # byte-identical runs (the new files are compared with a reference)
model="--device cpu --layers 2 --channels 192 --heads 4 --vocab 256 --padded-vocab 256 --max-seq 16 --seq 16 --batch 1 --quiet"

# the old files (1 step) and the complete new ones (2 steps), twice to check runs are deterministic
"$vram" train $model --steps 1 --save "$tmp/old.ck" --save-state "$tmp/old.st"
"$vram" train $model --steps 2 --save "$tmp/new.ck" --save-state "$tmp/new.st"
"$vram" train $model --steps 2 --save "$tmp/new2.ck" --save-state "$tmp/new2.st"
cmp -s "$tmp/new.ck" "$tmp/new2.ck" && cmp -s "$tmp/new.st" "$tmp/new2.st" || fail "two identical runs saved different files"
cmp -s "$tmp/old.st" "$tmp/new.st" && fail "old and new states are equal: the test would prove nothing"

w="$tmp/w"; mkdir "$w"
kept_old=0; got_new=0; mixed=0
for i in $(seq 1 40); do
  cp "$tmp/old.ck" "$w/ck.bin"; cp "$tmp/old.st" "$w/st.bin"
  "$vram" train $model --steps 2 --save "$w/ck.bin" --save-state "$w/st.bin" &
  pid=$!
  # wait for the first temporary file (the save has begun), then 0-39 ms more
  for _ in $(seq 1 20000); do
    compgen -G "$w/*.tmp.*" >/dev/null && break
    kill -0 "$pid" 2>/dev/null || break
  done
  sleep "0.0$((RANDOM % 40 / 10))$((RANDOM % 10))"
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  rm -f "$w"/*.tmp.*   # a killed writer leaves its temporary file; the target is what matters
  for f in ck st; do
    if cmp -s "$w/$f.bin" "$tmp/old.$f"; then kept_old=$((kept_old + 1))
    elif cmp -s "$w/$f.bin" "$tmp/new.$f"; then got_new=$((got_new + 1))
    else fail "run $i: $f.bin is neither the old file nor the new one (a partial write?)"; fi
  done
  # the checkpoint and state are written one after the other: count the runs killed in between
  cmp -s "$w/ck.bin" "$tmp/old.ck" && cmp -s "$w/st.bin" "$tmp/new.st" && mixed=$((mixed + 1))
  cmp -s "$w/ck.bin" "$tmp/new.ck" && cmp -s "$w/st.bin" "$tmp/old.st" && mixed=$((mixed + 1))
  # resume from whatever state survived (every 8th run, to stay under ~30 s)
  if [ $((i % 8)) -eq 0 ]; then
    "$vram" train $model --steps 3 --resume "$w/st.bin" >/dev/null || fail "run $i: --resume from the surviving state"
    "$vram" eval --device cpu --init "$w/ck.bin" --seq 16 --batch 1 --batches 1 >/dev/null || fail "run $i: eval of the surviving checkpoint"
  fi
done
echo "kill while saving: 40 runs, files kept old $kept_old, complete new $got_new, runs killed between the two saves $mixed"
[ $kept_old -gt 0 ] || fail "no kill landed before a save completed: the test did not exercise the window"
