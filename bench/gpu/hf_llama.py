#!/usr/bin/env python3
"""Llama training steps with Hugging Face transformers, the peer of `vram train --model llama --device cuda`.

LlamaForCausalLM built from a config (no download; random init, transformers' own), SDPA attention,
bf16 autocast over fp32 weights, fused AdamW (betas 0.9/0.95, eps 1e-8, weight decay 0.1), global-norm
clipping 1.0, random tokens; eager or torch.compile.

Prints one JSON line: mode, batch, seq, median step ms (steps after the first 3), tokens/s, every step's
ms, peak memory_allocated / memory_reserved, parameters, torch/transformers versions, losses.

  python3 bench/gpu/hf_llama.py --preset llama3.2-1b --mode compile --batch 8 --seq 2048 [--steps 12]
"""
import argparse
import json
import statistics
import time

import torch

PRESETS = {  # the published config.json fields that shape the model
    "llama3.2-1b": dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
                        num_key_value_heads=8, head_dim=64, vocab_size=128256, rms_norm_eps=1e-5,
                        rope_theta=500000.0, tie_word_embeddings=True, max_position_embeddings=131072,
                        rope_scaling={"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                                      "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}),
    "smollm2-135m": dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
                         num_key_value_heads=3, head_dim=64, vocab_size=49152, rms_norm_eps=1e-5,
                         rope_theta=100000.0, tie_word_embeddings=True, max_position_embeddings=8192),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="llama3.2-1b", choices=sorted(PRESETS))
    ap.add_argument("--mode", choices=["eager", "compile"], default="compile")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--lr", type=float, default=3e-4)
    a = ap.parse_args()

    import transformers
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(**PRESETS[a.preset], attn_implementation="sdpa", use_cache=False)
    model = LlamaForCausalLM(cfg).cuda()
    n_params = sum(p.numel() for p in model.parameters())
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8, fused=True)

    def step(x, y):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=x, labels=y).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    fwd = torch.compile(step) if a.mode == "compile" else step
    V = cfg.vocab_size
    times, losses = [], []
    for i in range(a.steps):
        x = torch.randint(0, V, (a.batch, a.seq), device="cuda")
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss = fwd(x, x)
        losses.append(float(loss))  # synchronizes
        times.append((time.perf_counter() - t0) * 1000)
    ms = statistics.median(times[3:]) if len(times) > 3 else times[-1]
    print(json.dumps({"system": f"hf-{a.mode}", "preset": a.preset, "batch": a.batch, "seq": a.seq,
                      "params": n_params, "ms": round(ms, 2), "tokens_per_s": round(a.batch * a.seq / ms * 1000),
                      "times_ms": [round(v, 3) for v in times], "torch": torch.__version__,
                      "transformers": transformers.__version__, "device": torch.cuda.get_device_name(),
                      "max_allocated_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2),
                      "max_reserved_gib": round(torch.cuda.max_memory_reserved() / 2**30, 2),
                      "losses": [round(v, 4) for v in losses]}))


if __name__ == "__main__":
    main()
