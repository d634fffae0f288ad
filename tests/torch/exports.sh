#!/usr/bin/env bash
# libvram_torch.so (and the meta build of it that the Python tests load) export exactly the functions of
# src/torch/vram_torch.h: every defined dynamic symbol starts with vram_torch_ and is declared there, and
# every declared function is exported (vram_torch_malloc, the throwing alloc_fn, only by the CUDA build).
# usage: exports.sh src/torch/vram_torch.h libvram_torch_meta.so [libvram_torch.so]
set -euo pipefail
header=$1; shift
fail() { echo "FAIL: $*"; exit 1; }
declared=$(perl -0pe 's{/\*.*?\*/}{}gs' "$header" | grep -o '\bvram_torch_[a-z0-9_]*[[:space:]]*(' |
           sed 's/[[:space:]]*($//' | sort -u)
[ -n "$declared" ] || fail "no functions declared in $header"
for lib in "$@"; do
  [ -n "$lib" ] || continue # no CUDA library in this build (an empty argument)
  [ -f "$lib" ] || fail "no library at $lib"
  syms=$(nm -D --defined-only "$lib" | awk '{print $3}' | sed 's/@.*//' | grep -v '^__odr_asan' | sort -u)
  extra=$(comm -23 <(echo "$syms") <(echo "$declared"))
  [ -z "$extra" ] || fail "$lib exports what vram_torch.h does not declare: $(echo $extra | head -c 600)"
  want=$declared
  case $(basename "$lib") in *meta*) want=$(grep -vx vram_torch_malloc <<<"$declared") ;; esac
  missing=$(comm -13 <(echo "$syms") <(echo "$want"))
  [ -z "$missing" ] || fail "$lib does not export: $missing"
  echo "ok: $lib exports the $(wc -l <<<"$syms") functions of vram_torch.h"
done
