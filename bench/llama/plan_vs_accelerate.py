#!/usr/bin/env python3
"""`vram plan --hf` on the published config.json of each Llama-family preset, beside accelerate's
estimate-memory figures (weights only, and its "training with Adam" rule of 4x the weights in the dtype).

  python3 bench/llama/plan_vs_accelerate.py [VRAM] [--seq 2048] [--batch 1]

Prints a Markdown table: parameters, accelerate's bf16 weights and its Adam estimate, and vram's exact
plan of a bf16 AdamW training step (fp32 master and state) with the bytes of each role at the peak."""
import json
import os
import subprocess
import sys
import tempfile

L3 = {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
      "original_max_position_embeddings": 8192}
CONFIGS = {  # the fields of the published config.json files that shape the model
    "llama3.2-1b": dict(model_type="llama", hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                        num_attention_heads=32, num_key_value_heads=8, head_dim=64, vocab_size=128256,
                        max_position_embeddings=131072, rms_norm_eps=1e-5, rope_theta=500000.0,
                        rope_scaling=L3, tie_word_embeddings=True),
    "llama3.2-3b": dict(model_type="llama", hidden_size=3072, intermediate_size=8192, num_hidden_layers=28,
                        num_attention_heads=24, num_key_value_heads=8, head_dim=128, vocab_size=128256,
                        max_position_embeddings=131072, rms_norm_eps=1e-5, rope_theta=500000.0,
                        rope_scaling=L3, tie_word_embeddings=True),
    "llama3.1-8b": dict(model_type="llama", hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                        num_attention_heads=32, num_key_value_heads=8, vocab_size=128256,
                        max_position_embeddings=131072, rms_norm_eps=1e-5, rope_theta=500000.0,
                        rope_scaling=dict(L3, factor=8.0), tie_word_embeddings=False),
    "smollm2-135m": dict(model_type="llama", hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                         num_attention_heads=9, num_key_value_heads=3, vocab_size=49152,
                         max_position_embeddings=8192, rms_norm_eps=1e-5, rope_theta=100000.0,
                         tie_word_embeddings=True),
    "smollm2-360m": dict(model_type="llama", hidden_size=960, intermediate_size=2560, num_hidden_layers=32,
                         num_attention_heads=15, num_key_value_heads=5, vocab_size=49152,
                         max_position_embeddings=8192, rms_norm_eps=1e-5, rope_theta=100000.0,
                         tie_word_embeddings=True),
    "qwen2.5-0.5b": dict(model_type="qwen2", hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                         num_attention_heads=14, num_key_value_heads=2, vocab_size=151936,
                         max_position_embeddings=32768, rms_norm_eps=1e-6, rope_theta=1000000.0,
                         tie_word_embeddings=True),
}


def gib(b):
    return f"{b / 2**30:.2f}"


def main():
    args = sys.argv[1:]
    vram = args[0] if args and not args[0].startswith("--") else "build/vram"
    seq = int(args[args.index("--seq") + 1]) if "--seq" in args else 2048
    batch = int(args[args.index("--batch") + 1]) if "--batch" in args else 1
    print(f"B={batch}, T={seq}; GiB; accelerate: weights in bf16 and 4x that for Adam training; vram: the plan of a "
          f"bf16 AdamW step (fp32 master and state), its peak and the roles at the peak\n")
    print("| model | params | accelerate bf16 weights | accelerate Adam | vram peak | params | master | grads | optim | acts | temp |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as d:
        for name, c in CONFIGS.items():
            path = os.path.join(d, name + ".json")
            json.dump(c, open(path, "w"))
            r = subprocess.run([vram, "plan", "--hf", path, "--batch", str(batch), "--seq", str(seq),
                                "--precision", "bf16", "--json"], capture_output=True, text=True)
            if r.returncode:
                print(f"| {name} | vram plan failed: {r.stderr.strip()} |")
                continue
            p = json.loads(r.stdout)
            n = p["model"]["params"]
            at = {k: v["at_peak"] for k, v in p["roles"].items()}
            print(f"| {name} | {n / 1e9:.3f} B | {gib(2 * n)} | {gib(8 * n)} | {gib(p['peak']['bytes'])} | "
                  + " | ".join(gib(at.get(k, 0)) for k in ("params", "master", "grads", "optim", "acts", "temp")) + " |")


if __name__ == "__main__":
    main()
