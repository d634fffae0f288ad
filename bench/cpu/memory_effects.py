#!/usr/bin/python3
"""Memory effects measured from real runs: trains the same GPT for 2 steps with
`vram train --json` under each strategy (and evaluates it with `vram eval`) and
prints, per run, the planned peak, the bytes the run really held at its peak
(counted by the executor), the device memory it held (the arena, or the caching
allocator's peak reserved), a few roles at the peak, and the process's peak RSS.

Usage: bench/cpu/memory_effects.py VRAM_BINARY [--layers 4 --channels 128 --heads 4 --seq 256 --batch 16]"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

ap = argparse.ArgumentParser()
ap.add_argument("vram")
ap.add_argument("--layers", type=int, default=4)
ap.add_argument("--channels", type=int, default=128)
ap.add_argument("--heads", type=int, default=4)
ap.add_argument("--seq", type=int, default=256)
ap.add_argument("--batch", type=int, default=16)
a = ap.parse_args()
model = ["--layers", str(a.layers), "--channels", str(a.channels), "--heads", str(a.heads), "--seq", str(a.seq),
         "--max-seq", str(a.seq)]
B = a.batch
runs = [
    ("baseline (planned arena)", []),
    ("dynamic (caching allocator)", ["--memory", "dynamic"]),
    ("recompute block", ["--recompute", "block"]),
    ("recompute selective", ["--recompute", "selective"]),
    (f"batch {B // 4} x accum 4", ["--batch", str(B // 4), "--accum", "4"]),
    ("freeze embeddings + 2 blocks", ["--freeze", "wte,wpe,h.0.*,h.1.*"]),
    ("sgd (no optimizer state)", ["--optim", "sgd"]),
    ("clip 1.0", ["--clip", "1.0"]),
    ("in place (gelu, residual adds)", ["--inplace"]),
]
mib = 1 << 20


def run(cmd):
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    out = p.stdout.read()
    _, status, ru = os.wait4(p.pid, 0)
    if status:
        sys.exit(f"failed: {' '.join(cmd)}")
    return [json.loads(l) for l in out.splitlines() if l.startswith("{")], ru.ru_maxrss * 1024


print(f"GPT L={a.layers} C={a.channels} NH={a.heads} T={a.seq}, batch {B} (AdamW unless said), 2 steps each, cpu")
print(f"{'run':30} {'plan peak':>10} {'run peak':>10} {'device':>10} {'acts':>9} {'temp':>9} {'grads':>9} "
      f"{'optim':>9} {'RSS':>9}   (MiB)")
with tempfile.TemporaryDirectory() as d:
    for name, extra in runs:
        recs, rss = run([a.vram, "train", *model, "--batch", str(B), "--steps", "2", "--eval-every", "-1", "--json",
                         "--save", os.path.join(d, "ck.bin"), *extra])
        m = [r for r in recs if r.get("event") == "summary"][0]["memory"]
        dev = m["run_arena"] if m["mode"] == "planned" else m["run_peak_reserved"]
        ro = m["roles"]
        assert m["plan_peak"] == m["run_peak"], name
        print(f"{name:30} {m['plan_peak'] / mib:10.2f} {m['run_peak'] / mib:10.2f} {dev / mib:10.2f} "
              f"{ro['acts']['run_at_peak'] / mib:9.2f} {ro['temp']['run_at_peak'] / mib:9.2f} "
              f"{ro['grads']['run_at_peak'] / mib:9.2f} {ro['optim']['run_at_peak'] / mib:9.2f} {rss / mib:9.1f}")
    for name, extra in [("no-grad eval (vram eval)", []), ("no-grad eval, in place", ["--inplace"])]:
        recs, rss = run([a.vram, "eval", "--init", os.path.join(d, "ck.bin"), "--batch", str(B), "--seq",
                         str(a.seq), "--batches", "2", "--json", *extra])
        e = recs[-1]
        assert e["plan_peak"] == e["run_peak"], name
        print(f"{name:30} {e['plan_peak'] / mib:10.2f} {e['run_peak'] / mib:10.2f} "
              f"{e['arena'] / mib:10.2f} {0:9.2f} {'':>9} {0:9.2f} {0:9.2f} {rss / mib:9.1f}")
