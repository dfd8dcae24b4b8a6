#!/bin/bash
# GPU call 75 (2026-12-04): call 72's ncu samples put ~100 of 591 in
# the scores' warp sums (12 of them, 5 shuffles each, per warp). wsum16
# (branch wsum16, call75/wsum16.diff): the 16 dots' warp sums at once (a
# lane keeps half its values at each xor step: 16 shuffles), the same
# addition tree for every sum (bitwise equal). test_cuda_ops, verify of
# the 3B, ncu's duration of one decode_kernel of each build, the chain
# bench's attention, infer-bench in three alternating rounds, ids compared.
cd "$(dirname "$0")/../../.."
export LD_LIBRARY_PATH=$PWD/build-gpu-run/lib:$LD_LIBRARY_PATH
export FOUNDRY_TEST_DATA=$PWD/tests/data
ab=build-gpu-run/ab; m=/tmp/m3b; o=/tmp/o75; mkdir -p $o
gunzip $ab/*/*.gz && chmod +x $ab/*/*
exec > >(tee "$o/log75.txt") 2>&1
date -u
for v in base wsum16; do echo "$v $($ab/$v/foundry --version | sed -n 2p)"; done
FOUNDRY_REQUIRE_CUDA=1 timeout 300 $ab/wsum16/test_cuda_ops > $o/ops-wsum16.txt 2>&1
echo "=== wsum16 test_cuda_ops rc=$?"
grep -E '^\[  FAILED|^\[  PASSED|^\[  ERROR|LINE' $o/ops-wsum16.txt | head
$ab/base/foundry make-model --preset llama-3.2-3b --seed 1 --out "$m" | tail -1
echo "=== wsum16 verify 3b cuda against cpu"
timeout 150 $ab/wsum16/foundry verify --model "$m" --backend cuda --against cpu 2>&1 | grep -E "relative|largest|steps|verify"
for v in base wsum16; do
  echo "=== $v ncu decode_kernel"
  timeout 120 ncu --clock-control none --graph-profiling node --section SpeedOfLight --section WarpStateStats -k regex:decode_kernel --launch-skip 250 --launch-count 1 $ab/$v/foundry infer-bench --model "$m" --backend cuda --warmup 0 --iterations 1 --report $o/ncu-$v.json 2>&1 | grep -E "Duration|Warp Cycles Per Issued|Elapsed Cycles"
done
for v in base wsum16; do
  echo "=== $v kernel bench rope_attention, chain 20"
  timeout 90 $ab/$v/cuda_kernel_bench --chain 20 --repeats 30 --report "$o/kb-$v.json" | grep -E "attention"
done
for r in 1 2 3; do
  for v in base wsum16; do
    echo "=== $v infer-bench (round $r)"
    timeout 100 $ab/$v/foundry infer-bench --model "$m" --backend cuda --report "$o/infer-$v-$r.json" | grep -E "end to end|decode:"
  done
done
python3 -c "import json; a=json.load(open('$o/infer-base-1.json'))['generated_ids']; b=json.load(open('$o/infer-wsum16-1.json'))['generated_ids']; print('wsum16 ids as base:', a==b)"
date -u
tar -C /tmp -czf "$OUT/call75.tgz" o75
