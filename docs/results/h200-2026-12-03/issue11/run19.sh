#!/bin/bash
# GPU call 19 (issue #12 section 5, one call): llama-3.2-3b streamed under a
# 512 MiB weight budget by foundry (full protocol) and by Hugging Face
# Accelerate CPU offload under the same budget (short protocol: it decodes
# about one token per second), then llama-3.1-8b under 1 GiB (full
# protocol).
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$PWD/build-gpu-run/lib:$LD_LIBRARY_PATH
b=build-gpu-run; m=/tmp/m3b; m8=/tmp/m8b
exec > >(tee "$OUT/log19.txt") 2>&1
date -u; $b/foundry --version | head -2
$b/foundry make-model --preset llama-3.2-3b --seed 1 --out "$m" | tail -1
echo "=== foundry 3b, 512 MiB, 2 buffers (token-ids-512x128-v1)"
timeout 100 $b/foundry infer-bench --model "$m" --backend cuda --weight-budget 512MiB --buffers 2 --report "$OUT/infer-3b-512m.json" | grep -vE "^report|^trace"
echo "=== accelerate offload 3b, 512 MiB (short: 16 generated, 1 + 3)"
timeout 200 python3 $b/scripts/torch_baseline.py --model "$m" --prompt-from "$OUT/infer-3b-512m.json" --offload-budget 512MiB --gen-tokens 16 --warmup 1 --iterations 3 --report "$OUT/torch-offload-3b-512m.json" 2>&1 | tail -4
echo "=== foundry 8b, 1 GiB, 2 buffers (token-ids-512x128-v1)"
$b/foundry make-model --preset llama-3.1-8b --seed 1 --out "$m8" | tail -1
timeout 220 $b/foundry infer-bench --model "$m8" --backend cuda --weight-budget 1GiB --buffers 2 --report "$OUT/infer-8b-1g.json" | grep -vE "^report|^trace"
date -u
