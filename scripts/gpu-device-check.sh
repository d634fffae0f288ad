#!/usr/bin/env bash
# Device-layer check on the lent GPU machine, without CMake (so a half-built
# layer elsewhere cannot stop it): builds the device tests and a binary that
# runs only `vram info`, then runs them, also with CUDA_VISIBLE_DEVICES= (no GPU).
# Run from the repo root with .deps carried:  bash scripts/gpu-device-check.sh
set -x
. scripts/gpu-setup.sh
CU=${CUDA_HOME:-/usr/local/cuda}
which nvcc; ls $CU/lib64/libcudart* | head -3; nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv
SRC="$(ls src/device/*.c | grep -v _nocuda) src/util/*.c"
FL="-std=c11 -O1 -g -Wall -Wextra -Werror -Iinclude -Isrc -Itests -I$CU/include -DVRAM_HAVE_CUDA=1"
LIBS="-L$CU/lib64 -Wl,-rpath,$CU/lib64 -L/tmp/sysroot/usr/lib/x86_64-linux-gnu -lcudart -ldl -lpthread -lm"
gcc $FL $SRC tests/device/test_cuda.c $LIBS -lcmocka -o /tmp/test_cuda || exit 1
for t in test_meta test_cpu test_events; do gcc $FL $SRC tests/device/$t.c $LIBS -lcmocka -o /tmp/$t || exit 1; done
cat > /tmp/info_main.c <<'C'
#include "cli/cli.h"
int main(int argc, char **argv) { return vr_cli_info.run(argc - 1, argv + 1); }
C
gcc $FL $SRC src/cli/cmd_info.c src/cli/flags.c src/cli/errors.c /tmp/info_main.c $LIBS -lcjson -o /tmp/vram || exit 1
set +x
/tmp/vram info; echo "rc=$?"
/tmp/vram info --json | tee ${OUT:-/tmp}/info.json | python3 -c 'import json,sys; print("json ok", json.load(sys.stdin)["cuda"])'
bash tests/cli/info.sh /tmp/vram >/dev/null && echo "info.sh ok"
/tmp/test_cuda; echo "test_cuda rc=$?"
for t in test_meta test_cpu test_events; do /tmp/$t >/dev/null 2>&1; echo "$t rc=$?"; done
CUDA_VISIBLE_DEVICES= /tmp/vram info | head -2
CUDA_VISIBLE_DEVICES= /tmp/test_cuda 2>&1 | grep -E "OK|FAIL|\("
python3 - <<'PY'
import torch, subprocess, os
torch.cuda.init(); torch.zeros(1, device="cuda")
print("torch: after first tensor, nvidia-smi:", subprocess.run(["nvidia-smi","--query-compute-apps=pid,used_memory","--format=csv,noheader"],capture_output=True,text=True).stdout.strip(), "my pid", os.getpid())
PY
