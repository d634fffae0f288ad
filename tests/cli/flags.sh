#!/usr/bin/env bash
# The one flag parser of every subcommand, from the outside: every flag that a command's --help names is a
# flag the command knows (the --help text is generated from the same table: tests/cli/test_flags.c checks
# the other way round), "--flag=value" means "--flag value", and nothing runs when the flags are bad.
# Usage: flags.sh PATH/TO/vram
set -u
vram=${1:?usage: flags.sh PATH/TO/vram}
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

cmds=$("$vram" help | sed -n 's/^  \([a-z]*\) .*/\1/p' | grep -v '^help$')
[ "$(echo "$cmds" | wc -w)" -ge 9 ] || fail "vram help lists only: $cmds"
checked=0
for cmd in $cmds; do
  "$vram" "$cmd" --help >"$tmp/help" 2>"$tmp/err" || { fail "vram $cmd --help: exit $?"; continue; }
  [ -s "$tmp/err" ] && fail "vram $cmd --help wrote to stderr: $(cat "$tmp/err")"
  head -1 "$tmp/help" | grep -q "^usage: vram $cmd" || fail "vram $cmd --help: no usage line"
  # every flag the text names (long flags anywhere, short aliases at the start of a line)
  flags=$( { grep -oE -- '--[a-z][a-z0-9-]*' "$tmp/help"; grep -oE '^  -[a-z],' "$tmp/help" | tr -d ' ,'; } | sort -u)
  [ -n "$flags" ] || fail "vram $cmd --help names no flag"
  for f in $flags; do
    [ "$f" = --help ] && continue
    # a flag with a value takes the first --zz-end (or refuses it, naming the flag); the second is unknown:
    # either way the command stops at its flags with exit 2 and does not run
    timeout 20 "$vram" "$cmd" "$f" --zz-end --zz-end >"$tmp/out" 2>"$tmp/err" </dev/null
    rc=$?
    checked=$((checked + 1))
    if grep -q -- "unknown flag $f " "$tmp/err"; then fail "vram $cmd --help names $f, which vram $cmd does not know"; continue; fi
    [ "$rc" = 2 ] || { fail "vram $cmd $f --zz-end --zz-end: exit $rc, not 2: $(head -3 "$tmp/err")"; continue; }
    [ "$(wc -l <"$tmp/err")" = 1 ] || fail "vram $cmd $f --zz-end --zz-end: $(wc -l <"$tmp/err") stderr lines"
    grep -q -e "unknown flag --zz-end " -e "^vram $cmd: $f" "$tmp/err" || fail "vram $cmd $f: $(cat "$tmp/err")"
    [ -s "$tmp/out" ] && fail "vram $cmd $f --zz-end --zz-end printed: $(head -3 "$tmp/out")"
  done
done
[ "$checked" -ge 100 ] || fail "only $checked flags checked"

# --flag=value is --flag value
"$vram" plan --preset tiny --batch 4 --seq 32 --precision bf16 --json >"$tmp/a.json" || fail "plan with spaces"
"$vram" plan --preset=tiny --batch=4 --seq=32 --precision=bf16 --json >"$tmp/b.json" || fail "plan with ="
cmp -s "$tmp/a.json" "$tmp/b.json" || fail "plan --flag=value differs from --flag value"
"$vram" report --preset=tiny --no-fit --output="$tmp/r.html" >/dev/null || fail "report --output=FILE"
[ -s "$tmp/r.html" ] || fail "report --output=FILE wrote nothing"
"$vram" train --preset=tiny --steps=2 --eval-every=-1 --quiet || fail "train --steps=2 --eval-every=-1"
# a value that starts with '-' is a value
"$vram" train --preset tiny --steps 2 --eval-every -1 --quiet || fail "train --eval-every -1"

echo "$checked flags checked, $fails failed"
[ "$fails" -eq 0 ]
