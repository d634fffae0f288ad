#!/usr/bin/env bash
# `cmake --install` into a temporary prefix gives headers, libvram.so/.a and a
# relocatable vram.pc; a program built against them through pkg-config runs.
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
echo "install ok"
