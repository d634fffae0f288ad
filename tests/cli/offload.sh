#!/usr/bin/env bash
# --offload optim through the command: the offloaded run's checkpoint equals the on-device run's byte for
# byte (fp32, clipping, accumulation, 8-bit state); a state saved offloaded resumes offloaded and on the
# device to the same bytes as a straight run; plan and train print the host bytes per role; too little
# host memory, no optimizer, or no master are refused with one line naming the flag; a state of an
# offloaded run killed at random while saving is never partial and resumes. Runs with the binary as $1.
set -euo pipefail
vram="$1"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
export OMP_NUM_THREADS=2
flags="--device cpu --preset tiny --steps 8 --lr-schedule constant --warmup 0 --clip 0.5 --accum 2 --quiet"

for os in fp32 8bit; do
  "$vram" train $flags --optim-state $os --save "$tmp/dev.bin"
  "$vram" train $flags --optim-state $os --offload optim --save "$tmp/off.bin" >"$tmp/off.out"
  cmp "$tmp/dev.bin" "$tmp/off.bin" || fail "offloaded run ($os state) differs from the on-device run"
done
"$vram" train ${flags/--quiet/} --offload optim --steps 2 >"$tmp/off.out" 2>&1
grep -q "^host      optim    planned .*bound" "$tmp/off.out" || { cat "$tmp/off.out"; fail "train prints no host bytes"; }
if grep -q DIFFERS "$tmp/off.out"; then cat "$tmp/off.out"; fail "plan and run differ"; fi

# resume: 4 steps offloaded, then to 8 offloaded and on the device == 8 straight
"$vram" train $flags --save "$tmp/straight.bin"
"$vram" train ${flags/--steps 8/--steps 4} --offload optim --save-state "$tmp/s4.bin"
"$vram" train $flags --offload optim --resume "$tmp/s4.bin" --save "$tmp/r1.bin"
"$vram" train $flags --resume "$tmp/s4.bin" --save "$tmp/r2.bin"
cmp "$tmp/straight.bin" "$tmp/r1.bin" || fail "offloaded resume differs from the straight run"
cmp "$tmp/straight.bin" "$tmp/r2.bin" || fail "on-device resume of an offloaded state differs from the straight run"

# plan: host bytes per role, JSON, the host capacity
"$vram" plan --preset tiny --offload optim >"$tmp/plan.out"
grep -q "^host .*pinned.*master .*optim" "$tmp/plan.out" || { cat "$tmp/plan.out"; fail "plan prints no host line"; }
"$vram" plan --preset tiny --offload optim --json >"$tmp/plan.json"
grep -q '"offload":[[:space:]]*"optim"' "$tmp/plan.json" || fail "plan JSON has no offload field"

# fit: placement is searched (offloaded rows with their host bytes), pinned by --offload, limited by --host-capacity
"$vram" fit --preset small --capacity 64MiB --device meta --json >"$tmp/fit.json"
grep -q '"offload":[[:space:]]*"optim"' "$tmp/fit.json" || fail "fit searched no offloaded row"
"$vram" fit --preset small --capacity 64MiB --device meta --offload optim >"$tmp/fit.out"
grep -q "^best .*offloaded to the host" "$tmp/fit.out" || { cat "$tmp/fit.out"; fail "fit --offload optim chose no offloaded row"; }
grep -q "^          optim .* [0-9.]* [KM]iB$" "$tmp/fit.out" || { cat "$tmp/fit.out"; fail "fit prints no host bytes per role"; }

. "$(dirname "$0")/lib/expect.sh"
expect 1 "pins .* of host memory" plan --preset tiny --offload optim --host-capacity 1MiB
expect 1 "max-host-memory is 1.00 MiB" train --preset tiny --offload optim --max-host-memory 1MiB --steps 1
expect 2 "^vram train: --offload: 'optim' needs an optimizer" train --preset tiny --offload optim --optim none
expect 2 "^vram train: --offload: 'optim' keeps the fp32 master" train --preset tiny --offload optim --precision bf16 --master none
expect 2 "^vram plan: --offload: 'disk' is not one of" plan --preset tiny --offload disk
expect 1 "does not fit" fit --preset small --capacity 64MiB --device meta --offload optim --host-capacity 1MiB

# killed while saving (offloaded): the state is the old one or the new one, and resumes
model="--device cpu --preset tiny --steps 2 --offload optim --quiet"
"$vram" train ${model/--steps 2/--steps 1} --save-state "$tmp/old.st"
"$vram" train $model --save-state "$tmp/new.st"
for i in $(seq 1 15); do
  cp "$tmp/old.st" "$tmp/st.bin"
  "$vram" train $model --save-state "$tmp/st.bin" &
  pid=$!
  sleep "0.0$((RANDOM % 10))"
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  rm -f "$tmp"/*.tmp.*
  cmp -s "$tmp/st.bin" "$tmp/old.st" || cmp -s "$tmp/st.bin" "$tmp/new.st" || fail "kill $i: the state is partial"
  "$vram" train ${model/--steps 2/--steps 3} --resume "$tmp/st.bin" || fail "kill $i: the state does not resume"
done
echo "offload: ok"
