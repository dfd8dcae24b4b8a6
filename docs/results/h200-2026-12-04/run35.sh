#!/bin/bash
# GPU call 35 (2026-12-04; commit in the log): the cluster attention
# reverted, the prefill GEMM's 128x96 at two blocks per SM for q/o and
# down: GPU tests, verify, the kernel bench at 512 rows, infer-bench; and
# attention decode with chunks of at least 32 or 64 positions (variants of
# the same commit, call35/*.diff).
cd "$(dirname "$0")/../../.."
export LD_LIBRARY_PATH=$PWD/build-gpu-run/lib:$LD_LIBRARY_PATH
export FOUNDRY_TEST_DATA=$PWD/tests/data
b=build-gpu-run; m=/tmp/m3b
exec > >(tee "$OUT/log35.txt") 2>&1
date -u; $b/foundry --version | sed -n 2p
for t in test_cuda_ops test_cuda_graph test_cuda test_cuda_faults; do
  s=$(date +%s)
  FOUNDRY_REQUIRE_CUDA=1 timeout 300 $b/$t > /tmp/$t.txt 2>&1
  echo "=== $t rc=$? ($(( $(date +%s) - s )) s)"
  grep -E '^\[  FAILED|^\[  PASSED|^\[  ERROR|LINE|above' /tmp/$t.txt | grep -v " 0 of " | head -20
done
for v in "" _chunk32 _chunk64; do
  echo "=== kernel bench$v rows 1 (alone, L2 flushed) and chain 20: attention"
  timeout 60 $b/cuda_kernel_bench$v --repeats 50 | grep -E "attention"
  timeout 60 $b/cuda_kernel_bench$v --repeats 30 --chain 20 | grep -E "attention"
done
echo "=== kernel bench rows 512 (matmuls)"
timeout 200 $b/cuda_kernel_bench --rows 512 --context 512 --repeats 30 --report "$OUT/kb512.json" | grep -E "matmul|\*|attention"
echo "=== fixtures verify --backend cuda"
for f in tests/data/llama3-*; do
  timeout 60 $b/foundry verify --model "$f/model" --reference "$f/expected.safetensors" --backend cuda 2>&1 | tail -1
done
$b/foundry make-model --preset llama-3.2-3b --seed 1 --out "$m" | tail -1
echo "=== verify 3b cuda against cpu"
timeout 150 $b/foundry verify --model "$m" --backend cuda --against cpu 2>&1 | grep -E "relative|largest|steps|verify"
for v in base chunk32 chunk64 base chunk32 chunk64; do
  s=_$v; [ $v = base ] && s=
  echo "=== infer-bench $v"
  timeout 100 $b/foundry$s infer-bench --model "$m" --backend cuda --report "$OUT/infer-$v-$(date +%s%N).json" | grep -E "end to end|prefill:|decode:"
done
date -u
