#!/bin/bash
# GPU call 65 (2026-12-04): A/B of main (base) against two builds, each a
# branch: vstage (attention decode stages the step's v row in shared memory
# with q and k, instead of reading it from L2 in the weighted sum) and comb2
# (vstage + the combine's first chunk of partials copied by cp.async with
# the (m, l) loads). GPU op tests, verify of the 3B against the CPU, the
# decode chain (now with norm+lm_head), infer-bench in three alternating
# rounds, generated ids compared. The binaries travel gzipped.
cd "$(dirname "$0")/../../.."
export LD_LIBRARY_PATH=$PWD/build-gpu-run/lib:$LD_LIBRARY_PATH
export FOUNDRY_TEST_DATA=$PWD/tests/data
ab=build-gpu-run/ab; m=/tmp/m3b; o=/tmp/o65; mkdir -p $o
gunzip $ab/*/*.gz && chmod +x $ab/*/*
exec > >(tee "$o/log65.txt") 2>&1
date -u
vs="base vstage comb2"
for v in $vs; do echo "$v $($ab/$v/foundry --version | sed -n 2p)"; done
pids=""
for v in vstage comb2; do
  (FOUNDRY_REQUIRE_CUDA=1 timeout 300 $ab/$v/test_cuda_ops > $o/ops-$v.txt 2>&1; echo "rc=$?" >> $o/ops-$v.txt) &
  pids="$pids $!"
done
$ab/base/foundry make-model --preset llama-3.2-3b --seed 1 --out "$m" | tail -1
wait $pids
for v in vstage comb2; do
  echo "=== $v test_cuda_ops $(tail -1 $o/ops-$v.txt)"
  grep -E '^\[  FAILED|^\[  PASSED|^\[  ERROR|LINE|above|stream|bitwise' $o/ops-$v.txt | grep -v " 0 of " | head -20
done
for v in vstage comb2; do
  echo "=== $v verify 3b cuda against cpu"
  timeout 150 $ab/$v/foundry verify --model "$m" --backend cuda --against cpu 2>&1 | grep -E "relative|largest|steps|verify"
done
for v in $vs; do
  echo "=== $v kernel bench rows 1, chain 20"
  timeout 90 $ab/$v/cuda_kernel_bench --chain 20 --repeats 30 --report "$o/kb-$v.json" | grep -E "matmul_q4|norm|residual|swiglu|attention|lm_head"
done
for r in 1 2 3; do
  for v in $vs; do
    echo "=== $v infer-bench (round $r)"
    timeout 100 $ab/$v/foundry infer-bench --model "$m" --backend cuda --report "$o/infer-$v-$r.json" | grep -E "end to end|prefill:|decode:"
  done
done
echo "=== generated ids against base"
for v in vstage comb2; do
  python3 -c "import json; a=json.load(open('$o/infer-base-1.json'))['generated_ids']; b=json.load(open('$o/infer-$v-1.json'))['generated_ids']; print('$v', a==b, sum(x==y for x,y in zip(a,b)), 'of', len(a))"
done
date -u
tar -C /tmp -czf "$OUT/call65.tgz" o65
