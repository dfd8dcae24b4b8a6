#!/bin/bash
# GPU call 56 (2026-12-04; commit in the log): after a refactor of the F16
# conversion shared by the cache loads (cuda_device.h): the GPU op tests,
# verify of the 3B against the CPU, one infer-bench.
cd "$(dirname "$0")/../../.."
export LD_LIBRARY_PATH=$PWD/build-gpu-run/lib:$LD_LIBRARY_PATH
export FOUNDRY_TEST_DATA=$PWD/tests/data
b=build-gpu-run; m=/tmp/m3b
gunzip $b/*.gz && chmod +x $b/foundry $b/test_cuda_ops
exec > >(tee "$OUT/log56.txt") 2>&1
date -u; $b/foundry --version | sed -n 2p
s=$(date +%s)
FOUNDRY_REQUIRE_CUDA=1 timeout 120 $b/test_cuda_ops > /tmp/ops.txt 2>&1
echo "=== test_cuda_ops rc=$? ($(( $(date +%s) - s )) s)"
grep -E '^\[  FAILED|^\[  PASSED|^\[  ERROR|LINE|above' /tmp/ops.txt | grep -v " 0 of " | head -20
$b/foundry make-model --preset llama-3.2-3b --seed 1 --out "$m" | tail -1
timeout 60 $b/foundry verify --model "$m" --backend cuda --against cpu 2>&1 | grep -E "relative|largest|steps|verify"
timeout 60 $b/foundry infer-bench --model "$m" --backend cuda --report "$OUT/infer.json" | grep -E "end to end|prefill:|decode:"
date -u
