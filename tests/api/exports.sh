#!/usr/bin/env bash
# libvram.so exports exactly the public API: every dynamic symbol it defines starts with vr_ and is a
# function or variable declared in a public header (include/vram/*.h, or the generated vram/version.h),
# and every one of those is exported.
# Functions the library's files share through src/ headers are hidden (include/vram/export.h).
# usage: exports.sh path/to/libvram.so, with VRAM_SOURCE_DIR (the source tree) and VRAM_GENERATED_INCLUDE
# (the build tree's folder of generated headers) in the environment.
set -euo pipefail
lib=$1
src=${VRAM_SOURCE_DIR:?}
gen=${VRAM_GENERATED_INCLUDE:-}
fail() { echo "FAIL: $*"; exit 1; }
[ -f "$lib" ] || fail "no library at $lib"
syms=$(nm -D --defined-only "$lib" | awk '{print $3}' | sed 's/@.*//' | sort -u)
[ -n "$syms" ] || fail "$lib exports nothing"
# AddressSanitizer builds add an ODR indicator (__odr_asan.NAME) beside each exported variable NAME:
# part of that variable, not API of its own.
odr=$(grep '^__odr_asan[._]' <<<"$syms" || true)
syms=$(grep -v '^__odr_asan[._]' <<<"$syms" || true)
for o in $odr; do
    grep -qx "${o#__odr_asan?}" <<<"$syms" || fail "$o is exported without the variable it indicates"
done
bad=$(grep -v '^vr_' <<<"$syms" || true)
if [ -n "$bad" ]; then
    echo "FAIL: $(wc -l <<<"$bad") exported symbols of $lib do not start with vr_:"
    sed 's/^/  /' <<<"$bad"
    exit 1
fi
# What the public headers declare (comments stripped): functions (a name followed by '(', not static
# inline) and extern variables.
headers=$(perl -0pe 's{/\*.*?\*/}{}gs; s{//[^\n]*}{}g' "$src"/include/vram/*.h ${gen:+"$gen"/vram/*.h})
functions=$(grep -v 'static inline' <<<"$headers" | grep -o '\bvr_[a-z0-9_]*[[:space:]]*(' | sed 's/[[:space:]]*($//' |
            sort -u)
variables=$(grep '^extern [^"]' <<<"$headers" | grep -o '\bvr_[a-z0-9_]*' | sort -u)
declared=$(sort -u <(echo "$functions") <(echo "$variables"))
internal=$(comm -23 <(echo "$syms") <(echo "$declared"))
if [ -n "$internal" ]; then
    echo "FAIL: $(wc -l <<<"$internal") exported symbols of $lib are not declared in a public header:"
    sed 's/^/  /' <<<"$internal"
    exit 1
fi
missing=$(comm -13 <(echo "$syms") <(echo "$declared"))
if [ -n "$missing" ]; then
    echo "FAIL: $(wc -l <<<"$missing") functions declared in public headers are not exported by $lib:"
    sed 's/^/  /' <<<"$missing"
    exit 1
fi
# The public API is there: a few entry points every user needs.
for f in vr_version vr_device_open vr_graph_new vr_graph_backward vr_plan_create vr_exec_create vr_exec_step \
         vr_last_error; do
    grep -qx "$f" <<<"$syms" || fail "$f is not exported by $lib"
done
echo "exports ok: $(wc -l <<<"$syms") symbols, all public vr_ API"
