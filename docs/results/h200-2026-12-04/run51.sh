#!/bin/bash
# GPU call 51 (2026-12-04): a GEMV block's items dealt to its warps round
# robin (branch balance, call51/bal.diff: balanced to one item when the
# warps do not divide a tile's 24 column steps) against main (the commit in
# the log), and with 16-warp blocks for more launches on top of it:
# gate/up + SwiGLU too (balsw) and every launch, the LM head too (balall).
# GPU op tests of bal and balall, verify, the decode chain, infer-bench in
# three alternating rounds. The binaries travel gzipped.
cd "$(dirname "$0")/../../.."
export LD_LIBRARY_PATH=$PWD/build-gpu-run/lib:$LD_LIBRARY_PATH
export FOUNDRY_TEST_DATA=$PWD/tests/data
ab=build-gpu-run/ab; m=/tmp/m3b; o=/tmp/o51; mkdir -p $o
gunzip $ab/*/*.gz
exec > >(tee "$o/log51.txt") 2>&1
date -u; for v in base bal; do $ab/$v/foundry --version | sed -n 2p; done
for v in bal balall; do
  s=$(date +%s)
  FOUNDRY_REQUIRE_CUDA=1 timeout 200 $ab/$v/test_cuda_ops > $o/test_cuda_ops-$v.txt 2>&1
  echo "=== $v test_cuda_ops rc=$? ($(( $(date +%s) - s )) s)"
  grep -E '^\[  FAILED|^\[  PASSED|^\[  ERROR|LINE|above|Error' $o/test_cuda_ops-$v.txt | grep -v " 0 of " | head -30
done
$ab/base/foundry make-model --preset llama-3.2-3b --seed 1 --out "$m" | tail -1
for v in bal balsw balall; do
  echo "=== $v verify 3b cuda against cpu"
  timeout 150 $ab/$v/foundry verify --model "$m" --backend cuda --against cpu 2>&1 | grep -E "relative|largest|steps|verify"
done
for v in base bal balsw balall; do
  echo "=== $v kernel bench rows 1, chain 20"
  timeout 90 $ab/$v/cuda_kernel_bench --chain 20 --repeats 30 --report "$o/kb-$v.json" | grep -E "matmul|norm\+|residual"
done
for r in 1 2 3; do
  for v in base bal balsw balall; do
    echo "=== $v infer-bench (round $r)"
    timeout 100 $ab/$v/foundry infer-bench --model "$m" --backend cuda --report "$o/infer-$v-$r.json" | grep -E "end to end|prefill:|decode:"
  done
done
date -u
tar -C /tmp -czf "$OUT/call51.tgz" o51
