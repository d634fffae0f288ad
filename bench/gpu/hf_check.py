#!/usr/bin/env python3
"""vram against transformers on Hugging Face directories (the GPU machine, offline):

For a small random LlamaForCausalLM (GQA, Llama 3 rope scaling, untied) and Qwen2ForCausalLM (q/k/v biases,
tied), saved with save_pretrained (safetensors): `vram eval --init DIR` on the CPU and on CUDA gives the loss
transformers computes (fp32) on the same batch; `vram train --init DIR --save OUT` trains a few steps, and
transformers' from_pretrained(OUT) gives the loss vram's eval reports for OUT. One line per check, and
"hf check: N failed" at the end (exit 1 when any failed).

  python3 bench/gpu/hf_check.py VRAM_BINARY OUTDIR
"""
import json
import os
import struct
import subprocess
import sys

import torch
import torch.nn.functional as F

vram, out = sys.argv[1], sys.argv[2]
B, T = 4, 128
failed = 0


def check(what, got, want, tol):
    global failed
    ok = abs(got - want) <= tol * abs(want)
    failed += not ok
    print(f"{'ok  ' if ok else 'FAIL'} {what}: vram {got:.7f} transformers {want:.7f} (rel {abs(got - want) / abs(want):.1e}, tol {tol:.0e})")


def hf_loss(model, rows):
    with torch.no_grad():
        logits = model(input_ids=rows[:, :-1].cuda()).logits.float()
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), rows[:, 1:].reshape(-1).cuda()).item()


def vram_eval(d, data, device):
    r = subprocess.run([vram, "eval", "--init", d, "--data", data, "--split", "all", "--batch", str(B), "--seq",
                        str(T), "--batches", "1", "--device", device, "--json"], capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f"vram eval {d} on {device}: {r.stderr.strip()}")
    return json.loads(r.stdout)["loss"]


def main():
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM
    os.makedirs(out, exist_ok=True)
    common = dict(hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
                  head_dim=64, vocab_size=1000, max_position_embeddings=512, rms_norm_eps=1e-5)
    kinds = {
        "llama": (LlamaForCausalLM, LlamaConfig(**common, num_key_value_heads=2, rope_theta=500000.0,
                                                 tie_word_embeddings=False,
                                                 rope_scaling={"rope_type": "llama3", "factor": 8.0,
                                                               "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                                               "original_max_position_embeddings": 64})),
        "qwen2": (Qwen2ForCausalLM, Qwen2Config(**common, num_key_value_heads=1, rope_theta=10000.0,
                                                 tie_word_embeddings=True)),
    }
    g = torch.Generator().manual_seed(3)
    n = 64 * B * T + 1
    tok = torch.randint(0, 1000, (n,), generator=g)
    data = os.path.join(out, "tokens.bin")
    with open(data, "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
        f.write(tok.numpy().astype("<u2").tobytes())
    rows = torch.stack([tok[b * T:b * T + T + 1] for b in range(B)])
    for name, (cls, cfg) in kinds.items():
        torch.manual_seed(0)
        cfg._attn_implementation = "eager"
        model = cls(cfg).float().cuda().eval()
        with torch.no_grad():  # larger weights than the default init: a loss far from log(V)
            for p in model.parameters():
                if p.dim() == 2:
                    p.mul_(4.0)
        d = os.path.join(out, name)
        model.save_pretrained(d, safe_serialization=True)
        want = hf_loss(model, rows)
        for device in ("cpu", "cuda"):
            check(f"{name}: eval --init (save_pretrained) on {device}", vram_eval(d, data, device), want, 1e-5)
        o = os.path.join(out, name + "_trained")
        r = subprocess.run([vram, "train", "--init", d, "--data", data, "--batch", str(B), "--seq", str(T),
                            "--steps", "5", "--lr", "1e-3", "--eval-every", "-1", "--device", "cuda", "--save", o],
                           capture_output=True, text=True)
        if r.returncode:
            raise SystemExit(f"vram train {name}: {r.stderr.strip()}")
        trained = cls.from_pretrained(o).float().cuda().eval()
        check(f"{name}: trained by vram, saved, from_pretrained", vram_eval(o, data, "cuda"), hf_loss(trained, rows),
              1e-5)
    print(f"hf check: {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
