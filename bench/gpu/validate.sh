#!/usr/bin/env bash
# The three GPU validations of the CUDA issue, in ONE command on the GPU machine (repo root, .deps
# carried; a prebuilt vram in build-val-carry/ is used when its libraries resolve, else it builds):
#
#   bash bench/gpu/validate.sh          # logs under $OUT (default ./out/gpu-validate), table at the end
#
# 1. Largest batch in 16 GiB, GPT-2 124M T=1024 AdamW, fp32/none, bf16/none, bf16/selective, bf16/block:
#    `vram fit --capacity 16GiB --device cuda` gives B; `vram train --max-memory 16GiB` runs 3 steps at B
#    (process device use from NVML, and nvidia-smi's memory.used polled every 100 ms, both <= 16 GiB) and
#    is refused by the plan at B+1 before it allocates anything. PyTorch eager and torch.compile (bf16
#    autocast) in the same 16 GiB: torch_gpt2.py --find-max-batch (allocator capped at 16 GiB - context).
# 2. CUDA out of memory exits cleanly: tests/cli/train_oom.sh (GPT-2 B=512, dynamic: the allocator's
#    explanation, exit 1; planned: refused up front with the plan's numbers; the next cuda run succeeds).
# 3. Loss curves from the same initial weights and the same batches, 50 steps bf16: vram train
#    --save-init/--dump-batches, then torch_gpt2.py --init --tokens with vram's lr schedule; max |dloss|.
set -u -o pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/out/gpu-validate}; mkdir -p "$OUT"
W=/tmp/vram-validate; rm -rf "$W"; mkdir -p "$W"   # big files (init checkpoint) stay out of $OUT
T_START=$(date +%s); BUDGET=${BUDGET:-450}
left() { echo $(( BUDGET - ($(date +%s) - T_START) )); }
. scripts/gpu-setup.sh
export PATH=/usr/local/cuda/bin:$PATH
export OMP_WAIT_POLICY=passive PYTHONUNBUFFERED=1
exec > >(tee "$OUT/validate.log") 2>&1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$W/gpu.txt"

if [ -x build-val-carry/vram ] && ! ldd build-val-carry/vram | grep -q "not found"; then
  BIN=build-val-carry; echo "== using the carried build in build-val-carry/"
else
  t0=$(date +%s)
  cmake -S . -B build-gpu -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_BUILD_TYPE=Release > "$W/cmake.log" 2>&1 \
    || { tail -30 "$W/cmake.log"; exit 1; }
  cmake --build build-gpu -j16 --target vram_cli > "$W/build.log" 2>&1 || { grep -E "error" "$W/build.log" | head -40; exit 1; }
  BIN=build-gpu; echo "== build ok ($(( $(date +%s) - t0 )) s)"
fi
VRAM=$PWD/$BIN/vram

# nvidia-smi's device-wide memory.used (MiB), polled while a command runs: gpumon NAME CMD...
gpumon() {
  local name=$1; shift
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 100 > "$W/$name.smi" 2>/dev/null &
  local mon=$!
  "$@"; local rc=$?
  kill "$mon" 2>/dev/null; wait "$mon" 2>/dev/null
  return $rc
}

echo; echo "== 2. CUDA out of memory exits cleanly (tests/cli/train_oom.sh)"
timeout 180 bash tests/cli/train_oom.sh "$VRAM" 2>&1 | tee "$W/oom.log" | cut -c1-700
echo "oom test rc ${PIPESTATUS[0]}" | tee -a "$W/oom.log"

echo; echo "== 1. largest batch in 16 GiB: vram fit -> vram train --max-memory 16GiB at B (3 steps) and B+1"
G="--preset gpt2 --seq 1024"
for cfg in fp32:none bf16:none bf16:selective bf16:block; do
  p=${cfg%:*}; r=${cfg#*:}; n=${p}_$r
  timeout 60 "$VRAM" fit $G --capacity 16GiB --device cuda --precision "$p" --recompute "$r" --json > "$W/fit_$n.json" 2> "$W/fit_$n.err"
  B=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['max_batch']['batch'])" "$W/fit_$n.json" 2>/dev/null || echo 0)
  echo "-- $n: vram fit B=$B"
  [ "$B" -gt 0 ] || { cat "$W/fit_$n.err"; continue; }
  echo "$B" > "$W/B_$n"
  gpumon "train_$n" timeout 120 "$VRAM" train $G --batch "$B" --precision "$p" --recompute "$r" --device cuda \
    --max-memory 16GiB --steps 3 --lr 6e-4 --clip 1.0 --eval-every -1 --json > "$W/train_$n.jsonl" 2> "$W/train_$n.err"
  echo "   train at B=$B: rc $? $(head -c 400 "$W/train_$n.err")"
  timeout 60 "$VRAM" train $G --batch $((B + 1)) --precision "$p" --recompute "$r" --device cuda \
    --max-memory 16GiB --steps 1 --eval-every -1 --quiet > /dev/null 2> "$W/next_$n.err"
  echo "   train at B+1=$((B + 1)): rc $? $(head -c 600 "$W/next_$n.err")"
done

echo; echo "== 3. loss curves, same initial weights and batches, 50 steps bf16 B=16 T=1024 (left $(left) s)"
H="--lr 6e-4 --warmup 5 --min-lr-frac 0.1 --steps 50"
timeout 120 "$VRAM" train $G --batch 16 --precision bf16 --device cuda $H --lr-schedule cosine --weight-decay 0.1 \
  --beta1 0.9 --beta2 0.95 --clip 1.0 --eval-every -1 --save-init "$W/init.bin" --dump-batches "$W/batches.bin" --json \
  > "$W/curve_vram.jsonl" 2> "$W/curve_vram.err"
echo "vram rc $? $(head -c 300 "$W/curve_vram.err")"
timeout 150 python3 bench/gpu/torch_gpt2.py --mode eager --batch 16 --seq 1024 $H --schedule cosine --weight-decay 0.1 \
  --init "$W/init.bin" --tokens "$W/batches.bin" --vocab-loss real > "$W/curve_torch.json" 2> "$W/curve_torch.err"
echo "torch rc $? $(tail -c 300 "$W/curve_torch.err")"

echo; echo "== 1b. PyTorch's largest batch in 16 GiB (left $(left) s)"
timeout 120 python3 bench/gpu/torch_gpt2.py --mode eager --find-max-batch --capacity-gib 16 --probe-steps 2 \
  > "$W/torchmax_eager.json" 2> "$W/torchmax_eager.err"
echo "eager rc $? $(grep '^{' "$W/torchmax_eager.err" | tr '\n' ' ' | head -c 1500)"
L=$(( $(left) - 25 ))
if [ "$L" -gt 60 ]; then
  timeout "$L" python3 bench/gpu/torch_gpt2.py --mode compile --find-max-batch --capacity-gib 16 --probe-steps 2 \
    > "$W/torchmax_compile.json" 2> "$W/torchmax_compile.err"
  echo "compile rc $? $(grep '^{' "$W/torchmax_compile.err" | tr '\n' ' ' | head -c 1500)"
else
  echo "compile: skipped, $L s left"
fi

echo; echo "== tables"
python3 - "$W" <<'EOF' | tee "$OUT/table.txt"
import json, os, sys
W = sys.argv[1]
GiB = 1 << 30
def jl(path):
    try:
        return [json.loads(l) for l in open(path) if l.startswith("{")]
    except Exception:
        return []
def j1(path):
    r = jl(path)
    return r[-1] if r else None
def smi_max(name):
    try:
        return max(int(x) for x in open(f"{W}/{name}.smi").read().split() if x.isdigit()) * (1 << 20)
    except Exception:
        return 0
print(open(f"{W}/gpu.txt").read().strip())
print("\n1. largest batch in 16 GiB (GPT-2 124M, T=1024, AdamW); vram: --max-memory 16GiB, CUDA context included")
print(f"{'config':16s} {'fit B':>6s} {'arena GiB':>9s} {'ctx MiB':>8s} {'NVML proc GiB':>13s} {'smi max GiB':>11s} "
      f"{'<=16':>5s} {'loss 1->3':>13s} {'B+1':>22s}")
for n in ["fp32_none", "bf16_none", "bf16_selective", "bf16_block"]:
    try:
        B = int(open(f"{W}/B_{n}").read())
    except Exception:
        print(f"{n:16s} (no fit)"); continue
    recs = jl(f"{W}/train_{n}.jsonl")
    steps = [r for r in recs if r.get("event") == "step"]
    summ = [r for r in recs if r.get("event") == "summary"]
    nxt = open(f"{W}/next_{n}.err").read() if os.path.exists(f"{W}/next_{n}.err") else ""
    refused = "refused (plan)" if "refused before allocating" in nxt else ("RAN?" if not nxt else "other error")
    smi = smi_max(f"train_{n}")
    if summ:
        m = summ[-1]["memory"]
        pk = m.get("process_peak", 0)
        ok = max(pk, smi) <= 16 * GiB
        print(f"{n:16s} {B:6d} {m['run_arena'] / GiB:9.2f} {m.get('context', 0) / 2**20:8.0f} {pk / GiB:13.2f} "
              f"{smi / GiB:11.2f} {'yes' if ok else 'NO':>5s} {steps[0]['loss']:6.3f}->{steps[-1]['loss']:.3f} {refused:>22s}")
    else:
        err = open(f"{W}/train_{n}.err").read().strip()[:200]
        print(f"{n:16s} {B:6d} did not run: {err}   B+1: {refused}")
print("\nPyTorch, bf16 autocast, allocator capped at 16 GiB - context (set_per_process_memory_fraction):")
for mode in ["eager", "compile"]:
    t = j1(f"{W}/torchmax_{mode}.json")
    if t:
        print(f"  torch {mode:8s} max B {t['max_batch']:4d} (first OOM at {t['first_oom']}); reserved at max "
              f"{t['max_reserved_at_max'] / GiB:.2f} GiB + context {t['context'] / 2**20:.0f} MiB; "
              f"probes {[(p['B'], p['fits']) for p in t['probes']]}")
    else:
        print(f"  torch {mode:8s} (no result)")
rows = {}
for n in ["bf16_none", "bf16_selective", "bf16_block", "fp32_none"]:
    try:
        rows[n] = int(open(f"{W}/B_{n}").read())
    except Exception:
        pass
te, tc = j1(f"{W}/torchmax_eager.json"), j1(f"{W}/torchmax_compile.json")
print(f"  vram vs torch, bf16: vram none {rows.get('bf16_none', '-')}, selective {rows.get('bf16_selective', '-')}, "
      f"block {rows.get('bf16_block', '-')} | eager {te['max_batch'] if te else '-'} | compile {tc['max_batch'] if tc else '-'}")

print("\n3. loss curves, 50 steps bf16, B=16 T=1024, same init (llm.c checkpoint) and same batches")
v = [r["loss"] for r in jl(f"{W}/curve_vram.jsonl") if r.get("event") == "step"]
t = j1(f"{W}/curve_torch.json")
tl = t["losses"] if t else []
n = min(len(v), len(tl))
if n:
    d = [abs(a - b) for a, b in zip(v, tl)]
    print(f"{'step':>4s} {'vram':>9s} {'torch':>9s} {'|d|':>8s}")
    for i in list(range(0, min(n, 10))) + list(range(14, n, 5)):
        print(f"{i + 1:4d} {v[i]:9.4f} {tl[i]:9.4f} {d[i]:8.4f}")
    print(f"max |dloss| over {n} steps: {max(d):.4f} (step {d.index(max(d)) + 1}); steps 1-10: {max(d[:10]):.4f}; "
          f"steps 41-50: {max(d[40:n]) if n > 40 else float('nan'):.4f}; final vram {v[n-1]:.4f} torch {tl[n-1]:.4f}")
else:
    print(f"no curves: vram {len(v)} steps, torch {len(tl)} steps")
print("\n2. CUDA out of memory: see the oom lines above;", open(f"{W}/oom.log").read().strip().splitlines()[-1])
EOF
tar czf "$OUT/logs.tgz" -C "$W" --exclude init.bin --exclude batches.bin . 2>/dev/null
echo "total $(( $(date +%s) - T_START )) s"
