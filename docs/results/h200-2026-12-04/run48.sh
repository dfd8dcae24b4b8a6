#!/bin/bash
# GPU call 48 (2026-12-04): the decode GEMV split over K by thread-block
# clusters (helper branch gemv5, merged onto main as ab-gemv5, 025849c)
# against main (401448f, attention decode of call 47): its GPU op tests,
# verify against the CPU, the decode chain (every split of each one-row
# matmul kind), infer-bench in three alternating rounds.
cd "$(dirname "$0")/../../.."
export LD_LIBRARY_PATH=$PWD/build-gpu-run/lib:$LD_LIBRARY_PATH
export FOUNDRY_TEST_DATA=$PWD/tests/data
ab=build-gpu-run/ab; m=/tmp/m3b; o=/tmp/o48; mkdir -p $o
exec > >(tee "$o/log48.txt") 2>&1
date -u
s=$(date +%s)
FOUNDRY_REQUIRE_CUDA=1 timeout 200 $ab/gemv5/test_cuda_ops > $o/test_cuda_ops-gemv5.txt 2>&1
echo "=== gemv5 test_cuda_ops rc=$? ($(( $(date +%s) - s )) s)"
grep -E '^\[  FAILED|^\[  PASSED|^\[  ERROR|LINE|above|Error' $o/test_cuda_ops-gemv5.txt | grep -v " 0 of " | head -30
$ab/base/foundry make-model --preset llama-3.2-3b --seed 1 --out "$m" | tail -1
for v in base gemv5; do
  echo "=== $v verify 3b cuda against cpu"
  timeout 150 $ab/$v/foundry verify --model "$m" --backend cuda --against cpu 2>&1 | grep -E "relative|largest|steps|verify"
done
for v in base gemv5; do
  for c in 640; do
    echo "=== $v kernel bench rows 1, chain 20, context $c"
    timeout 90 $ab/$v/cuda_kernel_bench --chain 20 --repeats 30 --context $c --report "$o/kb-$v-$c.json" | grep -vE "^report"
  done
done
for r in 1 2 3; do
  for v in base gemv5; do
    echo "=== $v infer-bench (round $r)"
    timeout 100 $ab/$v/foundry infer-bench --model "$m" --backend cuda --report "$o/infer-$v-$r.json" | grep -E "end to end|prefill:|decode:"
  done
done
python3 - "$o" <<'PY'
import json, sys
o = sys.argv[1]
a = json.load(open(o + "/infer-base-1.json"))["generated_ids"]
b = json.load(open(o + "/infer-gemv5-1.json"))["generated_ids"]
print("=== generated ids identical (base, gemv5):", a == b)
PY
date -u
tar -C /tmp -czf "$OUT/call48.tgz" o48
