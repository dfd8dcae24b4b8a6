#!/bin/bash
# GPU call 43 (2026-12-04; commit in the log): the final commit's GPU tests
# after the test refactoring (one MATMUL_Q4 op builder in test_cuda_ops),
# and infer-bench once.
cd "$(dirname "$0")/../../.."
export LD_LIBRARY_PATH=$PWD/build-gpu-run/lib:$LD_LIBRARY_PATH
export FOUNDRY_TEST_DATA=$PWD/tests/data
b=build-gpu-run; m=/tmp/m3b
exec > >(tee "$OUT/log43.txt") 2>&1
date -u; $b/foundry --version | sed -n 2p
for t in test_cuda_ops test_cuda_graph test_cuda test_cuda_faults; do
  s=$(date +%s)
  FOUNDRY_REQUIRE_CUDA=1 timeout 300 $b/$t > /tmp/$t.txt 2>&1
  echo "=== $t rc=$? ($(( $(date +%s) - s )) s)"
  grep -E '^\[  FAILED|^\[  PASSED|^\[  ERROR|LINE|above' /tmp/$t.txt | grep -v " 0 of " | head -20
done
$b/foundry make-model --preset llama-3.2-3b --seed 1 --out "$m" | tail -1
timeout 100 $b/foundry infer-bench --model "$m" --backend cuda --report "$OUT/infer.json" | grep -E "end to end|prefill:|decode:"
date -u
