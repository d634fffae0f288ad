# Sourced by the bench/dist scripts first: $out (OUT, default /tmp/out) made, NVLink multicast off in every
# process (KINDS.md), $n the GPU count, the idle memory per GPU; then
#   mon NAME CMD...   runs CMD (5 min at most) into $out/NAME.txt with nvidia-smi sampling every 50 ms; prints
#                     its status, tokens/s and the peak per GPU above idle
#   losses FILE       the step losses a vram run printed
#   jl FILE           the step losses of a vram run with --json
out=${OUT:-/tmp/out}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
n=$(nvidia-smi -L | wc -l)
nvidia-smi --query-gpu=index,memory.used --format=csv,noheader,nounits >"$out/idle.csv"
mon() { # mon NAME CMD...: runs CMD with nvidia-smi sampling every 50 ms; prints the peak per GPU above idle
  local name=$1; shift
  nvidia-smi --query-gpu=index,memory.used --format=csv,noheader,nounits -lms 50 >"$out/$name.smi" &
  local pid=$!
  timeout 300 "$@" >"$out/$name.txt" 2>&1; local rc=$?
  kill $pid; wait $pid 2>/dev/null
  local peaks
  peaks=$(awk -F', ' 'NR==FNR { idle[$1] = $2; next } { d = $2 - idle[$1]; if (d > m[$1]) m[$1] = d }
    END { for (g in m) printf "gpu%s %.2f GiB  ", g, m[g] / 1024 }' "$out/idle.csv" "$out/$name.smi")
  local tps
  tps=$(grep -o '[0-9]* tokens/s' "$out/$name.txt" | tail -1)
  echo "$name: rc $rc, $tps, peak above idle: $peaks"
  grep -E "DIFFERS|error|rror:" "$out/$name.txt" | head -3
}
losses() { grep -o 'step [0-9]*/[0-9]* | loss [0-9.]*' "$1" | awk '{print $NF}' | tr '\n' ' '; }
jl() { grep '"event":"step"' "$1" | sed 's/.*"loss":\([-0-9.e]*\).*/\1/' | tr '\n' ' '; }
