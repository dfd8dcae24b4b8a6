#!/bin/bash
# GPU call 73 (2026-12-04): call 72's ncu samples put the attention
# decode's largest single stall on an indexed load of the rope's inverse
# frequencies from the kernel's parameters (lane-varying: served one
# address at a time) before a DMUL. rope1 (branch rope1, call73/rope1.diff):
# those loads with warp-uniform indices, and the scores' scale computed on
# the host. test_cuda_ops (the rope's bitwise checks), verify of the 3B,
# ncu's duration of one decode_kernel of each build, infer-bench in three
# alternating rounds, ids compared.
cd "$(dirname "$0")/../../.."
export LD_LIBRARY_PATH=$PWD/build-gpu-run/lib:$LD_LIBRARY_PATH
export FOUNDRY_TEST_DATA=$PWD/tests/data
ab=build-gpu-run/ab; m=/tmp/m3b; o=/tmp/o73; mkdir -p $o
gunzip $ab/*/*.gz && chmod +x $ab/*/*
exec > >(tee "$o/log73.txt") 2>&1
date -u
for v in base rope1; do echo "$v $($ab/$v/foundry --version | sed -n 2p)"; done
FOUNDRY_REQUIRE_CUDA=1 timeout 300 $ab/rope1/test_cuda_ops > $o/ops-rope1.txt 2>&1
echo "=== rope1 test_cuda_ops rc=$?"
grep -E '^\[  FAILED|^\[  PASSED|^\[  ERROR|LINE' $o/ops-rope1.txt | head
$ab/base/foundry make-model --preset llama-3.2-3b --seed 1 --out "$m" | tail -1
echo "=== rope1 verify 3b cuda against cpu"
timeout 150 $ab/rope1/foundry verify --model "$m" --backend cuda --against cpu 2>&1 | grep -E "relative|largest|steps|verify"
for v in base rope1; do
  echo "=== $v ncu decode_kernel"
  timeout 120 ncu --clock-control none --graph-profiling node --section SpeedOfLight --section WarpStateStats -k regex:decode_kernel --launch-skip 250 --launch-count 1 $ab/$v/foundry infer-bench --model "$m" --backend cuda --warmup 0 --iterations 1 --report $o/ncu-$v.json 2>&1 | grep -E "Duration|Warp Cycles Per Issued|Elapsed Cycles"
done
for v in base rope1; do
  echo "=== $v kernel bench rope_attention, chain 20"
  timeout 90 $ab/$v/cuda_kernel_bench --chain 20 --repeats 30 --report "$o/kb-$v.json" | grep -E "attention"
done
for r in 1 2 3; do
  for v in base rope1; do
    echo "=== $v infer-bench (round $r)"
    timeout 100 $ab/$v/foundry infer-bench --model "$m" --backend cuda --report "$o/infer-$v-$r.json" | grep -E "end to end|decode:"
  done
done
python3 -c "import json; a=json.load(open('$o/infer-base-1.json'))['generated_ids']; b=json.load(open('$o/infer-rope1-1.json'))['generated_ids']; print('rope1 ids as base:', a==b)"
date -u
tar -C /tmp -czf "$OUT/call73.tgz" o73
