#!/bin/bash
# GPU call 46 (2026-12-04): the cp.async-ring GEMV (helper branch gemv6,
# b5ecda7) against main (d7575d3): its GPU op tests, the decode kernel
# chain (20 dependent launches) and infer-bench in alternating rounds; a
# variant with a ring of at least 3 stages (gemv6s3).
cd "$(dirname "$0")/../../.."
export LD_LIBRARY_PATH=$PWD/build-gpu-run/lib:$LD_LIBRARY_PATH
export FOUNDRY_TEST_DATA=$PWD/tests/data
ab=build-gpu-run/ab; m=/tmp/m3b
exec > >(tee "$OUT/log46.txt") 2>&1
date -u; nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
s=$(date +%s)
FOUNDRY_REQUIRE_CUDA=1 timeout 200 $ab/gemv6/test_cuda_ops > /tmp/ops.txt 2>&1
echo "=== gemv6 test_cuda_ops rc=$? ($(( $(date +%s) - s )) s)"
grep -E '^\[  FAILED|^\[  PASSED|^\[  ERROR|LINE|above|Error' /tmp/ops.txt | grep -v " 0 of " | head -30
gzip -c /tmp/ops.txt > "$OUT/test_cuda_ops-gemv6.txt.gz"
$ab/base/foundry make-model --preset llama-3.2-3b --seed 1 --out "$m" | tail -1
for v in base gemv6 gemv6s3; do
  echo "=== $v kernel bench rows 1, chain 20"
  timeout 90 $ab/$v/cuda_kernel_bench --chain 20 --repeats 30 --report "$OUT/kb-$v.json" | grep -vE "^report"
done
for r in 1 2; do
  for v in base gemv6 gemv6s3; do
    echo "=== $v infer-bench (round $r)"
    timeout 100 $ab/$v/foundry infer-bench --model "$m" --backend cuda --report "$OUT/infer-$v-$r.json" | grep -E "end to end|prefill:|decode:"
  done
done
date -u
