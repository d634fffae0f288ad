#!/usr/bin/env bash
# Element-granularity shards on 2 GPUs (issue #11): GPT-2 124M (wte is cut into pieces owned by both ranks) under
# ZeRO 1/2/3 and ZeRO 2/3 with --offload optim, losses beside one GPU at the same global batch, plan = allocated
# (the device arena: the summary's first plan_arena; the host's follows).
#   OUT=DIR bash bench/dist/pieces_check.sh      (repo root on the GPU machine, build-carry/ and .deps carried)
. scripts/gpu-setup.sh >/dev/null 2>&1
. "$(dirname "$0")/mon.sh" # $OUT made, multicast off, jl FILE
f="--device cuda --preset gpt2 --seq 1024 --precision bf16 --clip 1.0 --lr 6e-4 --lr-schedule constant --warmup 0 --attention vram --eval-every -1 --json"
build-carry/vram train $f --batch 16 --steps 12 > $out/one.txt 2>&1; echo "1 GPU: $(jl $out/one.txt)"
for z in 1 2 3; do timeout 120 build-carry/vram train $f --batch 8 --steps 12 --gpus 2 --zero $z > $out/z$z.txt 2>&1; echo "rc $? z$z: $(jl $out/z$z.txt)"; grep -o '"plan_arena":[0-9]*,"run_arena":[0-9]*' $out/z$z.txt | head -1; done
for z in 2 3; do timeout 120 build-carry/vram train $f --batch 8 --steps 6 --gpus 2 --zero $z --offload optim > $out/o$z.txt 2>&1; echo "rc $? offload z$z: $(jl $out/o$z.txt)"; grep -o '"plan_arena":[0-9]*,"run_arena":[0-9]*' $out/o$z.txt | head -1; done
build-carry/vram plan --preset gpt2 --gpus 2 --zero 3 --json | python3 -c "import json,sys; d=json.load(sys.stdin); print('pieces', d['graph'].get('pieces'))"
tail -3 $out/z3.txt | cut -c1-300
