#!/usr/bin/env bash
# Is the step deterministic, and does CUDA graph mode give the same losses as node by node? GPT-2 124M bf16
# B=16 T=1024 (run.sh's flags), STEPS steps node by node twice and with --cuda-graph on once, on the GPU
# machine (repo root, .deps and build-carry/ carried):   bash bench/gpu/graph_repeat.sh
# Prints the largest |loss difference| over the steps between the runs and each run's median step time.
# EXTRA: more vram train flags for every run (e.g. "--matmul-tune on", "--fuse off").
set -u -o pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$(mktemp -d /tmp/graph_repeat.XXXXXX)}; mkdir -p "$OUT"
STEPS=${STEPS:-30}
[ -d .deps ] && . scripts/gpu-setup.sh 2>/dev/null
VRAM=${VRAM:-build-carry/vram}
for run in nodes1 nodes2 graph; do
  g=off; [ $run = graph ] && g=on
  timeout 300 $VRAM train --preset gpt2 --batch 16 --seq 1024 --precision bf16 --clip 1.0 --lr 6e-4 --warmup 0 \
    --lr-schedule constant --steps "$STEPS" --device cuda --eval-every -1 --json --cuda-graph $g ${EXTRA:-} \
    > "$OUT/$run.jsonl" 2> "$OUT/$run.err" || { echo "$run failed:"; tail -3 "$OUT/$run.err"; }
done
python3 - "$OUT" <<'PY'
import json, statistics, sys
out = sys.argv[1]
def steps(n):
    return [r for r in (json.loads(l) for l in open(f"{out}/{n}.jsonl") if l.startswith("{")) if r.get("event") == "step"]
s = {n: steps(n) for n in ("nodes1", "nodes2", "graph")}
for n, st in s.items():
    print(f"{n:7s} {len(st)} steps, median {statistics.median(r['ms'] for r in st[5:]):.2f} ms/step, "
          f"loss {st[0]['loss']:.6f} -> {st[-1]['loss']:.6f}")
for a, b in (("nodes1", "nodes2"), ("nodes1", "graph")):
    d = [abs(x["loss"] - y["loss"]) for x, y in zip(s[a], s[b])]
    print(f"max |loss {a} - loss {b}| over {len(d)} steps: {max(d):.3g}" + (" (bit for bit)" if max(d) == 0 else ""))
PY
