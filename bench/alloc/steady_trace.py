#!/usr/bin/env python3
"""A recorded trace's steady step repeated: does a policy settle on a loop that repeats exactly?

    python3 bench/alloc/steady_trace.py TRACE MARKER_SIZE STEP REPEATS OUT.csv.gz
    vram replay OUT.csv.gz --policy stitch --json     # calls over 10 and 30 repeats equal: none after the 10th

TRACE: a vram trace (docs/trace-format.md, gzip or plain). MARKER_SIZE: the size of an `alloc` made once a step
(ResNet-50's input batch: 38535168); the steps are the spans between its allocations. OUT: the trace up to step
STEP (0-based), then step STEP's events REPEATS times. A step's events free what the step before allocated at
the same addresses (a caching allocator's steady state hands the same addresses out), so the result replays
as a longer run of the same loop; `vram replay` refuses it otherwise."""
import gzip
import sys


def main():
    if len(sys.argv) != 6:
        sys.exit(__doc__)
    src, marker, step, reps, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    opener = gzip.open if src.endswith(".gz") else open
    with opener(src, "rt") as f:
        lines = f.readlines()
    head = [l for l in lines if l.startswith("#") or l.startswith("action")]
    ev = [l for l in lines if not (l.startswith("#") or l.startswith("action"))]
    marks = [i for i, l in enumerate(ev) if l.startswith("alloc,") and l.split(",")[2] == marker]
    if len(marks) < step + 2:
        sys.exit(f"steady_trace.py: {src}: {len(marks)} allocations of {marker} bytes: no step {step} with one after it")
    with gzip.open(out, "wt") as f:
        f.writelines(head + ev[:marks[step]] + ev[marks[step]:marks[step + 1]] * reps)
    print(f"{out}: steps 0..{step - 1}, then step {step} ({marks[step + 1] - marks[step]} events) {reps} times")


if __name__ == "__main__":
    main()
