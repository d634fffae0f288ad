#!/usr/bin/env bash
# Installs the Debian packages vram needs (as root), if any are missing.
set -euo pipefail
pkgs=(build-essential cmake pkg-config libcmocka-dev libopenblas-dev libcjson-dev libpcre2-dev zlib1g-dev python3 python3-torch
      python3-numpy python3-regex chromium
      libopenmpi-dev openmpi-bin  # MPI: the communicator's CPU engine, mpirun for its tests
      clang libclang-rt-14-dev libomp-14-dev)  # clang: fuzzers (libFuzzer) and the TSan build (libomp + archer)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
