#!/bin/bash
# GPU call 60 (2026-12-04): the decode GEMV at 5 instructions a word
# (branch deq5, commit in the log) against main: GPU op tests and
# test_cuda_graph of deq5, verify of the 3B against the CPU, the kernel
# bench's decode chain of both, infer-bench in three alternating rounds
# (generated ids compared). The binaries travel gzipped.
cd "$(dirname "$0")/../../.."
export LD_LIBRARY_PATH=$PWD/build-gpu-run/lib:$LD_LIBRARY_PATH
export FOUNDRY_TEST_DATA=$PWD/tests/data
ab=build-gpu-run/ab; m=/tmp/m3b; o=/tmp/o60; mkdir -p $o
gunzip $ab/*/*.gz && chmod +x $ab/*/*
exec > >(tee "$o/log60.txt") 2>&1
date -u
for v in base deq5; do echo "$v $($ab/$v/foundry --version | sed -n 2p)"; done
for t in test_cuda_ops test_cuda_graph; do
  s=$(date +%s)
  FOUNDRY_REQUIRE_CUDA=1 timeout 150 $ab/deq5/$t > $o/$t.txt 2>&1
  echo "=== deq5 $t rc=$? ($(( $(date +%s) - s )) s)"
  grep -E '^\[  FAILED|^\[  PASSED|^\[  ERROR|LINE|above|rror' $o/$t.txt | grep -v " 0 of " | head -20
done
grep -E "matmul_q4 .*\[1 x|norm_swiglu_q4 decode|matmul_add_q4 .*\[1 x" $o/test_cuda_ops.txt | head -12
$ab/base/foundry make-model --preset llama-3.2-3b --seed 1 --out "$m" | tail -1
for v in base deq5; do
  echo "=== $v verify 3b cuda against cpu"
  timeout 150 $ab/$v/foundry verify --model "$m" --backend cuda --against cpu 2>&1 | grep -E "relative|largest|steps|verify"
done
for v in base deq5; do
  echo "=== $v kernel bench rows 1, chain 20"
  timeout 90 $ab/$v/cuda_kernel_bench --chain 20 --repeats 30 --report "$o/kb-$v.json" | grep -E "matmul_q4|norm|residual|swiglu"
done
for r in 1 2 3; do
  for v in base deq5; do
    echo "=== $v infer-bench (round $r)"
    timeout 100 $ab/$v/foundry infer-bench --model "$m" --backend cuda --report "$o/infer-$v-$r.json" | grep -E "end to end|prefill:|decode:"
  done
done
echo "=== generated ids, deq5 against base"
python3 -c "import json; a=json.load(open('$o/infer-base-1.json'))['generated_ids']; b=json.load(open('$o/infer-deq5-1.json'))['generated_ids']; print(a==b, sum(x==y for x,y in zip(a,b)), 'of', len(a))"
date -u
gzip $o/test_cuda*.txt
tar -C /tmp -czf "$OUT/call60.tgz" o60
