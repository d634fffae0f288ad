#!/usr/bin/env python3
"""Synthetic allocator traces in the shared format (shared/traces/README.md),
for checking allocator policies on workloads other than the two recorded ones.

    python3 bench/alloc/gen_traces.py OUT_DIR

writes (gzip CSV, alloc / free_completed events, one stream):
  gpt_b4.csv.gz, gpt_b12_t512.csv.gz  eager GPT training steps (12 layers, C=768,
                                       V=50304, AdamW state, fp32 activations
                                       saved for backward, freed in reverse)
  mlp_b256.csv.gz                      MLP 4096-8192-...-10 with Adam, 5 steps
  varlen_gpt.csv.gz                    the GPT step with T drawn from 64-1024 per step
  bert_varlen.csv.gz                   the GPT step shaped as BERT-base (V=30522, B=32) with a new T
                                       (64-512, any integer) every step, 40 steps: nearly every
                                       large request of a step is a size not seen before
  bert_varlen_w20.csv.gz               its first 20 steps (calls of steps 21-40 = the difference)
  random_mix.csv.gz                    long- and short-lived tensors, log-uniform
                                       1 KiB-1 GiB, bursts, deterministic seed
Addresses are fake unique ids; sizes are rounded to 512 as PyTorch does."""
import gzip, os, random, sys

class Trace:
    def __init__(self): self.rows, self.next = [], 1 << 40
    def alloc(self, n):
        n = max(512, (n + 511) // 512 * 512)
        a = self.next; self.next += n + 4096
        self.rows.append(f"alloc,{a},{n},0"); return (a, n)
    def free(self, h): self.rows.append(f"free_completed,{h[0]},{h[1]},0")
    def write(self, path, name):
        with gzip.open(path, "wt") as f:
            f.write('# {"workload": "%s"}\naction,addr,size,stream\n' % name)
            f.write("\n".join(self.rows) + "\n")

def gpt(tr, steps, B, Ts, L=12, C=768, V=50304, H=12):
    P = V * C + 1024 * C + L * (12 * C * C + 13 * C) + 2 * C
    per = [V * C, 1024 * C] + [s for _ in range(L) for s in (3 * C * C, C * C, 4 * C * C, 4 * C * C, 3 * C, C, 4 * C, C, C, C, C, C)]
    params = [tr.alloc(4 * s) for s in per]
    opt = None
    for step in range(steps):
        T = Ts(step)
        BT = B * T
        saved = [tr.alloc(4 * BT * C)]                      # embedding out
        for _ in range(L):
            ln1 = tr.alloc(4 * BT * C); saved.append(ln1)
            qkv = tr.alloc(4 * BT * 3 * C); saved.append(qkv)
            att = tr.alloc(4 * B * H * T * T); saved.append(att)   # attention probs
            tmp = tr.alloc(4 * B * H * T * T); tr.free(tmp)        # softmax scratch
            y = tr.alloc(4 * BT * C); saved.append(y)
            res = tr.alloc(4 * BT * C); saved.append(res)
            ln2 = tr.alloc(4 * BT * C); saved.append(ln2)
            fc = tr.alloc(4 * BT * 4 * C); saved.append(fc)
            gl = tr.alloc(4 * BT * 4 * C); saved.append(gl)
            out = tr.alloc(4 * BT * C); saved.append(out)
        logits = tr.alloc(4 * BT * V)
        probs = tr.alloc(4 * BT * V); tr.free(logits)
        loss = tr.alloc(4 * BT); tr.free(loss)
        grads = [tr.alloc(4 * s) for s in per[:2]]
        dlog = tr.alloc(4 * BT * V); tr.free(probs)
        dx = tr.alloc(4 * BT * C); tr.free(dlog)
        for l in range(L):
            for s in (4 * C * C, 4 * C * C, C * C, 3 * C * C):
                grads.append(tr.alloc(4 * s))
            for _ in range(9):
                h = saved.pop()
                g = tr.alloc(h[1]); tr.free(h); tr.free(g)
            ndx = tr.alloc(4 * BT * C); tr.free(dx); dx = ndx
        tr.free(dx); tr.free(saved.pop())
        if opt is None:
            opt = [tr.alloc(4 * s) for s in per] + [tr.alloc(4 * s) for s in per]
        for g in grads: tr.free(g)
    for h in params + opt: tr.free(h)

def mlp(tr, steps, B, widths):
    ws = [tr.alloc(4 * a * b) for a, b in zip(widths, widths[1:])]
    opt = [tr.alloc(h[1]) for h in ws] + [tr.alloc(h[1]) for h in ws]
    for _ in range(steps):
        acts = [tr.alloc(4 * B * widths[0])]
        for w in widths[1:]:
            acts.append(tr.alloc(4 * B * w))
        grads = []
        d = tr.alloc(acts[-1][1])
        for i in range(len(ws) - 1, -1, -1):
            grads.append(tr.alloc(ws[i][1]))
            nd = tr.alloc(acts[i][1]); tr.free(d); tr.free(acts[i + 1]); d = nd
        tr.free(d); tr.free(acts[0])
        for g in grads: tr.free(g)
    for h in ws + opt: tr.free(h)

def random_mix(tr, ops, seed):
    rng = random.Random(seed)
    live_long, live_short = [], []
    for i in range(ops):
        r = rng.random()
        size = int(2 ** rng.uniform(10, 30))
        if r < 0.03 and sum(h[1] for h in live_long) < (12 << 30):
            live_long.append(tr.alloc(size))
        elif r < 0.05 and live_long:
            tr.free(live_long.pop(rng.randrange(len(live_long))))
        elif r < 0.55 and sum(h[1] for h in live_short) < (24 << 30):
            live_short.append(tr.alloc(int(2 ** rng.uniform(10, 28)) if rng.random() < 0.8 else size))
        elif live_short:
            k = rng.randrange(len(live_short)) if rng.random() < 0.3 else len(live_short) - 1
            tr.free(live_short.pop(k))
    for h in live_long + live_short: tr.free(h)

def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "out/traces"
    os.makedirs(out, exist_ok=True)
    jobs = {
        "gpt_b4": lambda t: gpt(t, 3, 4, lambda s: 1024),
        "gpt_b12_t512": lambda t: gpt(t, 3, 12, lambda s: 512),
        "varlen_gpt": lambda t: gpt(t, 6, 8, lambda s, r=random.Random(7): r.randrange(64, 1025, 64)),
        "bert_varlen": lambda t: gpt(t, 40, 32, lambda s, r=random.Random(11): r.randint(64, 512), V=30522),
        "bert_varlen_w20": lambda t: gpt(t, 20, 32, lambda s, r=random.Random(11): r.randint(64, 512), V=30522),
        "mlp_b256": lambda t: mlp(t, 5, 256, [4096, 8192, 8192, 4096, 2048, 1000, 10]),
        "random_mix": lambda t: random_mix(t, 60000, 12345),
    }
    for name, fn in jobs.items():
        tr = Trace(); fn(tr); tr.write(os.path.join(out, name + ".csv.gz"), name)
        print(name, len(tr.rows), "events")

main()
