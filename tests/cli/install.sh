#!/usr/bin/env bash
# `cmake --install` into a temporary prefix gives headers, libvram.so/.a, a relocatable vram.pc and
# the CMake package (vramConfig.cmake); a program built against them through pkg-config runs, and
# every examples/*.c builds and runs against the installed library through pkg-config and through
# find_package(vram) (vram::vram and vram::vram_static); an op the library lacks fails to compile.
set -euo pipefail
build=$(dirname "$1")
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
pc=$(find "$tmp/prefix" -name vram.pc | head -1)
[ -n "$pc" ] || fail "vram.pc not installed"
export PKG_CONFIG_PATH=$(dirname "$pc")${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
cat >"$tmp/use.c" <<'C'
#include <stdio.h>
#include <vram/alloc.h>
int main(void)
{
    vr_device *d; vr_alloc *a; void *p; vr_alloc_stats s;
    if (vr_device_open("meta:1GiB", &d) || vr_alloc_create(d, NULL, &a) || vr_alloc_malloc(a, 3u << 20, 0, &p))
        return 1;
    vr_alloc_get_stats(a, &s);
    printf("%lld %lld\n", (long long)s.allocated_bytes[0].current, (long long)s.reserved_bytes[0].current);
    vr_alloc_free(a, p); vr_alloc_destroy(a); vr_device_close(d);
    return 0;
}
C
libdir=$(pkg-config --variable=libdir vram)
cc ${VRAM_TEST_CFLAGS:-} "$tmp/use.c" $(pkg-config --cflags --libs vram) -Wl,-rpath,"$libdir" -o "$tmp/use" || fail "cannot build against the installed library"
# 3 MiB: large pool, a 20 MiB segment (PyTorch's rule for requests under 10 MiB)
[ "$("$tmp/use")" = "3145728 20971520" ] || fail "unexpected output from the installed library: $("$tmp/use")"

# The generated header and the examples, through pkg-config.
[ -f "$tmp/prefix/include/vram/version.h" ] || fail "vram/version.h not installed"
version=$(pkg-config --modversion vram)
grep -q "VR_VERSION_STRING \"$version\"" "$tmp/prefix/include/vram/version.h" || fail "version.h is not $version"
src=${VRAM_SOURCE_DIR:?}
export OMP_WAIT_POLICY=passive OPENBLAS_THREAD_TIMEOUT=4
cflags="-std=c11 -Wall -Werror=implicit-function-declaration ${VRAM_TEST_CFLAGS:-}"
examples=$(ls "$src"/examples/*.c)
[ -n "$examples" ] || fail "no examples in $src/examples"
for ex in $examples; do
    name=$(basename "$ex" .c)
    cc $cflags "$ex" $(pkg-config --cflags --libs vram) -lm -Wl,-rpath,"$libdir" -o "$tmp/$name" ||
        fail "$name does not build against the installed library (pkg-config)"
    "$tmp/$name" >"$tmp/$name.out" 2>&1 || { tail -5 "$tmp/$name.out"; fail "$name (pkg-config build) failed"; }
done

# An op the library does not have is a build error that names it, not something that runs.
cat >"$tmp/no_such_op.c" <<'C'
#include <vram/graph.h>
int main(void)
{
    vr_graph *g = vr_graph_new(VR_PREC_FP32);
    int y = vr_graph_tanh(g, "t", 0);
    vr_graph_free(g);
    return y < 0;
}
C
if cc $cflags -c "$tmp/no_such_op.c" $(pkg-config --cflags vram) -o "$tmp/no_such_op.o" 2>"$tmp/no_such_op.err"; then
    fail "a call of an op that does not exist (vr_graph_tanh) compiled"
fi
grep -q "vr_graph_tanh" "$tmp/no_such_op.err" || fail "the build error does not name vr_graph_tanh: $(cat "$tmp/no_such_op.err")"

# The CMake package: a project of its own, with find_package(vram).
mkdir "$tmp/proj"
cat >"$tmp/proj/CMakeLists.txt" <<CMAKE
cmake_minimum_required(VERSION 3.20)
project(use_vram C)
find_package(vram 99 QUIET)   # no such version: the package must say so
if(vram_FOUND)
  message(FATAL_ERROR "find_package(vram 99) found version \${vram_VERSION}")
endif()
find_package(vram $version REQUIRED)
if(NOT VRAM_VERSION STREQUAL "$version" OR NOT TARGET vram::vram OR NOT TARGET vram::vram_static)
  message(FATAL_ERROR "vram \${VRAM_VERSION}: no vram::vram or vram::vram_static")
endif()
foreach(ex $(echo $examples))
  get_filename_component(name \${ex} NAME_WE)
  add_executable(\${name} \${ex})
  target_link_libraries(\${name} PRIVATE vram::vram m)
  add_executable(\${name}_static \${ex})
  target_link_libraries(\${name}_static PRIVATE vram::vram_static m)
endforeach()
CMAKE
cmake -S "$tmp/proj" -B "$tmp/proj/build" -DCMAKE_PREFIX_PATH="$tmp/prefix" -DCMAKE_C_FLAGS="$cflags" \
    >"$tmp/proj.log" 2>&1 || { tail -20 "$tmp/proj.log"; fail "find_package(vram) failed"; }
cmake --build "$tmp/proj/build" -j2 >>"$tmp/proj.log" 2>&1 ||
    { tail -20 "$tmp/proj.log"; fail "the examples do not build with vram::vram / vram::vram_static"; }
for ex in $examples; do
    name=$(basename "$ex" .c)
    for bin in "$name" "${name}_static"; do
        "$tmp/proj/build/$bin" >"$tmp/$bin.out" 2>&1 || { tail -5 "$tmp/$bin.out"; fail "$bin (find_package build) failed"; }
    done
done
echo "install ok"
