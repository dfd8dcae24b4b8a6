#!/bin/bash
# GPU call 25 (2026-12-04; commit in the log): the tensor-core prefill
# attention and the prefill GEMM at two blocks per SM, correctness first
# (test_cuda_ops, test_cuda_graph, verify on the fixtures and the 3B
# checkpoint), then the kernel benchmark at 512 rows and infer-bench.
cd "$(dirname "$0")/../../.."
export LD_LIBRARY_PATH=$PWD/build-gpu-run/lib:$LD_LIBRARY_PATH
export FOUNDRY_TEST_DATA=$PWD/tests/data
b=build-gpu-run; m=/tmp/m3b
exec > >(tee "$OUT/log25.txt") 2>&1
date -u; $b/foundry --version | head -2
for t in test_cuda_ops test_cuda_graph; do
  s=$(date +%s)
  FOUNDRY_REQUIRE_CUDA=1 timeout 200 $b/$t > "$OUT/$t.txt" 2>&1
  echo "=== $t rc=$? ($(( $(date +%s) - s )) s)"
  grep -E '^\[  FAILED|^\[  PASSED|above|attention .*(d16|d48|d80|d128|512)|2080' "$OUT/$t.txt" | head -40
done
echo "=== kernel bench rows 512"; timeout 60 $b/cuda_kernel_bench --rows 512 --context 512 --repeats 30 --report "$OUT/kb512.json" | tail -15
echo "=== fixtures verify --backend cuda"
for f in tests/data/llama3-*; do
  timeout 60 $b/foundry verify --model "$f/model" --reference "$f/expected.safetensors" --backend cuda 2>&1 | tail -1
done
$b/foundry make-model --preset llama-3.2-3b --seed 1 --out "$m" | tail -1
echo "=== verify 3b cuda against cpu"
timeout 150 $b/foundry verify --model "$m" --backend cuda --against cpu 2>&1 | grep -E "relative|logits|largest|steps|verify"
echo "=== infer-bench resident"
timeout 100 $b/foundry infer-bench --model "$m" --backend cuda --report "$OUT/infer-res.json" | grep -E "end to end|prefill:|decode:|decode bandwidth|identical"
date -u
