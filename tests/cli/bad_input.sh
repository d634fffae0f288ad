#!/usr/bin/env bash
# Bad-input sweep over every subcommand: huge, negative, overflowing and malformed flag values; missing,
# empty, truncated, directory, FIFO and unwritable paths; files of another format. Each case must exit
# non-zero with exactly one line on stderr naming the flag or file, no sanitizer report, no partial output
# file, within seconds.  Usage: bad_input.sh PATH/TO/vram
set -u
vram=${1:?usage: bad_input.sh PATH/TO/vram}
fails=0
n=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/adir"
mkfifo "$tmp/fifo"
: >"$tmp/empty"
printf 'just some text\n' >"$tmp/text.txt"
head -c 700 /dev/urandom >"$tmp/garbage.bin"
printf 'alloc,1,512,0\n' >"$tmp/trace.csv"
# a tiny llm.c checkpoint, then a truncated copy of it
"$vram" train --preset tiny --steps 1 --quiet --save "$tmp/model.bin" >/dev/null 2>&1 || fail "setup: could not train the tiny model"
head -c 5000 "$tmp/model.bin" >"$tmp/trunc.bin"

# expect NAME FRAGMENT ARGS...: non-zero exit, one stderr line containing FRAGMENT, no sanitizer report,
# no file named out* left in $tmp.
expect() {
  local name=$1 frag=$2
  shift 2
  n=$((n + 1))
  rm -f "$tmp"/out*
  timeout 30 "$vram" "$@" >"$tmp/stdout" 2>"$tmp/stderr" </dev/null
  local rc=$?
  local lines
  lines=$(wc -l <"$tmp/stderr")
  if [ "$rc" -eq 0 ]; then fail "$name: exit 0 ($*)"; return; fi
  if [ "$rc" -eq 124 ]; then fail "$name: timed out ($*)"; return; fi
  if [ "$rc" -ge 128 ]; then fail "$name: killed by signal $((rc - 128)) ($*)"; return; fi
  if grep -q -E 'runtime error|Sanitizer|LeakSanitizer' "$tmp/stderr"; then fail "$name: sanitizer report"; cat "$tmp/stderr"; return; fi
  if [ "$lines" -ne 1 ]; then fail "$name: $lines stderr lines ($*)"; head -5 "$tmp/stderr"; return; fi
  if ! grep -q -F -- "$frag" "$tmp/stderr"; then fail "$name: stderr does not name '$frag': $(cat "$tmp/stderr")"; return; fi
  if ls "$tmp"/out* >/dev/null 2>&1; then fail "$name: left a partial output file: $(ls "$tmp"/out*)"; return; fi
}

huge=99999999999999999999
# ------------------------------------------------------------------ info
expect info-flag --bogus info --bogus
# ------------------------------------------------------------------ plan / fit: numbers
for cmd in plan fit; do
  cap=(); [ "$cmd" = fit ] && cap=(--capacity 16GiB)
  expect "$cmd-batch-neg" --batch "$cmd" "${cap[@]}" --batch -3
  expect "$cmd-batch-huge" --batch "$cmd" "${cap[@]}" --batch $huge
  expect "$cmd-batch-text" --batch "$cmd" "${cap[@]}" --batch 12x
  expect "$cmd-layers-huge" --layers "$cmd" "${cap[@]}" --preset tiny --layers 1000000
  expect "$cmd-layers-ovf" --layers "$cmd" "${cap[@]}" --preset tiny --layers 4294967297
  expect "$cmd-channels-ovf" channels "$cmd" "${cap[@]}" --preset tiny --channels 2000000000 --heads 1
  expect "$cmd-vocab-ovf" vocab "$cmd" "${cap[@]}" --preset tiny --vocab 2147483647
  expect "$cmd-seq-neg" --seq "$cmd" "${cap[@]}" --seq -1
  expect "$cmd-preset" --preset "$cmd" "${cap[@]}" --preset gpt9
  expect "$cmd-optim" --optim "$cmd" "${cap[@]}" --optim sgdd
  expect "$cmd-precision" --precision "$cmd" "${cap[@]}" --precision fp8
  expect "$cmd-clip" --clip "$cmd" "${cap[@]}" --clip nan
  expect "$cmd-flag" --bogus "$cmd" "${cap[@]}" --bogus
  expect "$cmd-missing-value" --batch "$cmd" "${cap[@]}" --batch
done
expect plan-capacity --capacity plan --capacity 1e30
expect plan-capacity-neg --capacity plan --capacity -5GiB
expect plan-capacity-2p64 --capacity plan --capacity 18446744073709551616
expect fit-capacity-missing --capacity fit --preset tiny
expect fit-capacity-text --capacity fit --capacity lots
# ------------------------------------------------------------------ train: numbers and paths
expect train-steps-neg --steps train --steps -1
expect train-steps-huge --steps train --steps $huge
expect train-lr-inf --lr train --lr inf
expect train-lr-text --lr train --lr fast
expect train-threads --threads train --threads 0
expect train-max-memory --max-memory train --max-memory 0
expect train-layers-huge --layers train --layers 100000
expect train-data-missing "$tmp/none.txt" train --steps 1 --data "$tmp/none.txt"
expect train-data-empty "$tmp/empty" train --steps 1 --data "$tmp/empty"
expect train-data-dir "$tmp/adir" train --steps 1 --data "$tmp/adir"
expect train-data-fifo "$tmp/fifo" train --steps 1 --data "$tmp/fifo"
expect train-init-missing "$tmp/none.bin" train --steps 1 --init "$tmp/none.bin"
expect train-init-dir "is a directory" train --steps 1 --init "$tmp/adir"
expect train-init-fifo "$tmp/fifo" train --steps 1 --init "$tmp/fifo"
expect train-init-empty "$tmp/empty" train --steps 1 --init "$tmp/empty"
expect train-init-trunc "$tmp/trunc.bin" train --steps 1 --init "$tmp/trunc.bin"
expect train-init-text "$tmp/text.txt" train --steps 1 --init "$tmp/text.txt"
expect train-init-garbage "$tmp/garbage.bin" train --steps 1 --init "$tmp/garbage.bin"
expect train-resume-model "$tmp/model.bin" train --steps 1 --resume "$tmp/model.bin"
expect train-resume-dir "$tmp/adir" train --steps 1 --resume "$tmp/adir"
expect train-save-dir "$tmp/adir" train --steps 1 --save "$tmp/adir"
expect train-save-nodir "$tmp/nowhere/out.bin" train --steps 1 --save "$tmp/nowhere/out.bin"
expect train-save-state-dir "$tmp/adir" train --steps 1 --save-state "$tmp/adir"
expect train-save-state-nodir "$tmp/nowhere/out.state" train --steps 1 --save-state "$tmp/nowhere/out.state"
expect train-save-init-dir "$tmp/adir" train --steps 1 --save-init "$tmp/adir"
expect train-save-fifo "$tmp/fifo" train --steps 1 --save "$tmp/fifo"
if [ "$(id -u)" != 0 ]; then
  mkdir "$tmp/ro" && chmod 555 "$tmp/ro"
  expect train-save-readonly "$tmp/ro/out.bin" train --steps 1 --save "$tmp/ro/out.bin"
fi
# ------------------------------------------------------------------ eval
expect eval-no-init --init eval
expect eval-init-missing "$tmp/none.bin" eval --init "$tmp/none.bin"
expect eval-init-dir "is a directory" eval --init "$tmp/adir"
expect eval-init-trunc "$tmp/trunc.bin" eval --init "$tmp/trunc.bin"
expect eval-init-trace "$tmp/trace.csv" eval --init "$tmp/trace.csv"
expect eval-batch-neg --batch eval --init "$tmp/model.bin" --batch -2
expect eval-seq-huge --seq eval --init "$tmp/model.bin" --seq $huge
expect eval-split --split eval --init "$tmp/model.bin" --split train
expect eval-data-dir "$tmp/adir" eval --init "$tmp/model.bin" --data "$tmp/adir"
# ------------------------------------------------------------------ replay
expect replay-missing "$tmp/none.csv" replay "$tmp/none.csv"
expect replay-empty "$tmp/empty" replay "$tmp/empty"
expect replay-dir "$tmp/adir" replay "$tmp/adir"
expect replay-fifo "$tmp/fifo" replay "$tmp/fifo"
expect replay-model "$tmp/model.bin" replay "$tmp/model.bin"
expect replay-capacity --capacity replay "$tmp/trace.csv" --capacity -1
expect replay-capacity-huge --capacity replay "$tmp/trace.csv" --capacity 1e30
expect replay-repeat --repeat replay "$tmp/trace.csv" --repeat 0
expect replay-policy --policy replay "$tmp/trace.csv" --policy nope
expect replay-snapshot-dir "$tmp/adir" replay "$tmp/trace.csv" --snapshot "$tmp/adir"
expect replay-snapshot-nodir "$tmp/nowhere/out.json" replay "$tmp/trace.csv" --snapshot "$tmp/nowhere/out.json"
# ------------------------------------------------------------------ --flag=value, and unknown flags everywhere
expect eq-batch-neg --batch plan --batch=-3
expect eq-batch-empty --batch plan --batch=
expect eq-capacity --capacity fit --capacity=lots
expect eq-steps --steps train --steps=0
expect eq-lr --lr train --lr=fast
expect eq-memory --memory train --memory=static
expect eq-switch-value --json plan --json=yes
expect eq-init-empty --init eval --init=
expect eq-output-empty --output report --output=
expect eq-repeat --repeat replay "$tmp/trace.csv" --repeat=0
expect eq-interval --interval watch --interval=0
expect eq-tokenizer-empty --tokenizer tokenize --tokenizer= "$tmp/text.txt" "$tmp/out.bin"
expect eq-unknown "unknown flag --bogus " plan --bogus=3
for cmd in info replay plan fit train tokenize report watch eval; do
  expect "$cmd-unknown" "vram $cmd: unknown flag --no-such-flag (see vram $cmd --help)" "$cmd" --no-such-flag
  expect "$cmd-unknown-eq" "vram $cmd: unknown flag --no-such-flag (see vram $cmd --help)" "$cmd" --no-such-flag=1
  expect "$cmd-unknown-short" "vram $cmd: unknown flag -Z" "$cmd" -Z
done
# ------------------------------------------------------------------ top level
expect replay-no-trace TRACE replay
expect top-command nope nope

echo "$n cases, $fails failed"
[ "$fails" -eq 0 ]
