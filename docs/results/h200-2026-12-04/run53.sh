#!/bin/bash
# GPU call 53 (2026-12-04): attention decode in blocks of 8 warps (two per
# SM) with chunks of 32 positions (a256c32) or 16 (a256c16), against main
# (the commit in the log; call53/*.diff): GPU op tests and verify of each,
# the decode chain, infer-bench in three alternating rounds. The binaries
# travel gzipped.
cd "$(dirname "$0")/../../.."
export LD_LIBRARY_PATH=$PWD/build-gpu-run/lib:$LD_LIBRARY_PATH
export FOUNDRY_TEST_DATA=$PWD/tests/data
ab=build-gpu-run/ab; m=/tmp/m3b; o=/tmp/o53; mkdir -p $o
gunzip $ab/*/*.gz && chmod +x $ab/*/*
exec > >(tee "$o/log53.txt") 2>&1
date -u; $ab/base/foundry --version | sed -n 2p
for v in a256c32 a256c16; do
  s=$(date +%s)
  FOUNDRY_REQUIRE_CUDA=1 timeout 200 $ab/$v/test_cuda_ops > $o/test_cuda_ops-$v.txt 2>&1
  echo "=== $v test_cuda_ops rc=$? ($(( $(date +%s) - s )) s)"
  grep -E '^\[  FAILED|^\[  PASSED|^\[  ERROR|LINE|above|Error' $o/test_cuda_ops-$v.txt | grep -v " 0 of " | head -30
done
$ab/base/foundry make-model --preset llama-3.2-3b --seed 1 --out "$m" | tail -1
for v in a256c32 a256c16; do
  echo "=== $v verify 3b cuda against cpu"
  timeout 150 $ab/$v/foundry verify --model "$m" --backend cuda --against cpu 2>&1 | grep -E "relative|largest|steps|verify"
done
for v in base a256c32 a256c16; do
  echo "=== $v kernel bench rows 1, chain 20"
  timeout 90 $ab/$v/cuda_kernel_bench --chain 20 --repeats 30 --report "$o/kb-$v.json" | grep -E "attention"
done
for r in 1 2 3; do
  for v in base a256c32 a256c16; do
    echo "=== $v infer-bench (round $r)"
    timeout 100 $ab/$v/foundry infer-bench --model "$m" --backend cuda --report "$o/infer-$v-$r.json" | grep -E "end to end|prefill:|decode:"
  done
done
date -u
tar -C /tmp -czf "$OUT/call53.tgz" o53
