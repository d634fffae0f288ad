#!/usr/bin/python3
"""CPU benchmark: trains the same small GPT with `vram train` and with PyTorch
(bench/cpu/torch_gpt.py, Debian's torch) in one run, with the same thread
count, and prints tokens/s and peak RSS of each and their ratios.

Usage: bench/cpu/bench.py VRAM_BINARY [--layers 4 --channels 128 --heads 4 --seq 128
       --batch 8 --vocab 256 --steps 30 --threads 2 --warmup-steps 3 --memory planned]
Tokens/s: steps after the first --warmup-steps (both sides), from per-step wall times.
Peak RSS: the child's ru_maxrss (os.wait4), whole process; "start" is the RSS
before any model exists (vram --version; torch right after its import), so
"peak - start" is what training itself added.
Both run with the same OMP_NUM_THREADS / OPENBLAS_NUM_THREADS / MKL_NUM_THREADS,
OMP_WAIT_POLICY (passive by default: with libgomp's active waiting, OpenMP and
OpenBLAS threads fight over the cores, which slows both sides; see vram/exec.h)
and OPENBLAS_THREAD_TIMEOUT=4 (with --wait-policy unset: neither)."""
import argparse
import json
import os
import subprocess
import sys

here = os.path.dirname(os.path.abspath(__file__))
ap = argparse.ArgumentParser()
ap.add_argument("vram")
ap.add_argument("--layers", type=int, default=4)
ap.add_argument("--channels", type=int, default=128)
ap.add_argument("--heads", type=int, default=4)
ap.add_argument("--seq", type=int, default=128)
ap.add_argument("--batch", type=int, default=8)
ap.add_argument("--vocab", type=int, default=256)
ap.add_argument("--steps", type=int, default=30)
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--warmup-steps", type=int, default=3)
ap.add_argument("--memory", default="planned")
ap.add_argument("--python", default="/usr/bin/python3")
ap.add_argument("--wait-policy", default="passive",
                help="OMP_WAIT_POLICY for both sides ('unset': leave it out; vram then sets passive itself)")
a = ap.parse_args()


def run(cmd, env):
    """Runs cmd, returns (JSON records it printed, peak RSS in bytes)."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, env=env, text=True)
    out = p.stdout.read()
    _, status, ru = os.wait4(p.pid, 0)
    if status != 0:
        sys.exit(f"{cmd[0]} failed with status {status}")
    recs = [json.loads(l) for l in out.splitlines() if l.startswith("{")]
    return recs, ru.ru_maxrss * 1024


def tokens_per_s(recs):
    steps = [r for r in recs if r.get("event") == "step" and r["step"] > a.warmup_steps]
    return sum(r["tokens"] for r in steps) / (sum(r["ms"] for r in steps) / 1e3)


env = dict(os.environ, OMP_NUM_THREADS=str(a.threads), OPENBLAS_NUM_THREADS=str(a.threads),
           MKL_NUM_THREADS=str(a.threads))
env.pop("OMP_WAIT_POLICY", None)
env.pop("OPENBLAS_THREAD_TIMEOUT", None)
if a.wait_policy != "unset":  # what the vram command sets for itself when unset (src/cli/threads.c)
    env["OMP_WAIT_POLICY"] = a.wait_policy
    env["OPENBLAS_THREAD_TIMEOUT"] = "4"
vram_cmd = [a.vram, "train", "--layers", str(a.layers), "--channels", str(a.channels), "--heads", str(a.heads),
            "--vocab", str(a.vocab), "--seq", str(a.seq), "--max-seq", str(a.seq), "--batch", str(a.batch),
            "--steps", str(a.steps), "--eval-every", "-1", "--memory", a.memory, "--json"]
torch_cmd = [a.python, os.path.join(here, "torch_gpt.py"), str(a.layers), str(a.channels), str(a.heads),
             str(a.vocab), str(a.seq), str(a.batch), str(a.steps), str(a.threads)]
_, vr_base = run([a.vram, "--version"], env)  # the binary and its libraries, no model
vr, vr_rss = run(vram_cmd, env)
tr, tr_rss = run(torch_cmd, env)
vt, tt = tokens_per_s(vr), tokens_per_s(tr)
summ = [r for r in vr if r.get("event") == "summary"][0]
tsum = [r for r in tr if r.get("event") == "summary"][0]
mib = 1 << 20
print(f"model: GPT L={a.layers} C={a.channels} NH={a.heads} V={a.vocab} T={a.seq} B={a.batch}, "
      f"{tsum['params']} params, AdamW, {a.steps} steps ({a.warmup_steps} not timed), {a.threads} threads, "
      f"torch {tsum['torch']}, vram --memory {a.memory}, OMP_WAIT_POLICY {a.wait_policy}")
tr_base = tsum["rss_imported"]
print(f"{'':8} {'tokens/s':>10} {'peak RSS':>12} {'RSS at start':>13} {'peak - start':>13} {'planned peak':>13}")
print(f"{'vram':8} {vt:10.0f} {vr_rss / mib:8.1f} MiB {vr_base / mib:9.1f} MiB {(vr_rss - vr_base) / mib:9.1f} MiB "
      f"{summ['memory']['plan_peak'] / mib:9.1f} MiB")
print(f"{'pytorch':8} {tt:10.0f} {tr_rss / mib:8.1f} MiB {tr_base / mib:9.1f} MiB {(tr_rss - tr_base) / mib:9.1f} MiB")
print(f"ratio    vram/pytorch: tokens/s {vt / tt:.2f}x, peak RSS {vr_rss / tr_rss:.2f}x, "
      f"peak RSS above start {(vr_rss - vr_base) / (tr_rss - tr_base):.2f}x")
