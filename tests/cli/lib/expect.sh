# Sourced by tests/cli/*.sh (with $vram, $tmp and fail() set): expect CODE TEXT args... runs vram with args and
# fails unless it exits CODE with exactly one stderr line containing TEXT (a grep pattern).
expect() {
  local code=$1 text=$2; shift 2
  set +e; "$vram" "$@" >/dev/null 2>"$tmp/err"; local rc=$?; set -e
  [ "$rc" = "$code" ] || { cat "$tmp/err"; fail "vram $*: exit $rc, expected $code"; }
  grep -q -- "$text" "$tmp/err" || { cat "$tmp/err"; fail "vram $*: no '$text' in the error"; }
  [ "$(grep -c . "$tmp/err")" = 1 ] || { cat "$tmp/err"; fail "vram $*: more than one line"; }
}
