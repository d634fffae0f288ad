#!/usr/bin/python3
"""Convert GPT-2 weights between PyTorch state dicts and llm.c model files.

llm.c's file (what vram reads and writes with vr_llmc_load / vr_llmc_save):
256 int32 header ([0] magic 20240326, [1] version 3, [2] maxT, [3] V, [4] L,
[5] NH, [6] C, [7] Vp), then fp32 tensors in this order, weights (out, in):
  wte (Vp,C) wpe (maxT,C) ln1w (L,C) ln1b (L,C) qkvw (L,3C,C) qkvb (L,3C)
  attprojw (L,C,C) attprojb (L,C) ln2w (L,C) ln2b (L,C) fcw (L,4C,C) fcb (L,4C)
  fcprojw (L,C,4C) fcprojb (L,C) lnfw (C) lnfb (C)
The classifier is tied to wte; rows V..Vp of wte are padding (zeros).

PyTorch side, read and written:
  nanogpt  nanoGPT's names ("transformer.h.0.attn.c_attn.weight", nn.Linear,
           weights (out, in)); a file is a raw state dict or nanoGPT's checkpoint
           {"model": state_dict, "model_args": {...}}.
  hf       Hugging Face GPT2LMHeadModel: the same names, but Conv1D weights are
           (in, out). A directory means pytorch_model.bin + config.json.
Reading detects the layout from c_attn's shape, strips "_orig_mod." / "module."
prefixes, treats missing biases (nanoGPT bias=False) as zeros, and refuses an
untied lm_head.

Usage (Debian's python3 with python3-torch):
  tools/llmc_ckpt.py from-llmc model.bin out.pt [--layout nanogpt|hf]
  tools/llmc_ckpt.py from-llmc model.bin hf_dir/ --layout hf
  tools/llmc_ckpt.py to-llmc in.pt|hf_dir/ model.bin [--n-head N] [--padded-vocab Vp]
  tools/llmc_ckpt.py selftest
"""
import argparse
import json
import os
import struct
import sys
import tempfile

import numpy as np
import torch

MAGIC, VERSION = 20240326, 3
TENSORS = ["wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
           "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"]
# llm.c per-layer tensor -> nanoGPT name inside transformer.h.{l}.
LAYER_KEYS = {
    "ln1w": "ln_1.weight", "ln1b": "ln_1.bias",
    "qkvw": "attn.c_attn.weight", "qkvb": "attn.c_attn.bias",
    "attprojw": "attn.c_proj.weight", "attprojb": "attn.c_proj.bias",
    "ln2w": "ln_2.weight", "ln2b": "ln_2.bias",
    "fcw": "mlp.c_fc.weight", "fcb": "mlp.c_fc.bias",
    "fcprojw": "mlp.c_proj.weight", "fcprojb": "mlp.c_proj.bias",
}
CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")


class ConvertError(Exception):
    pass


def shapes(maxT, V, Vp, L, NH, C):
    """The 16 tensor shapes in file order."""
    del V, NH
    return [(Vp, C), (maxT, C), (L, C), (L, C), (L, 3 * C, C), (L, 3 * C), (L, C, C), (L, C),
            (L, C), (L, C), (L, 4 * C, C), (L, 4 * C), (L, C, 4 * C), (L, C), (C,), (C,)]


# ---- llm.c files --------------------------------------------------------------

def read_llmc(path):
    """Returns (config dict, {llm.c tensor name: float32 tensor})."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 1024:
        raise ConvertError(f"{path}: {len(raw)} bytes is too small for the llm.c header")
    h = struct.unpack("<256i", raw[:1024])
    if h[0] != MAGIC:
        raise ConvertError(f"{path}: wrong magic {h[0]} (expected {MAGIC})")
    if h[1] != VERSION:
        raise ConvertError(f"{path}: unsupported version {h[1]} (expected {VERSION}, fp32)")
    cfg = dict(maxT=h[2], V=h[3], L=h[4], NH=h[5], C=h[6], Vp=h[7])
    shp = shapes(**cfg)
    count = sum(int(np.prod(s)) for s in shp)
    if len(raw) != 1024 + 4 * count:
        raise ConvertError(f"{path}: file is {len(raw)} bytes but its header implies {1024 + 4 * count}")
    flat = np.frombuffer(raw, dtype="<f4", offset=1024)
    out, at = {}, 0
    for name, s in zip(TENSORS, shp):
        n = int(np.prod(s))
        out[name] = torch.from_numpy(flat[at:at + n].copy()).view(*s)
        at += n
    return cfg, out


def write_llmc(path, cfg, tensors):
    shp = shapes(**cfg)
    header = [0] * 256
    header[:8] = [MAGIC, VERSION, cfg["maxT"], cfg["V"], cfg["L"], cfg["NH"], cfg["C"], cfg["Vp"]]
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<256i", *header))
        for name, s in zip(TENSORS, shp):
            t = tensors[name].detach().to(torch.float32).contiguous()
            if tuple(t.shape) != s:
                raise ConvertError(f"{path}: {name} has shape {tuple(t.shape)}, expected {s}")
            f.write(t.numpy().astype("<f4").tobytes())
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


# ---- PyTorch state dicts --------------------------------------------------------

def load_torch(path):
    """Returns (state_dict, model_args or {}) from a .pt file or an HF directory."""
    args = {}
    if os.path.isdir(path):
        conf = os.path.join(path, "config.json")
        if os.path.exists(conf):
            with open(conf) as f:
                args = json.load(f)
        path = os.path.join(path, "pytorch_model.bin")
    obj = torch.load(path, map_location="cpu")
    if isinstance(obj, dict) and "model" in obj and isinstance(obj["model"], dict):
        args = dict(obj.get("model_args") or {}, **args)
        obj = obj["model"]
    sd = {}
    for k, v in obj.items():
        for prefix in ("_orig_mod.", "module."):
            if k.startswith(prefix):
                k = k[len(prefix):]
        if not k.startswith("transformer.") and not k.startswith("lm_head."):
            k = "transformer." + k  # HF GPT2Model (no LM head)
        sd[k] = v
    return sd, args


def state_dict_to_llmc(sd, n_head=None, padded_vocab=None):
    """nanoGPT or HF state dict -> (config, llm.c tensors)."""
    wte = sd["transformer.wte.weight"].float()
    V, C = wte.shape
    maxT = sd["transformer.wpe.weight"].shape[0]
    L = 0
    while f"transformer.h.{L}.ln_1.weight" in sd:
        L += 1
    if L == 0:
        raise ConvertError("no transformer blocks (transformer.h.0.*) in the state dict")
    if n_head is None:
        raise ConvertError("the number of heads is not in the file: pass --n-head")
    if C % n_head:
        raise ConvertError(f"--n-head {n_head} does not divide n_embd {C}")
    hf = tuple(sd["transformer.h.0.attn.c_attn.weight"].shape) == (C, 3 * C)
    head = sd.get("lm_head.weight")
    if head is not None and not torch.equal(head.float(), wte):
        raise ConvertError("lm_head.weight differs from transformer.wte.weight; llm.c ties them")
    Vp = padded_vocab or (V + 127) // 128 * 128
    if Vp < V:
        raise ConvertError(f"--padded-vocab {Vp} is smaller than the vocabulary {V}")

    def get(key, shape):
        t = sd.get(key)
        if t is None:
            if key.endswith(".bias"):
                return torch.zeros(shape)  # nanoGPT bias=False
            raise ConvertError(f"missing {key}")
        t = t.float()
        if hf and any(key.endswith(c) for c in CONV1D):
            t = t.t()
        if tuple(t.shape) != tuple(shape):
            raise ConvertError(f"{key} has shape {tuple(t.shape)}, expected {tuple(shape)}")
        return t

    cfg = dict(maxT=maxT, V=V, Vp=Vp, L=L, NH=n_head, C=C)
    shp = dict(zip(TENSORS, shapes(**cfg)))
    out = {"wte": torch.zeros(Vp, C), "wpe": get("transformer.wpe.weight", shp["wpe"])}
    out["wte"][:V] = wte
    for name, key in LAYER_KEYS.items():
        out[name] = torch.stack([get(f"transformer.h.{l}.{key}", shp[name][1:]) for l in range(L)])
    out["lnfw"] = get("transformer.ln_f.weight", (C,))
    out["lnfb"] = get("transformer.ln_f.bias", (C,))
    return cfg, out


def llmc_to_state_dict(cfg, t, layout="nanogpt"):
    """llm.c tensors -> state dict in nanoGPT or HF layout (lm_head tied to wte)."""
    wte = t["wte"][:cfg["V"]].clone()
    sd = {"transformer.wte.weight": wte, "transformer.wpe.weight": t["wpe"].clone()}
    for l in range(cfg["L"]):
        for name, key in LAYER_KEYS.items():
            w = t[name][l].clone()
            if layout == "hf" and key in CONV1D:
                w = w.t().contiguous()
            sd[f"transformer.h.{l}.{key}"] = w
    sd["transformer.ln_f.weight"] = t["lnfw"].clone()
    sd["transformer.ln_f.bias"] = t["lnfb"].clone()
    sd["lm_head.weight"] = wte
    return sd


def model_args(cfg):
    return dict(n_layer=cfg["L"], n_head=cfg["NH"], n_embd=cfg["C"], block_size=cfg["maxT"],
                vocab_size=cfg["V"], bias=True, dropout=0.0)


def hf_config(cfg):
    return {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": cfg["V"],
            "n_positions": cfg["maxT"], "n_ctx": cfg["maxT"], "n_embd": cfg["C"], "n_layer": cfg["L"],
            "n_head": cfg["NH"], "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5,
            "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0, "tie_word_embeddings": True}


# ---- commands ---------------------------------------------------------------------

def from_llmc(src, dst, layout, raw=False):
    cfg, t = read_llmc(src)
    sd = llmc_to_state_dict(cfg, t, layout)
    if dst.endswith("/") or os.path.isdir(dst):
        os.makedirs(dst, exist_ok=True)
        torch.save(sd, os.path.join(dst, "pytorch_model.bin"))
        with open(os.path.join(dst, "config.json"), "w") as f:
            json.dump(hf_config(cfg), f, indent=2)
    else:
        torch.save(sd if raw else {"model": sd, "model_args": model_args(cfg)}, dst)
    return cfg


def to_llmc(src, dst, n_head=None, padded_vocab=None):
    sd, args = load_torch(src)
    n_head = n_head or args.get("n_head")
    cfg, t = state_dict_to_llmc(sd, n_head, padded_vocab)
    write_llmc(dst, cfg, t)
    return cfg


def gpt2_logits(sd, idx, n_head, layout):
    """A plain GPT-2 forward over a state dict, for checking layouts agree."""
    import torch.nn.functional as F

    def lin(x, key):
        w, b = sd[key + ".weight"], sd[key + ".bias"]
        return x @ w + b if layout == "hf" else F.linear(x, w, b)

    T = idx.shape[1]
    C = sd["transformer.wte.weight"].shape[1]
    x = sd["transformer.wte.weight"][idx] + sd["transformer.wpe.weight"][:T]
    l = 0
    while f"transformer.h.{l}.ln_1.weight" in sd:
        p = f"transformer.h.{l}."
        h = F.layer_norm(x, (C,), sd[p + "ln_1.weight"], sd[p + "ln_1.bias"])
        q, k, v = lin(h, p + "attn.c_attn").split(C, dim=2)
        B = x.shape[0]
        q, k, v = (z.view(B, T, n_head, C // n_head).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / (C // n_head) ** 0.5
        att = att.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), float("-inf"))
        y = (att.softmax(-1) @ v).transpose(1, 2).reshape(B, T, C)
        x = x + lin(y, p + "attn.c_proj")
        h = F.layer_norm(x, (C,), sd[p + "ln_2.weight"], sd[p + "ln_2.bias"])
        x = x + lin(F.gelu(lin(h, p + "mlp.c_fc"), approximate="tanh"), p + "mlp.c_proj")
        l += 1
    x = F.layer_norm(x, (C,), sd["transformer.ln_f.weight"], sd["transformer.ln_f.bias"])
    return x @ sd["lm_head.weight"].t()


def selftest():
    """nanoGPT -> llm.c -> nanoGPT and HF -> llm.c -> HF are exact, and both
    layouts of one llm.c file compute the same logits."""
    torch.manual_seed(0)
    cfg = dict(maxT=16, V=50, Vp=64, L=2, NH=2, C=8)
    t = {n: torch.randn(*s) for n, s in zip(TENSORS, shapes(**cfg))}
    t["wte"][cfg["V"]:] = 0
    with tempfile.TemporaryDirectory() as d:
        a, b = os.path.join(d, "a.bin"), os.path.join(d, "b.bin")
        write_llmc(a, cfg, t)
        for layout in ("nanogpt", "hf"):
            pt = os.path.join(d, f"{layout}.pt")
            from_llmc(a, pt, layout)
            to_llmc(pt, b, padded_vocab=cfg["Vp"])
            assert open(a, "rb").read() == open(b, "rb").read(), f"{layout} round trip differs"
        hf_dir = os.path.join(d, "hf") + "/"
        from_llmc(a, hf_dir, "hf")
        to_llmc(hf_dir, b, padded_vocab=cfg["Vp"])
        assert open(a, "rb").read() == open(b, "rb").read(), "HF directory round trip differs"
        # nanoGPT bias=False: missing biases become zeros.
        sd = llmc_to_state_dict(cfg, t)
        nobias = {k: v for k, v in sd.items() if not k.endswith(".bias")}
        _, t2 = state_dict_to_llmc(nobias, 2, 64)
        assert torch.count_nonzero(t2["qkvb"]) == 0 and torch.equal(t2["qkvw"], t["qkvw"])
        # An untied head is refused.
        sd["lm_head.weight"] = sd["lm_head.weight"] + 1
        try:
            state_dict_to_llmc(sd, 2, 64)
            raise AssertionError("untied lm_head accepted")
        except ConvertError:
            pass
    idx = torch.randint(0, cfg["V"], (2, 7))
    ref = gpt2_logits(llmc_to_state_dict(cfg, t, "nanogpt"), idx, cfg["NH"], "nanogpt")
    hf = gpt2_logits(llmc_to_state_dict(cfg, t, "hf"), idx, cfg["NH"], "hf")
    assert torch.allclose(ref, hf, atol=1e-5), "HF layout computes different logits"
    print("llmc_ckpt selftest: ok")


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("from-llmc", help="llm.c model file -> PyTorch")
    f.add_argument("src")
    f.add_argument("dst", help="a .pt file, or a directory (HF: pytorch_model.bin + config.json)")
    f.add_argument("--layout", choices=["nanogpt", "hf"], default="nanogpt")
    f.add_argument("--raw", action="store_true", help="save the bare state dict, no model_args")
    t = sub.add_parser("to-llmc", help="PyTorch -> llm.c model file")
    t.add_argument("src")
    t.add_argument("dst")
    t.add_argument("--n-head", type=int, help="heads, when the file does not say")
    t.add_argument("--padded-vocab", type=int, help="Vp (default: vocab rounded up to 128)")
    sub.add_parser("selftest", help="round-trip checks")
    a = ap.parse_args(argv)
    try:
        if a.cmd == "from-llmc":
            cfg = from_llmc(a.src, a.dst, a.layout, a.raw)
        elif a.cmd == "to-llmc":
            cfg = to_llmc(a.src, a.dst, a.n_head, a.padded_vocab)
        else:
            selftest()
            return 0
    except (ConvertError, KeyError, OSError) as e:
        print(f"llmc_ckpt: {e}", file=sys.stderr)
        return 1
    print(f"{a.src} -> {a.dst}: L={cfg['L']} NH={cfg['NH']} C={cfg['C']} V={cfg['V']} Vp={cfg['Vp']} "
          f"maxT={cfg['maxT']}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
