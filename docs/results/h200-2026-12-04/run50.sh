#!/bin/bash
# GPU call 50 (2026-12-04): the layer GEMVs in blocks of 16 warps, one
# per SM, the LM head in two blocks of 8 (branch wide, call50/wideall.diff)
# against main (the commit in the log), and two narrower choices on top of
# it: 16 warps for in >= 8192 only (down; widedown) and for every layer
# GEMV but the SwiGLU one (widenosw). GPU op tests of wideall, the decode
# chain, infer-bench in three alternating rounds.
cd "$(dirname "$0")/../../.."
export LD_LIBRARY_PATH=$PWD/build-gpu-run/lib:$LD_LIBRARY_PATH
export FOUNDRY_TEST_DATA=$PWD/tests/data
ab=build-gpu-run/ab; m=/tmp/m3b; o=/tmp/o50; mkdir -p $o
exec > >(tee "$o/log50.txt") 2>&1
date -u; $ab/base/foundry --version | sed -n 2p; $ab/wideall/foundry --version | sed -n 2p
s=$(date +%s)
FOUNDRY_REQUIRE_CUDA=1 timeout 200 $ab/wideall/test_cuda_ops > $o/test_cuda_ops-wideall.txt 2>&1
echo "=== wideall test_cuda_ops rc=$? ($(( $(date +%s) - s )) s)"
grep -E '^\[  FAILED|^\[  PASSED|^\[  ERROR|LINE|above|Error' $o/test_cuda_ops-wideall.txt | grep -v " 0 of " | head -30
$ab/base/foundry make-model --preset llama-3.2-3b --seed 1 --out "$m" | tail -1
echo "=== wideall verify 3b cuda against cpu"
timeout 150 $ab/wideall/foundry verify --model "$m" --backend cuda --against cpu 2>&1 | grep -E "relative|largest|steps|verify"
for v in base wideall; do
  echo "=== $v kernel bench rows 1, chain 20"
  timeout 90 $ab/$v/cuda_kernel_bench --chain 20 --repeats 30 --report "$o/kb-$v.json" | grep -E "matmul|norm\+|residual"
done
for r in 1 2 3; do
  for v in base wideall widedown widenosw; do
    echo "=== $v infer-bench (round $r)"
    timeout 100 $ab/$v/foundry infer-bench --model "$m" --backend cuda --report "$o/infer-$v-$r.json" | grep -E "end to end|prefill:|decode:"
  done
done
date -u
tar -C /tmp -czf "$OUT/call50.tgz" o50
