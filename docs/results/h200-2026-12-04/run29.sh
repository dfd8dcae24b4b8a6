#!/bin/bash
# GPU call 29 (2026-12-04; commit in the log): after the review's
# restructuring of the GEMV (cursor struct) and of prefill attention (one
# tile-geometry helper): the GPU tests, fixture verify, and the kernel
# benchmark at 1 and 512 rows (D2D ceiling in the same run) to show the
# kernels' times unchanged.
cd "$(dirname "$0")/../../.."
export LD_LIBRARY_PATH=$PWD/build-gpu-run/lib:$LD_LIBRARY_PATH
export FOUNDRY_TEST_DATA=$PWD/tests/data
b=build-gpu-run
exec > >(tee "$OUT/log29.txt") 2>&1
date -u; $b/foundry --version | head -2
for t in test_cuda_ops test_cuda_graph test_cuda test_cuda_faults; do
  s=$(date +%s)
  FOUNDRY_REQUIRE_CUDA=1 timeout 200 $b/$t > /tmp/$t.txt 2>&1
  echo "=== $t rc=$? ($(( $(date +%s) - s )) s)"
  grep -E '^\[  FAILED|^\[  PASSED|above' /tmp/$t.txt | head -10
done
for f in tests/data/llama3-*; do
  timeout 60 $b/foundry verify --model "$f/model" --reference "$f/expected.safetensors" --backend cuda 2>&1 | tail -1
done
echo "=== kernel bench rows 1"; timeout 60 $b/cuda_kernel_bench --report "$OUT/kb1.json" | tail -16
echo "=== kernel bench rows 512"; timeout 60 $b/cuda_kernel_bench --rows 512 --context 512 --repeats 30 --report "$OUT/kb512.json" | tail -15
date -u
