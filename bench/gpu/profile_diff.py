#!/usr/bin/env python3
"""Per-kernel table, before and after: two outputs of `VRAM_PROFILE=1 vram train` (bench/gpu/profile.sh
prints them; the "by op" and "by node name" sections) side by side, ms per step and the change.

    python3 bench/gpu/profile_diff.py BEFORE.txt AFTER.txt [--nodes]"""
import re
import sys


def read(path):
    total, sec, ops, nodes = None, None, {}, {}
    for line in open(path):
        m = re.search(r"vram profile: .*: ([0-9.]+) ms/step", line)
        if m:
            total = float(m.group(1))
        elif "by op" in line:
            sec = ops
        elif "by node name" in line:
            sec = nodes
        elif sec is not None:
            f = line.split()
            if len(f) >= 4 and re.match(r"^[0-9.]+$", f[1]):
                sec[f[0]] = (float(f[1]), int(f[3]))
    return total, ops, nodes


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    (t0, o0, n0), (t1, o1, n1) = read(sys.argv[1]), read(sys.argv[2])
    a, b = (n0, n1) if "--nodes" in sys.argv[3:] else (o0, o1)
    keys = sorted(set(a) | set(b), key=lambda k: -max(a.get(k, (0, 0))[0], b.get(k, (0, 0))[0]))
    print("| %s | before ms/step | after ms/step | change ms | nodes before -> after |" %
          ("node" if "--nodes" in sys.argv[3:] else "op"))
    print("|---|---:|---:|---:|---|")
    for k in keys:
        x, y = a.get(k, (0.0, 0)), b.get(k, (0.0, 0))
        if x[0] < 0.0005 and y[0] < 0.0005:
            continue
        print(f"| {k} | {x[0]:.3f} | {y[0]:.3f} | {y[0] - x[0]:+.3f} | {x[1]} -> {y[1]} |")
    if t0 and t1:
        print(f"| **total GPU time per step** | **{t0:.3f}** | **{t1:.3f}** | **{t1 - t0:+.3f}** | |")


if __name__ == "__main__":
    main()
