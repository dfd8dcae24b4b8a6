#!/bin/bash
# GPU call 62 (2026-12-04): L2 prefetch hints of 128 bytes on the GEMV's
# scale and bias loads (sc) and on the prefill GEMM's cp.async copies (pf;
# pf256: 256 bytes) against main (the commit in the log; call62/*.diff):
# verify of sc and pf, the decode chain of main and sc, infer-bench in
# three alternating rounds (generated ids compared). The binaries travel
# gzipped.
cd "$(dirname "$0")/../../.."
export LD_LIBRARY_PATH=$PWD/build-gpu-run/lib:$LD_LIBRARY_PATH
export FOUNDRY_TEST_DATA=$PWD/tests/data
ab=build-gpu-run/ab; m=/tmp/m3b; o=/tmp/o62; mkdir -p $o
gunzip $ab/*/*.gz && chmod +x $ab/*/*
exec > >(tee "$o/log62.txt") 2>&1
date -u
for v in base sc pf pf256; do echo "$v $($ab/$v/foundry --version | sed -n 2p)"; done
$ab/base/foundry make-model --preset llama-3.2-3b --seed 1 --out "$m" | tail -1
for v in sc pf; do
  echo "=== $v verify 3b cuda against cpu"
  timeout 150 $ab/$v/foundry verify --model "$m" --backend cuda --against cpu 2>&1 | grep -E "relative|largest|steps|verify"
done
for v in base sc; do
  echo "=== $v kernel bench rows 1, chain 20"
  timeout 90 $ab/$v/cuda_kernel_bench --chain 20 --repeats 30 --report "$o/kb-$v.json" | grep -E "matmul_q4|norm\+|residual"
done
for r in 1 2 3; do
  for v in base sc pf pf256; do
    echo "=== $v infer-bench (round $r)"
    timeout 100 $ab/$v/foundry infer-bench --model "$m" --backend cuda --report "$o/infer-$v-$r.json" | grep -E "end to end|prefill:|decode:"
  done
done
echo "=== generated ids against base"
for v in sc pf pf256; do
  python3 -c "import json; a=json.load(open('$o/infer-base-1.json'))['generated_ids']; b=json.load(open('$o/infer-$v-1.json'))['generated_ids']; print('$v', a==b, sum(x==y for x,y in zip(a,b)), 'of', len(a))"
done
date -u
tar -C /tmp -czf "$OUT/call62.tgz" o62
