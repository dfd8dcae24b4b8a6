#!/bin/bash
# GPU call 64 (2026-12-04): A/B of main (base) against four builds, each a
# branch: respre (the residual epilogue's first row loaded with x), prolog
# (respre + x scaled per 32-input chunk, the RMSNorm's 1/rms on the output
# rows: no block reduction before the items), comb1 (attention decode's
# combine asks for its first chunk of partials with (m, l)), lmtma (the LM
# head streamed through a shared-memory ring by bulk copies). GPU op tests
# of the three that change results or add kernels, verify of the 3B against
# the CPU, the decode chain, infer-bench in three alternating rounds,
# generated ids compared. The binaries travel gzipped.
cd "$(dirname "$0")/../../.."
export LD_LIBRARY_PATH=$PWD/build-gpu-run/lib:$LD_LIBRARY_PATH
export FOUNDRY_TEST_DATA=$PWD/tests/data
ab=build-gpu-run/ab; m=/tmp/m3b; o=/tmp/o64; mkdir -p $o
gunzip $ab/*/*.gz && chmod +x $ab/*/*
exec > >(tee "$o/log64.txt") 2>&1
date -u
vs="base respre prolog comb1 lmtma"
for v in $vs; do echo "$v $($ab/$v/foundry --version | sed -n 2p)"; done
pids=""
for v in prolog comb1 lmtma; do
  (FOUNDRY_REQUIRE_CUDA=1 timeout 300 $ab/$v/test_cuda_ops > $o/ops-$v.txt 2>&1; echo "rc=$?" >> $o/ops-$v.txt) &
  pids="$pids $!"
done
$ab/base/foundry make-model --preset llama-3.2-3b --seed 1 --out "$m" | tail -1
wait $pids
for v in prolog comb1 lmtma; do
  echo "=== $v test_cuda_ops $(tail -1 $o/ops-$v.txt)"
  grep -E '^\[  FAILED|^\[  PASSED|^\[  ERROR|LINE|above|stream|bitwise' $o/ops-$v.txt | grep -v " 0 of " | head -20
done
for v in prolog comb1 lmtma; do
  echo "=== $v verify 3b cuda against cpu"
  timeout 150 $ab/$v/foundry verify --model "$m" --backend cuda --against cpu 2>&1 | grep -E "relative|largest|steps|verify"
done
for v in $vs; do
  echo "=== $v kernel bench rows 1, chain 20"
  timeout 90 $ab/$v/cuda_kernel_bench --chain 20 --repeats 30 --report "$o/kb-$v.json" | grep -E "matmul_q4|norm|residual|swiglu|attention"
done
for r in 1 2 3; do
  for v in $vs; do
    echo "=== $v infer-bench (round $r)"
    timeout 100 $ab/$v/foundry infer-bench --model "$m" --backend cuda --report "$o/infer-$v-$r.json" | grep -E "end to end|prefill:|decode:"
  done
done
echo "=== generated ids against base"
for v in respre prolog comb1 lmtma; do
  python3 -c "import json; a=json.load(open('$o/infer-base-1.json'))['generated_ids']; b=json.load(open('$o/infer-$v-1.json'))['generated_ids']; print('$v', a==b, sum(x==y for x,y in zip(a,b)), 'of', len(a))"
done
date -u
tar -C /tmp -czf "$OUT/call64.tgz" o64
