#!/usr/bin/env python3
"""Independent reference for 8-bit optimizer state, written from the published algorithm (Dettmers et al.
2021, "8-bit Optimizers via Block-wise Quantization"; bitsandbytes' create_dynamic_map) in numpy, not from
vram's C code. Writes to DIR:
  map_signed.f32, map_unsigned.f32     the two 256-entry dynamic maps (sorted)
  block.f32                            one block of 256 values (input, from a fixed seed)
  codes_signed.u8, absmax_signed.f32   that block quantized with the signed map (nearest entry of x/absmax)
  codes_unsigned.u8, absmax_unsigned.f32  |block| quantized with the unsigned map
usage: q8_oracle.py DIR"""
import sys

import numpy as np


def dynamic_map(signed, max_exponent_bits=7, total_bits=8):
    data = []
    non_sign_bits = total_bits - 1
    for i in range(max_exponent_bits):
        items = 2 ** (i + non_sign_bits - max_exponent_bits) + 1 if signed else 2 ** (i + non_sign_bits - max_exponent_bits + 1) + 1
        bounds = np.linspace(0.1, 1.0, items)
        means = (bounds[:-1] + bounds[1:]) / 2.0
        data += list(10.0 ** (-(max_exponent_bits - 1) + i) * means)
        if signed:
            data += list(-(10.0 ** (-(max_exponent_bits - 1) + i)) * means)
    data += [0.0, 1.0]
    assert len(data) == 2 ** total_bits
    return np.array(sorted(data), dtype=np.float32)


def quantize(x, qmap):
    absmax = np.float32(np.abs(x).max())
    y = (x / absmax).astype(np.float32) if absmax > 0 else np.zeros_like(x)
    # nearest entry; a tie goes to the lower one
    d = np.abs(y[:, None].astype(np.float64) - qmap[None, :].astype(np.float64))
    codes = np.argmin(d, axis=1).astype(np.uint8)
    return codes, absmax


def main():
    out = sys.argv[1]
    s, u = dynamic_map(True), dynamic_map(False)
    s.tofile(f"{out}/map_signed.f32")
    u.tofile(f"{out}/map_unsigned.f32")
    rng = np.random.default_rng(7)
    block = (rng.standard_normal(256) * np.exp(rng.uniform(-6, 2, 256))).astype(np.float32)
    block.tofile(f"{out}/block.f32")
    c, a = quantize(block, s)
    c.tofile(f"{out}/codes_signed.u8")
    np.array([a], dtype=np.float32).tofile(f"{out}/absmax_signed.f32")
    c, a = quantize(np.abs(block), u)
    c.tofile(f"{out}/codes_unsigned.u8")
    np.array([a], dtype=np.float32).tofile(f"{out}/absmax_unsigned.f32")


if __name__ == "__main__":
    main()
