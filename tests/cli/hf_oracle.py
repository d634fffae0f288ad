"""A Hugging Face Llama-family checkpoint with random weights and its loss, for tests/cli/hf.sh.

  python3 hf_oracle.py write DIR KIND B T   writes DIR/config.json, DIR/model.safetensors (HF names, fp32,
                                            written by hand: no safetensors package), DIR/tokens.bin (llm.c
                                            uint16 token file) and prints the loss of the first batch
  python3 hf_oracle.py same DIR1 DIR2       exits 1 unless both model.safetensors hold the same tensors, bit
                                            for bit (names, shapes, values)

KIND: llama3 (GQA 4 query heads over 2 kv heads, Llama 3 rope scaling with its bands inside T, untied head)
or qwen2 (q/k/v biases, 1 kv head, tied embeddings). The model is written here in pure PyTorch with
transformers' semantics (LlamaForCausalLM / Qwen2ForCausalLM: RMSNorm in fp32, rotate-half rope on
cos/sin of position x inv_freq, repeat_kv for GQA, causal softmax attention, SwiGLU); the loss is the mean
cross-entropy of the B x T next tokens of the first batch (rows of T+1 tokens at stride T)."""
import json
import math
import os
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F


def config(kind):
    c = dict(architectures=["LlamaForCausalLM"], model_type="llama", hidden_size=64, intermediate_size=96,
             num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16, vocab_size=300,
             max_position_embeddings=128, rms_norm_eps=1e-5, rope_theta=500000.0, tie_word_embeddings=False,
             rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                               original_max_position_embeddings=16),
             torch_dtype="float32", hidden_act="silu")
    if kind == "qwen2":
        c.update(architectures=["Qwen2ForCausalLM"], model_type="qwen2", num_key_value_heads=1,
                 tie_word_embeddings=True, rope_scaling=None, rope_theta=10000.0, rms_norm_eps=1e-6)
    return c


def tensors(c, g):
    D, I, V, L = c["hidden_size"], c["intermediate_size"], c["vocab_size"], c["num_hidden_layers"]
    Q, KV = c["num_attention_heads"] * c["head_dim"], c["num_key_value_heads"] * c["head_dim"]
    t = {"model.embed_tokens.weight": torch.randn(V, D, generator=g) * 0.5}
    for l in range(L):
        p = f"model.layers.{l}."
        t[p + "input_layernorm.weight"] = 1 + 0.1 * torch.randn(D, generator=g)
        for n, r in (("q", Q), ("k", KV), ("v", KV)):
            t[p + f"self_attn.{n}_proj.weight"] = torch.randn(r, D, generator=g) * 0.15
            if c["model_type"] == "qwen2":
                t[p + f"self_attn.{n}_proj.bias"] = torch.randn(r, generator=g) * 0.1
        t[p + "self_attn.o_proj.weight"] = torch.randn(D, Q, generator=g) * 0.15
        t[p + "post_attention_layernorm.weight"] = 1 + 0.1 * torch.randn(D, generator=g)
        t[p + "mlp.gate_proj.weight"] = torch.randn(I, D, generator=g) * 0.15
        t[p + "mlp.up_proj.weight"] = torch.randn(I, D, generator=g) * 0.15
        t[p + "mlp.down_proj.weight"] = torch.randn(D, I, generator=g) * 0.1
    t["model.norm.weight"] = 1 + 0.1 * torch.randn(D, generator=g)
    if not c["tie_word_embeddings"]:
        t["lm_head.weight"] = torch.randn(V, D, generator=g) * 0.15
    return t


def write_safetensors(path, t):
    header, off = {"__metadata__": {"format": "pt"}}, 0
    for n, x in t.items():
        header[n] = {"dtype": "F32", "shape": list(x.shape), "data_offsets": [off, off + x.numel() * 4]}
        off += x.numel() * 4
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for x in t.values():
            f.write(x.contiguous().numpy().astype("<f4").tobytes())


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
        data = f.read()
    h.pop("__metadata__", None)
    out = {}
    for k, v in h.items():
        assert v["dtype"] == "F32", (k, v["dtype"])
        a, b = v["data_offsets"]
        out[k] = np.frombuffer(data[a:b], dtype="<f4").reshape(v["shape"])
    return out


def inv_freq(c):
    hd, theta = c["head_dim"], c["rope_theta"]
    f = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.int64).float() / hd))
    s = c.get("rope_scaling")
    if s:  # transformers' _compute_llama3_parameters
        lo_wl = s["original_max_position_embeddings"] / s["low_freq_factor"]
        hi_wl = s["original_max_position_embeddings"] / s["high_freq_factor"]
        wl = 2 * math.pi / f
        g = torch.where(wl > lo_wl, f / s["factor"], f)
        smooth = (s["original_max_position_embeddings"] / wl - s["low_freq_factor"]) / (
            s["high_freq_factor"] - s["low_freq_factor"])
        smoothed = (1 - smooth) * g / s["factor"] + smooth * g
        mid = ~(wl < hi_wl) & ~(wl > lo_wl)
        f = torch.where(mid, smoothed, g)
    return f


def rms(x, w, eps):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def loss_of(c, t, tok, tgt):
    B, T = tok.shape
    NH, NKV, hd, eps = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"], c["rms_norm_eps"]
    x = t["model.embed_tokens.weight"][tok]
    freqs = torch.arange(T).float()[:, None] * inv_freq(c)[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos(), emb.sin()
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    for l in range(c["num_hidden_layers"]):
        p = f"model.layers.{l}."
        h = rms(x, t[p + "input_layernorm.weight"], eps)

        def proj(n, heads):
            y = h @ t[p + f"self_attn.{n}_proj.weight"].T
            if p + f"self_attn.{n}_proj.bias" in t:
                y = y + t[p + f"self_attn.{n}_proj.bias"]
            return y.view(B, T, heads, hd).transpose(1, 2)

        q, k, v = proj("q", NH), proj("k", NKV), proj("v", NKV)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k, v = k.repeat_interleave(NH // NKV, dim=1), v.repeat_interleave(NH // NKV, dim=1)
        s = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
        a = torch.softmax(s.masked_fill(~mask, float("-inf")), dim=-1) @ v
        x = x + a.transpose(1, 2).reshape(B, T, NH * hd) @ t[p + "self_attn.o_proj.weight"].T
        h = rms(x, t[p + "post_attention_layernorm.weight"], eps)
        m = F.silu(h @ t[p + "mlp.gate_proj.weight"].T) * (h @ t[p + "mlp.up_proj.weight"].T)
        x = x + m @ t[p + "mlp.down_proj.weight"].T
    x = rms(x, t["model.norm.weight"], eps)
    head = t.get("lm_head.weight", t["model.embed_tokens.weight"])
    return F.cross_entropy((x @ head.T).view(B * T, -1), tgt.reshape(-1)).item()


def main():
    if sys.argv[1] == "same":
        a, b = (read_safetensors(os.path.join(d, "model.safetensors")) for d in sys.argv[2:4])
        if sorted(a) != sorted(b):
            sys.exit(f"tensor names differ: {sorted(set(a) ^ set(b))}")
        for k in a:
            if a[k].shape != b[k].shape or not np.array_equal(a[k], b[k]):
                sys.exit(f"{k}: differs")
        return
    d, kind, B, T = sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
    os.makedirs(d, exist_ok=True)
    torch.set_default_dtype(torch.float64)  # the reference in double: vram's fp32 is measured against it
    g = torch.Generator().manual_seed(7)
    c = config(kind)
    t = {k: v.float() for k, v in tensors(c, g).items()}
    json.dump(c, open(os.path.join(d, "config.json"), "w"), indent=1)
    write_safetensors(os.path.join(d, "model.safetensors"), t)
    n = 4 * B * T + 1
    tok = torch.randint(0, c["vocab_size"], (n,), generator=g)
    with open(os.path.join(d, "tokens.bin"), "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
        f.write(tok.numpy().astype("<u2").tobytes())
    rows = torch.stack([tok[b * T:b * T + T + 1] for b in range(B)])
    print(f"{loss_of(c, {k: v.double() for k, v in t.items()}, rows[:, :-1], rows[:, 1:]):.9f}")


if __name__ == "__main__":
    main()
