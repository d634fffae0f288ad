#!/usr/bin/env python3
"""Checks a safetensors file written by tests/formats/test_safetensors.c by hand
(struct + json, as Python's safetensors reads it): the 8-byte header length, a
JSON header padded to 8 bytes, offsets back to back covering all the data, and
the values. With torch installed, also reads each tensor through torch."""
import json, struct, sys

path = sys.argv[1]
raw = open(path, "rb").read()
(n,) = struct.unpack("<Q", raw[:8])
assert n % 8 == 0 and 8 + n <= len(raw), n
hdr = json.loads(raw[8:8 + n].decode("utf-8"))
data = raw[8 + n:]
assert hdr.pop("__metadata__") == {"format": "pt", "producer": "vram"}
size = {"F32": 4, "BF16": 2, "F16": 2}
end = 0
vals = {}
for name, t in sorted(hdr.items(), key=lambda kv: kv[1]["data_offsets"][0]):
    b, e = t["data_offsets"]
    assert b == end, (name, b, end)
    numel = 1
    for d in t["shape"]:
        numel *= d
    assert e - b == numel * size[t["dtype"]], name
    buf = data[b:e]
    if t["dtype"] == "F32":
        vals[name] = list(struct.unpack("<%df" % numel, buf))
    elif t["dtype"] == "F16":
        vals[name] = list(struct.unpack("<%de" % numel, buf))
    else:
        vals[name] = [struct.unpack("<f", struct.pack("<I", h << 16))[0] for h in struct.unpack("<%dH" % numel, buf)]
    end = e
assert end == len(data), (end, len(data))
assert hdr["a"]["shape"] == [2, 3] and vals["a"] == [i * 0.5 - 1 for i in range(6)], vals["a"]
assert hdr["b"]["dtype"] == "BF16" and vals["b"] == [1.0, -2.0, 0.5, 3.25], vals["b"]
assert hdr["c"]["dtype"] == "F16" and vals["c"] == [1.5, -0.25, 65504.0, 2.0 ** -14], vals["c"]
assert hdr["s"]["shape"] == [] and vals["s"] == [7.0], vals["s"]
try:
    import torch
except ImportError:
    torch = None
if torch is not None:
    dt = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16}
    for name, t in hdr.items():
        b, e = t["data_offsets"]
        x = torch.frombuffer(bytearray(data[b:e]), dtype=dt[t["dtype"]]).reshape(t["shape"])
        assert x.float().flatten().tolist() == vals[name], name
print("ok")
