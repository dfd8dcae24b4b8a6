#!/bin/bash
# GPU call 45 (2026-12-04; commit in the log): after the review's mends
# (the never-chosen k-halves GEMM shape removed, bench refactors): every
# GPU test, the 3B against the CPU, the prefill kernel bench and
# infer-bench once.
cd "$(dirname "$0")/../../.."
export LD_LIBRARY_PATH=$PWD/build-gpu-run/lib:$LD_LIBRARY_PATH
export FOUNDRY_TEST_DATA=$PWD/tests/data
b=build-gpu-run; m=/tmp/m3b
exec > >(tee "$OUT/log45.txt") 2>&1
date -u; $b/foundry --version | sed -n 2p
for t in test_cuda_ops test_cuda_graph test_cuda test_cuda_faults; do
  s=$(date +%s)
  FOUNDRY_REQUIRE_CUDA=1 timeout 300 $b/$t > /tmp/$t.txt 2>&1
  echo "=== $t rc=$? ($(( $(date +%s) - s )) s)"
  grep -E '^\[  FAILED|^\[  PASSED|^\[  ERROR|LINE|above' /tmp/$t.txt | grep -v " 0 of " | head -20
done
$b/foundry make-model --preset llama-3.2-3b --seed 1 --out "$m" | tail -1
echo "=== verify 3b cuda against cpu"
timeout 150 $b/foundry verify --model "$m" --backend cuda --against cpu 2>&1 | grep -E "relative|steps|verify"
echo "=== kernel bench rows 512"
timeout 200 $b/cuda_kernel_bench --rows 512 --context 512 --repeats 10 | grep -E "d2d|matmul|\+|\*"
timeout 100 $b/foundry infer-bench --model "$m" --backend cuda --report "$OUT/infer.json" | grep -E "end to end|prefill:|decode:|decode bandwidth"
date -u
