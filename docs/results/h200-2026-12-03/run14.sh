#!/bin/bash
# GPU call 14 (issue #10 sections 2-4): on a make-model llama-3.2-3b
# checkpoint (random weights, written to /tmp in about 5 s), the CUDA
# backend against the CPU backend (`foundry verify --against cpu`: a 64-token
# prompt's logits within 2e-2, then 16 teacher-forced greedy steps),
# `foundry infer-bench --backend cuda` with the default protocol
# token-ids-512x128-v1, the transformers bf16 static-cache baseline on the
# same checkpoint and prompt ids (scripts/torch_baseline.py --prompt-from
# the infer-bench report), and scripts/compare_reports.py side by side.
# Binaries in build-gpu-run/ (foundry; lib/ holds libcmocka.so.0). Each
# stage has its own timeout so the whole call stays within about 5 minutes;
# a failing stage is reported and the next one still runs. The torch
# baseline compiled with torch.compile runs last, only with time left.
cd "$(dirname "$0")/../../.."
export LD_LIBRARY_PATH=$PWD/build-gpu-run/lib:$LD_LIBRARY_PATH
b=build-gpu-run
m=/tmp/llama-3.2-3b-run14
exec > >(tee "$OUT/log14.txt") 2>&1
start=$(date +%s)
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv
$b/foundry --version
python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)'

echo "=== make-model llama-3.2-3b"
rm -rf "$m"
time $b/foundry make-model --preset llama-3.2-3b --seed 1 --out "$m"
echo "rc=$?"

echo "=== verify --backend cuda --against cpu (64-token prompt, 16 steps)"
time timeout 120 $b/foundry verify --model "$m" --backend cuda --against cpu \
  --prompt-tokens 64 --steps 16 --seed 0
echo "verify rc=$?"

echo "=== infer-bench --backend cuda (token-ids-512x128-v1)"
time timeout 90 $b/foundry infer-bench --model "$m" --backend cuda \
  --report "$OUT/infer-foundry-cuda.json"
echo "infer-bench rc=$?"

echo "=== torch_baseline.py (transformers bf16, static cache, eager)"
if [ -s "$OUT/infer-foundry-cuda.json" ]; then
  from="--prompt-from $OUT/infer-foundry-cuda.json"
else
  from="--seed 0"
fi
time timeout 150 python3 scripts/torch_baseline.py --model "$m" $from \
  --report "$OUT/infer-torch-bf16.json"
echo "torch_baseline rc=$?"

echo "=== compare_reports.py"
python3 scripts/compare_reports.py "$OUT/infer-foundry-cuda.json" \
  "$OUT/infer-torch-bf16.json"
echo "compare rc=$?"

left=$((290 - ($(date +%s) - start)))
echo "=== torch_baseline.py --compile (${left} s left)"
if [ "$left" -gt 60 ] && [ -s "$OUT/infer-foundry-cuda.json" ]; then
  time timeout "$left" python3 scripts/torch_baseline.py --model "$m" \
    --prompt-from "$OUT/infer-foundry-cuda.json" --compile \
    --report "$OUT/infer-torch-bf16-compiled.json"
  echo "torch_baseline --compile rc=$?"
  [ -s "$OUT/infer-torch-bf16-compiled.json" ] &&
    python3 scripts/compare_reports.py "$OUT/infer-foundry-cuda.json" \
      "$OUT/infer-torch-bf16.json" "$OUT/infer-torch-bf16-compiled.json"
else
  echo "skipped"
fi
rm -rf "$m"
date -u
