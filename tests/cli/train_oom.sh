#!/usr/bin/env bash
# vram train out of memory: a planned run whose arena does not fit is refused before anything is
# allocated, with the plan's numbers and the largest batch that fits (device capacity, or --max-memory);
# a dynamic run that runs out exits 1 with the allocator's explanation (what was asked, capacity and
# free, reserved vs allocated, what to try), not a crash; the device is usable by the next run.
# On the CPU with a capacity (cpu:SIZE) everywhere; on a GPU too when there is one (skipped on CI).
set -euo pipefail
vram="$1"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; cat "$tmp/out" "$tmp/err" 2>/dev/null | tail -20; exit 1; }

# expect_oom NAME PATTERN... -- ARGS: vram train ARGS exits 1 (not a signal) with every PATTERN on stderr
expect_oom() {
  local name="$1"; shift
  local pats=()
  while [ "$1" != "--" ]; do pats+=("$1"); shift; done
  shift
  set +e
  "$vram" train "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  set -e
  [ "$rc" = 1 ] || fail "$name: exit $rc, expected 1"
  [ "$(wc -l <"$tmp/err")" = 1 ] || fail "$name: expected one line on stderr"
  for p in "${pats[@]}"; do grep -q -- "$p" "$tmp/err" || fail "$name: no '$p' in the message"; done
  echo "$name: $(cut -c1-400 "$tmp/err")"
}

# planned, device capacity: refused before allocating, with the plan's numbers and the batch that fits
expect_oom "cpu planned" "refused before allocating anything" "needs an arena of" "is available" \
  "largest batch that fits: --batch" "Try:" -- --device cpu:8MiB --batch 512 --steps 1 --quiet
# the batch it names really fits and runs
B=$(grep -o 'largest batch that fits: --batch [0-9]*' "$tmp/err" | grep -o '[0-9]*$')
"$vram" train --device cpu:8MiB --batch "$B" --steps 1 --eval-every -1 --quiet || fail "the suggested --batch $B"
# --max-memory: the same refusal against the cap, whatever the device holds
expect_oom "cpu --max-memory" "refused before allocating anything" "--max-memory 8.00 MiB" -- \
  --max-memory 8MiB --batch 512 --steps 1 --quiet
"$vram" train --max-memory 8MiB --batch "$B" --steps 1 --eval-every -1 --quiet || fail "--max-memory at --batch $B"
# dynamic: the caching allocator runs out mid-step and explains
expect_oom "cpu dynamic" "out of memory: tried to allocate" "free" "reserved" "allocated" "Try:" -- \
  --device cpu:8MiB --memory dynamic --batch 512 --steps 1 --eval-every -1 --quiet
expect_oom "cpu dynamic --max-memory" "out of memory: tried to allocate" "Try:" -- \
  --max-memory 8MiB --memory dynamic --batch 512 --steps 1 --eval-every -1 --quiet
# bad values are flag errors
set +e
"$vram" train --max-memory 0 --steps 1 2>"$tmp/err"; rc=$?
set -e
[ "$rc" = 2 ] && grep -q -- "--max-memory" "$tmp/err" || fail "--max-memory 0: exit $rc"

# the GPU, when there is one: GPT-2 at B=512 does not fit in 80 GB
if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1 || ! "$vram" info >/dev/null 2>&1 \
   || ! "$vram" info 2>/dev/null | grep -qi "cuda:0"; then
  echo "SKIP: no GPU (the cuda part of this test)"
  exit 0
fi
expect_oom "cuda dynamic" "out of memory: tried to allocate" "free" "reserved" "allocated" "Try:" -- \
  --device cuda --preset gpt2 --batch 512 --seq 1024 --precision bf16 --memory dynamic --steps 1 --eval-every -1 --quiet
expect_oom "cuda planned" "refused before allocating anything" "needs an arena of" "free of" \
  "largest batch that fits: --batch" -- \
  --device cuda --preset gpt2 --batch 512 --seq 1024 --precision bf16 --steps 1 --eval-every -1 --quiet
"$vram" train --device cuda --preset tiny --steps 3 --eval-every -1 --quiet || fail "cuda after the out-of-memory runs"
echo "cuda: a run after the out-of-memory ones succeeds"
