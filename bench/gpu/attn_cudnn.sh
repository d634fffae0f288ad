#!/usr/bin/env bash
# cuDNN's fused flash attention (--attention cudnn) against vram's kernels (--attention vram), in ONE command
# on the GPU machine, from the repo root, with build-carry/ holding vram and test_attention_cudnn built for
# sm_90 (it builds nothing):   bash bench/gpu/attn_cudnn.sh          (about 2 minutes; at most ~4)
# 1. tests/kcuda/test_attention_cudnn: cuDNN's out/lse/dq/dk/dv and vram's against vram's fp32 kernels on
#    12 shapes (B=2, T 64/1024/2048, 12 heads of 64 and 128, GQA 8/2, fp16, T=200; timed: GPT-2 B=16 T=1024,
#    llama3.2-1b B=4 T=2048), the backward's scratch exactly as planned, guard bytes untouched;
# 2. GPT-2 124M, bf16, B=16 T=1024, 20 steps with each attention: ms/step and tokens/s (median of the steps
#    after the first 3), the losses of both runs side by side (same seed and data: they differ by bf16
#    noise only), the kernels the executor chose, plan == allocated;
# 3. llama3.2-1b, bf16, B=4 T=2048 (grouped-query), 8 steps with each attention, the same figures.
# cuDNN: libcudnn.so.9 where the loader finds it; else PyTorch's wheel (site-packages/nvidia/cudnn/lib) or
# build-carry/cudnn.tar.zst (libcudnn.so.9, _graph, _engines_runtime_compiled, _heuristic) is put on
# LD_LIBRARY_PATH. Logs under $OUT (default ./out/attn-cudnn).
set -u -o pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/out/attn-cudnn}; mkdir -p "$OUT"
[ -d .deps ] && . scripts/gpu-setup.sh
export PATH=/usr/local/cuda/bin:$PATH OMP_WAIT_POLICY=passive
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
BIN=build-carry
for f in vram test_attention_cudnn; do
  [ -x $BIN/$f ] || { echo "missing $BIN/$f (copy build-gpu/$f there)"; exit 1; }
done

# where is cuDNN?
have_cudnn() {
  ldconfig -p | grep -q "libcudnn.so.9 " && return 0
  local IFS=: d
  for d in ${LD_LIBRARY_PATH:-}; do [ -e "$d/libcudnn.so.9" ] && return 0; done
  return 1
}
if ! have_cudnn; then
  d=$(ls -d /usr/local/lib/python3*/dist-packages/nvidia/cudnn/lib /usr/local/lib/python3*/site-packages/nvidia/cudnn/lib \
        /usr/lib/python3*/dist-packages/nvidia/cudnn/lib /opt/conda/lib/python3*/site-packages/nvidia/cudnn/lib \
        ${VIRTUAL_ENV:-/nonexistent}/lib/python3*/site-packages/nvidia/cudnn/lib \
        /usr/local/cuda*/lib64 2>/dev/null | while read -r x; do [ -e "$x/libcudnn.so.9" ] && echo "$x"; done | head -1)
  if [ -z "$d" ] && [ -f $BIN/cudnn.tar.zst ]; then
    d=/tmp/vram-cudnn; mkdir -p $d && tar -I zstd -xf $BIN/cudnn.tar.zst -C $d
  fi
  [ -n "$d" ] && export LD_LIBRARY_PATH=$d:${LD_LIBRARY_PATH:-} && echo "== cuDNN from $d"
fi

echo "== test_attention_cudnn"
VRAM_REQUIRE_CUDNN=1 timeout 100 $BIN/test_attention_cudnn > "$OUT/test_attention_cudnn.log" 2>&1
echo "rc $?"
grep -E "^GPU|^==|^ +(out|lse|dq|dk|dv|time|scratch)|FAIL|PASSED|SKIP" "$OUT/test_attention_cudnn.log" | head -120

# median ms and tokens/s of the steps after the first 3, the losses, the chosen kernels, plan == allocated
summ() {
  python3 - "$1" <<'EOF'
import json, statistics, sys
recs = [json.loads(l) for l in open(sys.argv[1]) if l.startswith('{')]
st = [r for r in recs if r.get('event') == 'step']
t = st[3:] if len(st) > 3 else st
sm = [r for r in recs if r.get('event') == 'summary']
same = '?'
att = '?'
if sm:
    att = sm[-1].get('attention', '(none)')
    m = sm[-1].get('memory', {})
    if 'roles' in m:
        same = 'equal' if all(v['plan_at_peak'] == v['run_at_peak'] and v['plan_max'] == v['run_max'] for v in m['roles'].values()) else 'DIFFERS'
ms = statistics.median(r['ms'] for r in t) if t else float('nan')
tps = statistics.median(r['tokens_per_s'] for r in t) if t else float('nan')
print(f"{ms:9.1f} {tps:10.0f}  plan==run {same:7s} attention: {att}")
print("losses", " ".join(f"{r['loss']:.4f}" for r in st))
EOF
}
lossdiff() {
  python3 - "$1" "$2" <<'EOF'
import json, sys
def losses(f):
    return [r['loss'] for r in (json.loads(l) for l in open(f) if l.startswith('{')) if r.get('event') == 'step']
a, b = losses(sys.argv[1]), losses(sys.argv[2])
d = [abs(x - y) for x, y in zip(a, b)]
print(f"  max |loss(vram) - loss(cudnn)| over {len(d)} steps: {max(d):.4f}" if d else "  no losses to compare")
EOF
}

run() { # name timeout args...
  local n=$1 to=$2; shift 2
  timeout "$to" $BIN/vram train "$@" --device cuda --precision bf16 --clip 1.0 --lr 3e-4 --warmup 0 \
    --lr-schedule constant --eval-every -1 --json > "$OUT/$n.jsonl" 2> "$OUT/$n.err"
  local rc=$?
  printf "%-18s rc %-3s %s\n" "$n" "$rc" "$(summ "$OUT/$n.jsonl" | head -1)"
  [ $rc = 0 ] || tail -2 "$OUT/$n.err"
}

echo "== GPT-2 124M bf16 B=16 T=1024, 20 steps       ms/step   tokens/s"
for a in vram cudnn; do
  run gpt2_$a 60 --preset gpt2 --batch 16 --seq 1024 --steps 20 --attention $a
done
lossdiff "$OUT/gpt2_vram.jsonl" "$OUT/gpt2_cudnn.jsonl"
echo "== llama3.2-1b bf16 B=4 T=2048, 8 steps         ms/step   tokens/s"
for a in vram cudnn; do
  run llama_$a 70 --model llama --preset llama3.2-1b --batch 4 --seq 2048 --steps 8 --attention $a
done
lossdiff "$OUT/llama_vram.jsonl" "$OUT/llama_cudnn.jsonl"
echo "(auto = cudnn where it loads: the runs above name the kernels each executor chose; logs in $OUT)"
