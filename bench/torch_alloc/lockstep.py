#!/usr/bin/env python3
"""The table of bench/torch_alloc/lockstep.sh for one workload:

    python3 lockstep.py MODE A1.json B1.json [A2.json B2.json ...]

Each pair ran in lockstep (a's step i, then b's step i: workload.py --lockstep), native and MODE in either order.
Per pair: the per-step ratio MODE / native over the steps after the warm-up both files name (median and quartiles),
both medians, the losses compared, and the steps themselves; then every pair's ratios pooled (the orders together:
whichever process goes first is not favoured)."""
import json
import statistics
import sys


def load(path):
    lines = [l for l in open(path) if l.startswith("{")]
    if not lines:
        raise SystemExit("lockstep.py: %s: no JSON line (did workload.py fail?)" % path)
    return json.loads(lines[-1])


def quartiles(v):
    q = statistics.quantiles(v, n=4) if len(v) > 1 else [v[0]] * 3
    return q[0], q[1], q[2]


def pair(fa, fb, mode):
    a, b = load(fa), load(fb)
    if a["workload"] != b["workload"] or len(a["step_ms"]) != len(b["step_ms"]):
        raise SystemExit("lockstep.py: %s and %s are not one pair" % (fa, fb))
    if {a["mode"], b["mode"]} != {"native", mode}:
        raise SystemExit("lockstep.py: the pair's modes are %s and %s, not native and %s" % (a["mode"], b["mode"], mode))
    nat, oth = (a, b) if a["mode"] == "native" else (b, a)
    w = max(a["warmup"], b["warmup"])
    n, m = nat["step_ms"][w:], oth["step_ms"][w:]
    r = [y / x for x, y in zip(n, m)]
    q1, med, q3 = quartiles(r)
    same = nat["losses"] == oth["losses"]
    print("%-9s %-12s first: %s / native per step: median %.4f (quartiles %.4f..%.4f, %d steps); median step "
          "native %.2f ms, %s %.2f ms; losses %s" % (
              a["workload"], a["mode"], mode, med, q1, q3, len(r), statistics.median(n), mode, statistics.median(m),
              "equal" if same else "max |diff| %.3g" % max(abs(x - y) for x, y in zip(nat["losses"], oth["losses"]))))
    print("  native ms: %s" % " ".join("%.1f" % x for x in n))
    print("  %s ms: %s" % (mode, " ".join("%.1f" % x for x in m)))
    return a["workload"], r


def main():
    if len(sys.argv) < 4 or len(sys.argv) % 2:
        raise SystemExit("usage: lockstep.py MODE A1.json B1.json [A2.json B2.json ...]")
    mode, files = sys.argv[1], sys.argv[2:]
    pooled, name = [], None
    for k in range(0, len(files), 2):
        name, r = pair(files[k], files[k + 1], mode)
        pooled += r
    if len(files) > 2:
        q1, med, q3 = quartiles(pooled)
        print("%-9s pooled (%d pairs): %s / native per step: median %.4f (quartiles %.4f..%.4f, %d steps)" % (
            name, len(files) // 2, mode, med, q1, q3, len(pooled)))


if __name__ == "__main__":
    main()
