#!/usr/bin/env bash
# vram against PyTorch eager and torch.compile, training speed and memory, several model sizes, in ONE command on
# the GPU machine (repo root, .deps and build-carry/ carried, as run.sh and llama.sh):
#
#     bash bench/gpu/speed.sh
#
# For each configuration (CONFIGS, default "gpt2-b16 gpt2-b32 gpt2m-b8 llama1b-b8"), three systems (vram and
# torch.compile of every configuration first, then the eager runs):
#   vram          vram train --device cuda --precision bf16 --master $VRAM_MASTER --json (the generated corpus, the
#                 planned arena; VRAM_MASTER split by default: the fp32 master's values as the bf16 weights' high
#                 halves + 16 low bits, 2 bytes a weight; fp32 for a full 4-byte master)
#   torch.compile bench/gpu/torch_gpt2.py --mode compile (GPT models) / bench/gpu/hf_llama.py --mode compile
#                 (Llama: transformers' LlamaForCausalLM, SDPA), bf16 autocast over fp32 weights, fused AdamW
#   torch eager   the same with --mode eager (SKIP_EAGER=1 leaves it out)
# Every run: bf16, AdamW lr 6e-4 constant (vram: --warmup 0 --lr-schedule constant), betas 0.9/0.95, weight
# decay 0.1, global-norm clip 1.0, no evaluation, STEPS steps (default 20), each process under `timeout`.
#
# Configurations: NAME-bB, NAME one of gpt2 (124M, L12 C768 NH12, T=1024), gpt2m (gpt2-medium 350M, L24 C1024
# NH16, T=1024), gpt2l (L36 C1280 NH20), gpt2xl (L48 C1600 NH25), llama1b (llama3.2-1b, T=2048), smollm135m
# (smollm2-135m, T=2048); GPT vocabularies padded to 50304 on both sides. e.g. CONFIGS="gpt2-b16 llama1b-b8".
#
# Columns of the table (stdout, and $OUT/table.md):
#   ms/step      median step time of the steps after the first 5 (vram: the "ms" of its JSON step records;
#                torch: the per-step times torch_gpt2.py / hf_llama.py print, each step timed to its end on the
#                device: loss.item() / float(loss))
#   tokens/s     B*T / (ms/step)
#   MFU %        llm.c's gpt2_estimate_mfu: FLOPs per token 6N + 6*L*C*T, N = all parameters (position
#                embeddings and padded vocabulary rows included, a tied embedding counted once), against
#                PEAK_TFLOPS (default 989.4, H100 SXM dense bf16); the same N for every system of a config
#   peak GiB     peak device memory by nvidia-smi for every system alike (bench/gpu/gpumon.sh: memory.used
#                sampled every 50 ms, minus the idle baseline taken at the start): CUDA context included
#   vram x tok/s vram's tokens/s / this system's;   vram x mem   vram's peak GiB / this system's
# Below the table, per config: vram's "plan == allocated" line (arena planned vs allocated, peak live, every role)
# and the attention kernels it ran. Header: device, memory, driver, torch / transformers / CUDA versions, git commit.
#
# Environment: STEPS (20), CONFIGS, SKIP_EAGER=1, ROUNDS (1: vram and torch.compile of every configuration again, in
# turn, N times; the table gives the median of the rounds' ms/step and the largest peak, a note each round's figures
# and ratio), OUT (./out/speed: logs NAME.SYSTEM.{out,err,smi,meta}, env.txt,
# table.md), BUDGET (seconds for the whole command, default 560 to fit a 10-minute call: a process gets at most
# what is left and is skipped, with a line saying so, when less than 40 s is left; BUDGET=0: no limit),
# VRAM_EXTRA (more vram train flags, e.g. "--recompute selective"), VRAM_CUDNN=torch|system (the cuDNN vram's
# attention loads: PyTorch's wheel copy, the one torch.compile runs, by default; system: the loader's), VRAM_CUBLAS=torch (vram's cuBLASLt from
# PyTorch's nvidia packages instead of the loader's; env.txt names the one vram loads), PEAK_TFLOPS, DRY=1 (print the commands, run
# nothing), TABLE_ONLY=1 (only rebuild the table from the logs in $OUT). The table covers every configuration
# whose logs are in $OUT, so two calls with the same OUT on a warm machine (CONFIGS split) make one table; the
# configurations run by this call are cleared first.
# Expected time on an H100 (estimates, not measured): ~1.5-2 min per GPT-2 config (torch.compile ~1 min of it),
# ~3 min for llama1b-b8; all four configurations may not fit one 600 s call: split CONFIGS across two calls.
set -u -o pipefail
cd "$(dirname "$0")/../.." || exit 1
OUT=${OUT:-$PWD/out/speed}; mkdir -p "$OUT"
STEPS=${STEPS:-20}
CONFIGS=${CONFIGS:-gpt2-b16 gpt2-b32 gpt2m-b8 llama1b-b8}
SKIP_EAGER=${SKIP_EAGER:-0}; DRY=${DRY:-0}; TABLE_ONLY=${TABLE_ONLY:-0}; ROUNDS=${ROUNDS:-1}
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || { echo "ROUNDS=$ROUNDS: a positive integer"; exit 2; }
BUDGET=${BUDGET:-560}; PEAK_TFLOPS=${PEAK_TFLOPS:-989.4}; VRAM_EXTRA=${VRAM_EXTRA:-}; VRAM_MASTER=${VRAM_MASTER:-split}
LR=6e-4
T0=$(date +%s)
export PYTHONUNBUFFERED=1 OMP_WAIT_POLICY=passive

# NAME-bB -> KIND PRESET B T L C NH (the shapes of src/graph/gpt.c and src/graph/llama.c presets)
config() {
  local name=${1%-b*} b=${1##*-b}
  [[ $1 == *-b* && $b =~ ^[0-9]+$ ]] || return 1
  B=$b
  case $name in
    gpt2)       KIND=gpt   PRESET=gpt2         T=1024 L=12 C=768  NH=12 ;;
    gpt2m)      KIND=gpt   PRESET=gpt2-medium  T=1024 L=24 C=1024 NH=16 ;;
    gpt2l)      KIND=gpt   PRESET=gpt2-large   T=1024 L=36 C=1280 NH=20 ;;
    gpt2xl)     KIND=gpt   PRESET=gpt2-xl      T=1024 L=48 C=1600 NH=25 ;;
    llama1b)    KIND=llama PRESET=llama3.2-1b  T=2048 L=16 C=2048 NH=32 ;;
    smollm135m) KIND=llama PRESET=smollm2-135m T=2048 L=30 C=576  NH=9 ;;
    *) return 1 ;;
  esac
}
for c in $CONFIGS; do config "$c" || { echo "unknown configuration '$c' (NAME-bB, NAME: gpt2 gpt2m gpt2l gpt2xl llama1b smollm135m)"; exit 2; }; done

if [ "$DRY" = 1 ] || [ "$TABLE_ONLY" = 1 ]; then
  VRAM=build-carry/vram; [ "$DRY" = 1 ] && echo "== DRY=1: the commands only (vram binary: build-carry/vram or build-gpu/vram)"
else
  [ -d .deps ] && . scripts/gpu-setup.sh
  export PATH=/usr/local/cuda/bin:$PATH
  BIN=build-gpu
  if [ -x build-carry/vram ] && ! ldd build-carry/vram | grep "not found" > /dev/null; then
    BIN=build-carry
  else
    t=$(date +%s)
    { cmake -S . -B build-gpu -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_BUILD_TYPE=Release > "$OUT/cmake.log" 2>&1 &&
      cmake --build build-gpu -j16 --target vram_cli > "$OUT/build.log" 2>&1; } ||
      { echo "!! vram build failed"; tail -30 "$OUT/cmake.log" "$OUT/build.log" 2>/dev/null; exit 1; }
    echo "== vram built into build-gpu ($(( $(date +%s) - t )) s)"
  fi
  VRAM=$BIN/vram
  # cuDNN for vram's default --attention auto: VRAM_CUDNN=torch (default) PyTorch's wheel copy where there is one,
  # the library torch.compile's attention runs on, so both systems run one cuDNN (on the H200 the toolkit's 9.14
  # ran medium's step ~0.4 ms slower than PyTorch's 9.19); VRAM_CUDNN=system the loader's (else PyTorch's copy)
  have_cudnn() {
    ldconfig -p 2>/dev/null | grep "libcudnn.so.9 " > /dev/null && return 0
    local IFS=: d
    for d in ${LD_LIBRARY_PATH:-}; do [ -e "$d/libcudnn.so.9" ] && return 0; done
    return 1
  }
  torch_cudnn() {
    ls -d "$(python3 -c 'import nvidia.cudnn, os; print(list(nvidia.cudnn.__path__)[0])' 2>/dev/null)/lib" \
          /usr/local/lib/python3*/dist-packages/nvidia/cudnn/lib /usr/local/lib/python3*/site-packages/nvidia/cudnn/lib \
          /usr/lib/python3*/dist-packages/nvidia/cudnn/lib /opt/conda/lib/python3*/site-packages/nvidia/cudnn/lib \
          ${VIRTUAL_ENV:-/nonexistent}/lib/python3*/site-packages/nvidia/cudnn/lib \
          "$(python3 -c 'import site; print(site.getsitepackages()[0])' 2>/dev/null)/nvidia/cudnn/lib" \
          2>/dev/null | while read -r x; do [ -e "$x/libcudnn.so.9" ] && echo "$x"; done | head -1
  }
  VRAM_CUDNN=${VRAM_CUDNN:-torch}
  [ "$VRAM_CUDNN" = torch ] || [ "$VRAM_CUDNN" = system ] || { echo "!! VRAM_CUDNN=$VRAM_CUDNN: torch or system"; exit 2; }
  cudnn="loader's path"
  d=$(torch_cudnn)
  if [ "$VRAM_CUDNN" = torch ] && [ -n "$d" ]; then
    export LD_LIBRARY_PATH=$d:${LD_LIBRARY_PATH:-}; cudnn="$d (PyTorch's)"
  elif ! have_cudnn; then
    [ -z "$d" ] && d=$(ls -d /usr/local/cuda*/lib64 2>/dev/null | while read -r x; do [ -e "$x/libcudnn.so.9" ] && echo "$x"; done | head -1)
    if [ -z "$d" ] && [ -f build-carry/cudnn.tar.zst ]; then
      d=/tmp/vram-cudnn; mkdir -p $d && tar -I zstd -xf build-carry/cudnn.tar.zst -C $d
    fi
    if [ -n "$d" ]; then export LD_LIBRARY_PATH=$d:${LD_LIBRARY_PATH:-}; cudnn=$d; else cudnn="none found (vram's own attention kernels)"; fi
  fi
  # cuBLASLt for vram: the loader's (the toolkit's) by default; VRAM_CUBLAS=torch: PyTorch's wheel copy, which
  # PyTorch's own products run on (the comparison then on one library; torch loads its copy either way)
  if [ "${VRAM_CUBLAS:-}" = torch ]; then
    sp=$(python3 -c 'import site; print(site.getsitepackages()[0])' 2>/dev/null)
    lt=$(find "$sp/nvidia" /usr/local/lib/python3*/dist-packages/nvidia -name 'libcublasLt.so.1[0-9]*' 2>/dev/null | head -1)
    [ -n "$lt" ] || { echo "!! VRAM_CUBLAS=torch: no libcublasLt.so.* under PyTorch's nvidia packages"; exit 1; }
    export LD_LIBRARY_PATH=$(dirname "$lt"):${LD_LIBRARY_PATH:-}
  elif [ -n "${VRAM_CUBLAS:-}" ]; then
    echo "!! VRAM_CUBLAS=$VRAM_CUBLAS: torch or unset"; exit 2
  fi
  cublas=$(ldd "$VRAM" | awk '/libcublasLt/ {print $3; exit}')
  # the header's facts, key=value
  {
    echo "device=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
    echo "memory=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader | head -1)"
    echo "driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)"
    timeout 90 python3 -c "
import torch
print('torch=' + torch.__version__); print('torch_cuda=' + str(torch.version.cuda))
print('torch_cudnn=' + str(torch.backends.cudnn.version()))
try:
  import transformers; print('transformers=' + transformers.__version__)
except Exception as e: print('transformers=not importable (%s)' % type(e).__name__)" 2>/dev/null || echo "torch=not importable"
    if c=$(git rev-parse --short=12 HEAD 2>/dev/null); then
      echo "commit=$c$(git diff --quiet HEAD -- src include bench 2>/dev/null || echo ' (+ uncommitted changes)')"
    else
      echo "commit=${COMMIT:-unknown (no .git here; COMMIT=... to name it)}"
    fi
    echo "vram=$VRAM ($([ "$BIN" = build-carry ] && echo 'carried build' || echo 'built here'))"
    echo "cudnn=$cudnn"
    echo "cublaslt=${cublas:-not found} ($(readlink -f "${cublas:-/nonexistent}" 2>/dev/null | sed 's|.*/||'))"
    echo "steps=$STEPS"
    echo "master=$VRAM_MASTER"
    echo "date=$(date -u '+%Y-%m-%d %H:%M UTC')"
  } > "$OUT/env.txt"
  cat "$OUT/env.txt"
  # shellcheck source=bench/gpu/gpumon.sh
  . bench/gpu/gpumon.sh   # $base: the idle memory.used, MiB
  echo "idle memory.used $base MiB (the baseline)"
fi

# run one system: sysrun CONFIG SYSTEM TIMEOUT CMD...  -> $OUT/CONFIG.SYSTEM.{out,err,smi,meta}
sysrun() {
  local cfg=$1 sys=$2 to=$3; shift 3
  local n=$cfg.$sys left
  if [ "$DRY" = 1 ]; then
    echo "timeout $to $* > $OUT/$n.out 2> $OUT/$n.err"
    return 0
  fi
  if [ "$BUDGET" -gt 0 ]; then
    left=$(( BUDGET - ($(date +%s) - T0) ))
    if [ $left -lt 40 ]; then
      echo "!! $cfg $sys: SKIPPED, ${left}s of BUDGET=$BUDGET left"
      printf 'rc=skipped\nseconds=0\n' > "$OUT/$n.meta"
      return 0
    fi
    [ $left -lt "$to" ] && to=$left
  fi
  echo "== $cfg $sys (timeout ${to}s)"
  local t rc secs mx
  t=$(date +%s.%N)
  gpumon "$n" timeout -k 15 "$to" "$@" > "$OUT/$n.out" 2> "$OUT/$n.err"
  rc=$?
  secs=$(awk -v a="$t" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b - a}')
  mx=$(grep -E '^[0-9]+$' "$OUT/$n.smi" | sort -n | tail -1)
  printf 'rc=%s\nseconds=%s\npeak_mib=%s\nbase_mib=%s\ntimeout=%s\ncommand=%s\n' "$rc" "$secs" "${mx:-}" "$base" "$to" "$*" > "$OUT/$n.meta"
  if [ $rc = 0 ]; then
    echo "   ok, ${secs}s, peak $(peak "$n") GiB above idle"
  else
    echo "!! $cfg $sys FAILED: rc $rc$([ $rc = 124 ] && echo " (killed by timeout after ${to}s)") after ${secs}s; last stderr line: $(grep -v '^\s*$' "$OUT/$n.err" | tail -1 | cut -c1-300)"
  fi
}

# shapes and commands of one configuration: VFLAGS, TORCH (without --mode), timeouts vto/cto/eto
setup() {
  config "$1"
  if [ $KIND = gpt ]; then
    VFLAGS=(--preset "$PRESET"); vto=$((120 + L * 4)); cto=$((180 + L * 6)); eto=$((120 + L * 2))
    TORCH=(python3 bench/gpu/torch_gpt2.py --steps "$STEPS" --batch "$B" --seq "$T" --layers "$L" --channels "$C"
           --heads "$NH" --lr "$LR")
  else
    VFLAGS=(--model llama --preset "$PRESET"); vto=300; cto=480; eto=240
    TORCH=(python3 bench/gpu/hf_llama.py --preset "$PRESET" --batch "$B" --seq "$T" --steps "$STEPS" --lr "$LR")
  fi
}
if [ "$TABLE_ONLY" != 1 ]; then
  # vram and torch.compile of every configuration first, then the eager runs (the first to go when time is short)
  # ROUNDS > 1: the pairs again, in turn (round r's logs CONFIG.vram-r / CONFIG.compile-r); the table takes medians
  for r in $(seq 1 "$ROUNDS"); do
    sfx=$([ "$r" = 1 ] || echo "-$r")
    for c in $CONFIGS; do
      setup "$c"
      if [ "$DRY" != 1 ] && [ "$r" = 1 ]; then
        rm -f "$OUT/$c".*
        printf 'kind=%s\npreset=%s\nB=%s\nT=%s\nL=%s\nC=%s\nNH=%s\nsteps=%s\n' $KIND $PRESET $B $T $L $C $NH $STEPS > "$OUT/$c.config"
      fi
      # shellcheck disable=SC2086
      sysrun "$c" vram$sfx $vto $VRAM train "${VFLAGS[@]}" --batch "$B" --seq "$T" --precision bf16 --clip 1.0 --lr $LR \
        --warmup 0 --lr-schedule constant --steps "$STEPS" --device cuda --eval-every -1 --json --master "$VRAM_MASTER" $VRAM_EXTRA
      sysrun "$c" compile$sfx $cto "${TORCH[@]}" --mode compile
    done
  done
  if [ "$SKIP_EAGER" != 1 ]; then
    for c in $CONFIGS; do
      setup "$c"
      sysrun "$c" eager $eto "${TORCH[@]}" --mode eager
    done
  fi
fi
[ "$DRY" = 1 ] && exit 0

python3 - "$OUT" "$PEAK_TFLOPS" "$([ "$TABLE_ONLY" = 1 ] || echo "$CONFIGS")" <<'PY' | tee "$OUT/table.md"
import glob, json, os, statistics, sys

out, peak_tflops, ran = sys.argv[1], float(sys.argv[2]), sys.argv[3].split()
GiB = 1 << 30
SKIP = 5  # steps left out of the median: the first five


def kv(path):
    d = {}
    try:
        for line in open(path):
            k, sep, v = line.rstrip("\n").partition("=")
            if sep:
                d[k] = v
    except OSError:
        pass
    return d


def jsonl(path):
    recs = []
    try:
        for line in open(path, errors="replace"):
            line = line.strip()
            if line.startswith("{"):
                try:
                    recs.append(json.loads(line))
                except ValueError:
                    pass
    except OSError:
        pass
    return recs


def params(c):
    """All parameters, llm.c's count (gpt: padded vocabulary rows and wpe included; llama: tied embedding once)."""
    L, C = int(c["L"]), int(c["C"])
    if c["kind"] == "gpt":
        return 50304 * C + 1024 * C + L * (12 * C * C + 13 * C) + 2 * C
    # src/graph/llama.c presets: NKV, head dim, intermediate, vocabulary (a multiple of 128: Vp = V), tied
    nkv, hd, inter, V = {"llama3.2-1b": (8, 64, 8192, 128256), "smollm2-135m": (3, 64, 1536, 49152)}[c["preset"]]
    return V * C + L * (2 * C * C + 2 * C * nkv * hd + 3 * C * inter + 2 * C) + C


def median_ms(times):
    t = times[SKIP:] if len(times) > SKIP else times
    return statistics.median(t) if t else None


def result(cfg, sysname):
    """-> dict(ms, tps, peak_gib, note, extra) or None (never ran)."""
    meta = kv(f"{out}/{cfg}.{sysname}.meta")
    if not meta:
        return None
    r = {"ms": None, "peak": None, "note": "", "extra": {}}
    rc = meta.get("rc", "?")
    if rc == "skipped":
        r["note"] = "SKIPPED (time budget)"
        return r
    try:
        r["peak"] = (float(meta["peak_mib"]) - float(meta["base_mib"])) / 1024
    except (KeyError, ValueError):
        pass
    recs = jsonl(f"{out}/{cfg}.{sysname}.out")
    if sysname.split("-")[0] == "vram":
        steps = [x for x in recs if x.get("event") == "step"]
        r["ms"] = median_ms([x["ms"] for x in steps if "ms" in x])
        r["nsteps"] = len(steps)
        summ = [x for x in recs if x.get("event") == "summary"]
        if summ:
            r["extra"] = dict(summ[-1])
        plan = [x for x in recs if x.get("event") == "plan"]
        if plan:
            r["extra"]["params"] = plan[-1].get("plan", {}).get("model", {}).get("params")
    else:
        last = recs[-1] if recs else {}
        times = last.get("times_ms")
        r["ms"] = median_ms(times) if times else last.get("median_ms", last.get("ms"))
        r["nsteps"] = len(times) if times else None
        r["extra"] = last
    if rc != "0":
        why = "timeout" if rc == "124" else f"rc {rc}"
        err = [l.strip() for l in open(f"{out}/{cfg}.{sysname}.err", errors="replace") if l.strip()] \
            if os.path.exists(f"{out}/{cfg}.{sysname}.err") else []
        r["note"] = f"FAILED ({why}): " + (err[-1][:160] if err else "no stderr")
        r["ms"] = None
    elif r["ms"] is None:
        r["note"] = "FAILED: no step times in the output"
    return r


def rounds(cfg, sysname):
    """result() of every round (ROUNDS: logs SYSTEM, SYSTEM-2, ...): ms the median of the rounds' medians, peak the
    largest of the rounds that ran; r["per_round"] each round's ms (None: it failed or was skipped)."""
    rs = [result(cfg, sysname)]
    k = 2
    while os.path.exists(f"{out}/{cfg}.{sysname}-{k}.meta"):
        rs.append(result(cfg, f"{sysname}-{k}"))
        k += 1
    if rs[0] is None or len(rs) == 1:
        return rs[0]
    ok = [x for x in rs if x and x["ms"]]
    r = dict(ok[0] if ok else rs[0])  # the first round that ran gives the notes (plan == allocated, losses)
    r["per_round"] = [x["ms"] if x else None for x in rs]
    r["ms"] = statistics.median(x["ms"] for x in ok) if ok else None
    peaks = [x["peak"] for x in ok if x["peak"] is not None]
    r["peak"] = max(peaks) if peaks else None
    if r["ms"] is not None:
        r["note"] = ""
    return r


env = kv(f"{out}/env.txt")
print(f"# vram vs PyTorch: training speed and memory ({env.get('date', '?')})\n")
print(f"- device: {env.get('device', '?')}, {env.get('memory', '?')}, driver {env.get('driver', '?')}")
print(f"- torch {env.get('torch', '?')} (CUDA {env.get('torch_cuda', '?')}, cuDNN {env.get('torch_cudnn', '?')}), transformers {env.get('transformers', '?')}")
print(f"- git commit {env.get('commit', '?')}; vram {env.get('vram', '?')}; cuDNN for vram: {env.get('cudnn', '?')}")
print(f"- bf16, AdamW lr 6e-4 constant, clip 1.0; vram's fp32 master: {env.get('master', 'fp32')}; ms/step = median of the steps after the first {SKIP} "
      f"({env.get('steps', '?')} steps); peak = nvidia-smi memory.used above idle, 50 ms samples, every system alike")
print(f"- MFU: FLOPs/token = 6N + 6*L*C*T (llm.c's gpt2_estimate_mfu), N = all parameters (position embeddings and "
      f"padded vocabulary rows included, tied embedding once), against {peak_tflops:g} TFLOP/s (H100 SXM dense bf16)\n")

order = {n: i for i, n in enumerate(["gpt2", "gpt2m", "gpt2l", "gpt2xl", "smollm135m", "llama1b"])}
cfgs = sorted((os.path.basename(p)[:-7] for p in glob.glob(f"{out}/*.config")),
              key=lambda n: (order.get(n.rsplit("-b", 1)[0], 99), int(n.rsplit("-b", 1)[1]) if n.rsplit("-b", 1)[1].isdigit() else 0))
SYS = [("vram", "vram"), ("compile", "torch.compile"), ("eager", "PyTorch eager")]
print("| config | system | ms/step | tokens/s | MFU % | peak GiB (nvidia-smi) | vram x tokens/s | vram x memory |")
print("|---|---|---:|---:|---:|---:|---:|---:|")
notes = []
for cfg in cfgs:
    c = kv(f"{out}/{cfg}.config")
    try:
        B, T, L, C = int(c["B"]), int(c["T"]), int(c["L"]), int(c["C"])
        N = params(c)
    except (KeyError, ValueError):
        continue
    fpt = 6 * N + 6 * L * C * T
    label = f"{cfg} ({c['preset']}, B={B}, T={T})"
    res = {s: rounds(cfg, s) for s, _ in SYS}
    v = res["vram"]
    v_tps = B * T / v["ms"] * 1000 if v and v["ms"] else None
    for s, name in SYS:
        r = res[s]
        if r is None:
            continue
        pk = f"{r['peak']:.2f}" if r["peak"] is not None and r["peak"] > 0 else "?"
        if not r["ms"]:
            print(f"| {label} | {name} | {r['note']} | | | {pk} | | |")
            continue
        tps = B * T / r["ms"] * 1000
        mfu = 100 * fpt * tps / (peak_tflops * 1e12)
        rt = rm = ""
        if s != "vram" and v_tps:
            rt = f"{v_tps / tps:.2f}x"
            if v["peak"] and r["peak"]:
                rm = f"{v['peak'] / r['peak']:.2f}x"
        few = "" if (r.get("nsteps") or 0) > SKIP else " (all steps: too few)"
        print(f"| {label} | {name} | {r['ms']:.1f}{few} | {tps:,.0f} | {mfu:.1f} | {pk} | {rt} | {rm} |")
        x = r["extra"]
        if x.get("params") and x["params"] != N:
            notes.append(f"{cfg} {name}: the model has {x['params']:,} parameters, the FLOP count uses {N:,}")
    notes.append(f"{cfg}: N = {N:,} parameters, {fpt / 1e9:.3f} GFLOP/token")
    if v and v.get("per_round"):
        fmt = lambda xs: " / ".join(f"{x:.1f}" if x else "n/a" for x in xs)
        line = f"{cfg}: {len(v['per_round'])} rounds in turn, ms/step (the table: their median): vram {fmt(v['per_round'])}"
        c = res.get("compile")
        if c and c.get("per_round"):
            line += f"; torch.compile {fmt(c['per_round'])}; vram x tokens/s by round " + " / ".join(
                f"{b / a:.2f}x" if a and b else "-" for a, b in zip(v["per_round"], c["per_round"]))
        notes.append(line)
    if v and v["extra"].get("memory"):
        m = v["extra"]["memory"]
        roles = m.get("roles", {})
        same_roles = all(r.get("plan_at_peak") == r.get("run_at_peak") and r.get("plan_max") == r.get("run_max")
                         for r in roles.values())
        eq = lambda a, b: "equal" if a == b else "DIFFER"
        line = (f"{cfg} vram: arena {m.get('plan_arena', 0):,.0f} B planned, {m.get('run_arena', 0):,.0f} B allocated "
                f"({eq(m.get('plan_arena'), m.get('run_arena'))}); peak live {m.get('plan_peak', 0):,.0f} planned, "
                f"{m.get('run_peak', 0):,.0f} measured ({eq(m.get('plan_peak'), m.get('run_peak'))}); per role "
                f"{'equal' if same_roles else 'DIFFER'}")
        if "context" in m:
            line += f"; CUDA context {m['context'] / GiB:.2f} GiB"
        if m.get("process_peak"):
            line += f"; process peak (NVML) {m['process_peak'] / GiB:.2f} GiB"
        line += f"; attention {v['extra'].get('attention', '?')}"
        if v["extra"].get("loss_first") is not None:
            line += f"; loss {v['extra']['loss_first']:.3f} -> {v['extra'].get('loss_last', float('nan')):.3f}"
        notes.append(line)
    for s, name in SYS[1:]:
        r = res[s]
        if r and r["ms"] and r["extra"].get("losses"):
            ls = r["extra"]["losses"]
            notes.append(f"{cfg} {name}: loss {ls[0]:.3f} -> {ls[-1]:.3f} (random tokens)")
print()
for n in notes:
    print(f"- {n}")
earlier = [c for c in cfgs if c not in ran]
if earlier and ran:
    print(f"- from an earlier call with this OUT: {' '.join(earlier)}")
PY
echo "logs: $OUT ($(( $(date +%s) - T0 )) s)"
