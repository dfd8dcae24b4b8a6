#!/bin/bash
# GPU call 30 (2026-12-04; commit in the log): L2 prefetch hints (each
# decode kernel asks L2 for the next op's weights): the GPU tests that
# cover them, verify, and infer-bench with the hints on and off.
cd "$(dirname "$0")/../../.."
export LD_LIBRARY_PATH=$PWD/build-gpu-run/lib:$LD_LIBRARY_PATH
export FOUNDRY_TEST_DATA=$PWD/tests/data
b=build-gpu-run; m=/tmp/m3b
exec > >(tee "$OUT/log30.txt") 2>&1
date -u; $b/foundry --version | head -2
for t in test_cuda test_cuda_graph test_cuda_ops; do
  s=$(date +%s)
  FOUNDRY_REQUIRE_CUDA=1 timeout 200 $b/$t > /tmp/$t.txt 2>&1
  echo "=== $t rc=$? ($(( $(date +%s) - s )) s)"
  grep -E '^\[  FAILED|^\[  PASSED|^\[  ERROR|LINE|bitwise' /tmp/$t.txt | head -24
done
$b/foundry make-model --preset llama-3.2-3b --seed 1 --out "$m" | tail -1
echo "=== verify 3b cuda against cpu"
timeout 150 $b/foundry verify --model "$m" --backend cuda --against cpu 2>&1 | grep -E "relative|largest|steps|verify"
for r in 1 2; do
  for p in on off; do
    echo "=== infer-bench resident, l2 prefetch $p (round $r)"
    timeout 100 $b/foundry infer-bench --model "$m" --backend cuda --l2-prefetch $p --report "$OUT/infer-l2-$p-$r.json" | grep -E "end to end|prefill:|decode:|decode bandwidth"
  done
done
echo "=== kernel bench rows 1 (context 640)"; timeout 60 $b/cuda_kernel_bench --report "$OUT/kb1.json" | tail -16
date -u
