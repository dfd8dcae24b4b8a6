#!/bin/bash
# GPU call 49 (2026-12-04): two GEMV variants against main (ff: the commit
# in the log): w16 (call49/w16.diff: blocks of 512 threads, one per SM,
# so that x is staged once per SM and a warp has half the column steps)
# and gemv5d (call49/gemv5d.diff: the cluster split of call 48 for down
# only, split 2). GPU op tests of w16, the decode chain, infer-bench in
# three alternating rounds.
cd "$(dirname "$0")/../../.."
export LD_LIBRARY_PATH=$PWD/build-gpu-run/lib:$LD_LIBRARY_PATH
export FOUNDRY_TEST_DATA=$PWD/tests/data
ab=build-gpu-run/ab; m=/tmp/m3b; o=/tmp/o49; mkdir -p $o
exec > >(tee "$o/log49.txt") 2>&1
date -u; $ab/base/foundry --version | sed -n 2p
s=$(date +%s)
FOUNDRY_REQUIRE_CUDA=1 timeout 200 $ab/w16/test_cuda_ops > $o/test_cuda_ops-w16.txt 2>&1
echo "=== w16 test_cuda_ops rc=$? ($(( $(date +%s) - s )) s)"
grep -E '^\[  FAILED|^\[  PASSED|^\[  ERROR|LINE|above|Error' $o/test_cuda_ops-w16.txt | grep -v " 0 of " | head -30
$ab/base/foundry make-model --preset llama-3.2-3b --seed 1 --out "$m" | tail -1
for v in base w16 gemv5d; do
  echo "=== $v kernel bench rows 1, chain 20"
  timeout 90 $ab/$v/cuda_kernel_bench --chain 20 --repeats 30 --report "$o/kb-$v.json" | grep -E "matmul|norm\+|residual"
done
for r in 1 2 3; do
  for v in base w16 gemv5d; do
    echo "=== $v infer-bench (round $r)"
    timeout 100 $ab/$v/foundry infer-bench --model "$m" --backend cuda --report "$o/infer-$v-$r.json" | grep -E "end to end|prefill:|decode:"
  done
done
date -u
tar -C /tmp -czf "$OUT/call49.tgz" o49
