#!/usr/bin/env bash
# On the lent GPU machine (Ubuntu, no package registry): unpack the Debian
# packages carried in .deps/ (cJSON, cmocka) into /tmp/sysroot and point
# pkg-config and the loader at them. Source it:  . scripts/gpu-setup.sh
root=/tmp/sysroot
mkdir -p $root
for f in .deps/*.deb; do dpkg -x "$f" $root; done
for pc in $root/usr/lib/x86_64-linux-gnu/pkgconfig/*.pc; do
  sed -i "s|^prefix=/usr|prefix=$root/usr|; s|=/usr/|=$root/usr/|g" "$pc"
done
export PKG_CONFIG_PATH=$root/usr/lib/x86_64-linux-gnu/pkgconfig:${PKG_CONFIG_PATH:-}
export LD_LIBRARY_PATH=$root/usr/lib/x86_64-linux-gnu:$root/usr/lib/x86_64-linux-gnu/openblas-pthread:${LD_LIBRARY_PATH:-}
export CPATH=$root/usr/include:${CPATH:-}
# tests with CUDA objects link through nvcc, which does not see pkg-config's -L for the unpacked cmocka
export LIBRARY_PATH=$root/usr/lib/x86_64-linux-gnu:${LIBRARY_PATH:-}
