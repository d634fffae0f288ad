# Peak device memory the same way for every system: nvidia-smi's memory.used sampled every 50 ms, above the
# idle baseline taken when this file is sourced. Needs $OUT.
#   gpumon NAME CMD...   runs CMD while sampling into $OUT/NAME.smi (returns CMD's status)
#   peak NAME            the largest sample minus the baseline, GiB
base=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1)
gpumon() {
  local name=$1; shift
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 50 > "$OUT/$name.smi" 2>/dev/null &
  local mon=$!; "$@"; local rc=$?
  kill "$mon" 2>/dev/null; wait "$mon" 2>/dev/null; return $rc
}
peak() { sort -n "$OUT/$1.smi" | tail -1 | awk -v b="$base" '{printf "%.2f", ($1 - b) / 1024}'; }
