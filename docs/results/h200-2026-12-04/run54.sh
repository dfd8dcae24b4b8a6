#!/bin/bash
# GPU call 54 (2026-12-04): main with the attention decode in 8-warp blocks
# of 32 positions (the commit in the log): every GPU test, verify on every
# fixture and the 3B against the CPU; then attention in 16-warp blocks of
# 64 positions (a512c64, call54/a512c64.diff) against it: its GPU op
# tests and verify, the decode chain, infer-bench in three alternating
# rounds. The binaries travel gzipped.
cd "$(dirname "$0")/../../.."
export LD_LIBRARY_PATH=$PWD/build-gpu-run/lib:$LD_LIBRARY_PATH
export FOUNDRY_TEST_DATA=$PWD/tests/data
ab=build-gpu-run/ab; b=$ab/base; m=/tmp/m3b; o=/tmp/o54; mkdir -p $o
gunzip $ab/*/*.gz && chmod +x $ab/*/*
exec > >(tee "$o/log54.txt") 2>&1
date -u; $b/foundry --version | sed -n 2p
for t in test_cuda_ops test_cuda_graph test_cuda test_cuda_faults; do
  s=$(date +%s)
  FOUNDRY_REQUIRE_CUDA=1 timeout 200 $b/$t > $o/$t.txt 2>&1
  echo "=== $t rc=$? ($(( $(date +%s) - s )) s)"
  grep -E '^\[  FAILED|^\[  PASSED|^\[  ERROR|LINE|above' $o/$t.txt | grep -v " 0 of " | head -20
done
for sc in host_wait drain; do
  FOUNDRY_REQUIRE_CUDA=1 timeout 60 $b/test_cuda_lost $sc > /tmp/l.txt 2>&1; echo "=== test_cuda_lost $sc rc=$?"
done
echo "=== fixtures verify --backend cuda"
for f in tests/data/llama3-*; do
  timeout 60 $b/foundry verify --model "$f/model" --reference "$f/expected.safetensors" --backend cuda 2>&1 | tail -1
done
$b/foundry make-model --preset llama-3.2-3b --seed 1 --out "$m" | tail -1
for v in base a512c64; do
  echo "=== $v verify 3b cuda against cpu"
  timeout 150 $ab/$v/foundry verify --model "$m" --backend cuda --against cpu 2>&1 | grep -E "relative|largest|steps|verify"
done
s=$(date +%s)
FOUNDRY_REQUIRE_CUDA=1 timeout 200 $ab/a512c64/test_cuda_ops > $o/test_cuda_ops-a512c64.txt 2>&1
echo "=== a512c64 test_cuda_ops rc=$? ($(( $(date +%s) - s )) s)"
grep -E '^\[  FAILED|^\[  PASSED|^\[  ERROR|LINE|above' $o/test_cuda_ops-a512c64.txt | grep -v " 0 of " | head -20
for v in base a512c64; do
  echo "=== $v kernel bench rows 1, chain 20"
  timeout 90 $ab/$v/cuda_kernel_bench --chain 20 --repeats 30 --report "$o/kb-$v.json" | grep -E "attention"
done
for r in 1 2 3; do
  for v in base a512c64; do
    echo "=== $v infer-bench (round $r)"
    timeout 100 $ab/$v/foundry infer-bench --model "$m" --backend cuda --report "$o/infer-$v-$r.json" | grep -E "end to end|prefill:|decode:"
  done
done
date -u
tar -C /tmp -czf "$OUT/call54.tgz" o54
