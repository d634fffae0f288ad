#!/usr/bin/env bash
# GPU check of vram train --trace's node slices from CUDA events, from the repo root on a GPU machine with
# build-carry/ holding vram built for sm_90:   bash bench/gpu/trace_check.sh
# Runs GPT-2 124M (bf16, B=8, T=1024) for 6 steps with --trace, then an accumulation run (2 micro-batches)
# and an offloaded one (copies on their own stream); for each: every node slice on a GPU track has a
# positive duration, the slices of one stream (track) do not overlap, every node of every pass has one
# slice, and (plain run, steps after the first) the compute stream's span (first node's start to last node's end) lies
# within the step time the run printed (--json "ms"; 2% slack); the gap between them, the GPU's idle time at the
# step's boundary, and the busy fraction inside the span are printed. Prints OK/FAIL per run; outputs under $OUT.
set -uo pipefail
out=${OUT:-/tmp/out/trace}; mkdir -p "$out"
V=${VRAM:-build-carry/vram}
g="--device cuda --preset gpt2 --seq 1024 --batch 8 --precision bf16 --steps 6 --eval-every -1 --json"
fail=0
run() { # name sumcheck flags...
  local name=$1 sum=$2; shift 2
  timeout 300 $V train $g "$@" --trace "$out/$name.json" >"$out/$name.jsonl" 2>"$out/$name.err"
  local rc=$?
  if [ $rc != 0 ]; then echo "$name: FAIL (vram train rc $rc)"; tail -3 "$out/$name.err"; fail=1; return; fi
  python3 - "$out/$name.json" "$out/$name.jsonl" "$sum" "$name" <<'PY' || fail=1
import collections, json, sys
tr, log, sumcheck, name = sys.argv[1], sys.argv[2], sys.argv[3] == "1", sys.argv[4]
ev = json.load(open(tr))["traceEvents"]
names = {e["tid"]: e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
plan = next(json.loads(l)["plan"] for l in open(log) if l.startswith('{"event":"plan"'))
ms = {json.loads(l)["step"]: json.loads(l)["ms"] for l in open(log) if l.startswith('{"event":"step"')}
N, accum = plan["graph"]["nodes"], plan["step"]["accum"]
nodes = [e for e in ev if e["ph"] == "X" and e["tid"] >= 1]
bad = []
if names.get(1) != "nodes (GPU compute stream)":
    bad.append("tid 1 is %r: the node slices do not come from the device" % names.get(1))
gpu = [e for e in nodes if e["tid"] in (1, 2, 3)]
zero = [e for e in gpu if not e["dur"] > 0]
if zero:
    bad.append("%d GPU slices without a positive duration, e.g. %s" % (len(zero), zero[0]))
for tid in (1, 2, 3):
    sl = sorted((e for e in gpu if e["tid"] == tid), key=lambda e: e["ts"])
    over = [(a["name"], b["name"]) for a, b in zip(sl, sl[1:]) if b["ts"] < a["ts"] + a["dur"] - 1e-3]
    if over:
        bad.append("tid %d (%s): %d overlaps, e.g. %s" % (tid, names.get(tid), len(over), over[0]))
per = collections.Counter(e["args"]["step"] for e in nodes)
steps = sorted(ms)
opt = plan["graph"]["optimizer"]
want = (N - opt) * accum + opt if accum > 1 else N
for s in steps:
    if per[s] != want:
        bad.append("step %d: %d node slices, want %d" % (s, per[s], want))
worst = 0.0
for s in steps[1:]:
    sl = [e for e in gpu if e["tid"] == 1 and e["args"]["step"] == s]
    t = sum(e["dur"] for e in sl) / 1e3
    span = (max(e["ts"] + e["dur"] for e in sl) - min(e["ts"] for e in sl)) / 1e3
    r = span / ms[s] - 1
    worst = max(worst, r)
    if t > span * 1.001:
        bad.append("step %d: node times %.2f ms exceed their span %.2f ms" % (s, t, span))
    print("  %s step %d: compute stream from first node to last %.2f ms (step %.2f ms, %.1f%%); busy %.2f ms (%.0f%%)"
          % (name, s, span, ms[s], 100 * (span / ms[s] - 1), t, 100 * t / span))
if sumcheck and worst > 0.02:
    bad.append("the compute stream's span exceeds the step time by %.1f%% (> 2%%)" % (100 * worst))
print("%s: %s (%d slices: %s)" % (name, "FAIL" if bad else "OK", len(nodes),
      ", ".join("%s %d" % (names.get(t, t), sum(1 for e in nodes if e["tid"] == t)) for t in sorted({e["tid"] for e in nodes}))))
for b in bad:
    print("  " + b)
sys.exit(1 if bad else 0)
PY
}
run plain 1
run accum 0 --batch 4 --accum 2
run offload 0 --offload optim
[ "$fail" = 0 ] && echo "trace_check: OK" || echo "trace_check: FAIL"
