#!/usr/bin/env python3
"""vram's per-GPU plan beside the ZeRO paper's model-state formulas, on any machine (meta device, no GPU).

    python3 bench/dist/zero_formulas.py [VRAM] [--gpus 8,64] [--shapes 7b,13b] [--json FILE]

For each GPT shape (7b: L=32 C=4096 NH=32; 13b: L=40 C=5120 NH=40; vocabulary 50257, B=1, T=2048, bf16 with
an fp32 master, AdamW, block recompute, no clipping) and each GPU count and ZeRO stage it runs
`vram plan --gpus N --zero S --json` and prints, per GPU: the paper's model states (Rajbhandari et al. 2020,
mixed-precision Adam, K = 12: stage 0 (2+2+K)Psi, 1 2Psi+2Psi+K*Psi/N, 2 2Psi+(2+K)Psi/N, 3 (2+2+K)Psi/N),
vram's model states on its largest rank (the parameter buffer it keeps, the master and optimizer state, and the
gradients of the elements it updates: every one under ZeRO 0, its own share under ZeRO >= 1, which frees the
others' after their collective), their ratio to the formula, the rest vram adds on the rank with the largest
arena (activations, temporaries, gathered weights, gradients in flight before their collective, communication
buckets: that arena less its states) and the arena: the bytes a rank will allocate, exactly, on the largest
and the smallest rank. vram shards at element granularity (parameters cut into pieces at the ranks' equal
shares, to 4096 elements), so the ranks' states are equal to the formula within that.
"""
import argparse, json, subprocess, sys

SHAPES = {"7b": (32, 4096, 32), "13b": (40, 5120, 40)}
GiB = 1 << 30


def paper(stage, psi, n, k=12):
    return {0: (4 + k) * psi, 1: 4 * psi + k * psi / n, 2: 2 * psi + (2 + k) * psi / n, 3: (4 + k) * psi / n}[stage]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("vram", nargs="?", default="build/vram")
    ap.add_argument("--gpus", default="8,64")
    ap.add_argument("--shapes", default="7b,13b")
    ap.add_argument("--json", help="write every figure here")
    a = ap.parse_args()
    rows = []
    print(f"{'shape':5s} {'GPUs':>4s} {'ZeRO':>4s} {'Psi':>14s} {'paper GiB':>10s} {'vram states':>11s} {'ratio':>6s} "
          f"{'+ acts etc':>10s} {'arena max':>10s} {'arena min':>10s}  (per GPU; vram: largest rank)")
    for shape in a.shapes.split(","):
        L, C, H = SHAPES[shape]
        for n in map(int, a.gpus.split(",")):
            for z in range(4):
                cmd = [a.vram, "plan", "--layers", str(L), "--channels", str(C), "--heads", str(H), "--vocab", "50257",
                       "--batch", "1", "--seq", "2048", "--precision", "bf16", "--optim", "adamw", "--recompute",
                       "block", "--gpus", str(n), "--zero", str(z), "--json"]
                p = subprocess.run(cmd, capture_output=True, text=True)
                row = {"shape": shape, "gpus": n, "zero": z, "command": " ".join(cmd[1:])}
                if p.returncode != 0:
                    row["refused"] = (p.stderr.strip().splitlines() or ["?"])[-1]
                    print(f"{shape:5s} {n:4d} {z:4d}  refused: {row['refused']}")
                    rows.append(row)
                    continue
                j = json.loads(p.stdout)
                psi = j["model"]["trainable"]
                ranks = j["ranks"]
                # a rank's model states: its parameter buffer, master, optimizer state, and the gradients (bf16) of
                # the elements it updates
                states = [r["param_buffer"] + r["roles"]["master"] + r["roles"]["optim"] + 2 * r["owned"] for r in ranks]
                arenas = [r["arena"] for r in ranks]
                top = max(range(len(ranks)), key=lambda i: arenas[i])
                f = paper(z, psi, n)
                row.update(psi=psi, paper=f, states=max(states), rest=arenas[top] - states[top], arena_max=max(arenas),
                           arena_min=min(arenas))
                rows.append(row)
                print(f"{shape:5s} {n:4d} {z:4d} {psi:14,d} {f / GiB:10.2f} {max(states) / GiB:11.2f} "
                      f"{max(states) / f:6.4f} {row['rest'] / GiB:10.2f} {max(arenas) / GiB:10.2f} "
                      f"{min(arenas) / GiB:10.2f}")
    if a.json:
        json.dump(rows, open(a.json, "w"), indent=1)


if __name__ == "__main__":
    sys.exit(main())
