#!/bin/bash
# GPU call 57 (2026-12-04): the branches swiglu2 (one GEMV item covers gate
# and up) and lmhead4 (4 items in flight in the 8-warp GEMV blocks; lm5, lm6:
# 5 and 6 (lm6 built, not run), the one-line sed of GEMV stages) against main (the commits in
# the log): GPU op tests and verify of sw and lm4, infer-bench in three
# alternating rounds (the generated ids compared). The binaries travel
# gzipped.
cd "$(dirname "$0")/../../.."
export LD_LIBRARY_PATH=$PWD/build-gpu-run/lib:$LD_LIBRARY_PATH
export FOUNDRY_TEST_DATA=$PWD/tests/data
ab=build-gpu-run/ab; m=/tmp/m3b; o=/tmp/o57; mkdir -p $o
gunzip $ab/*/*.gz && chmod +x $ab/*/*
exec > >(tee "$o/log57.txt") 2>&1
date -u
for v in base sw lm4 lm5 lm6; do echo "$v $($ab/$v/foundry --version | sed -n 2p)"; done
pids=""
for v in sw lm4; do
  (FOUNDRY_REQUIRE_CUDA=1 timeout 200 $ab/$v/test_cuda_ops > $o/test_cuda_ops-$v.txt 2>&1; echo "rc=$?" >> $o/test_cuda_ops-$v.txt) &
  pids="$pids $!"
done
wait $pids # (a bare wait also waits for the tee above: call 57's first run hung there)
for v in sw lm4; do
  echo "=== $v test_cuda_ops $(tail -1 $o/test_cuda_ops-$v.txt)"
  grep -E '^\[  FAILED|^\[  PASSED|^\[  ERROR|LINE|above|Error' $o/test_cuda_ops-$v.txt | grep -v " 0 of " | head -30
done
$ab/base/foundry make-model --preset llama-3.2-3b --seed 1 --out "$m" | tail -1
for v in sw lm4; do
  echo "=== $v verify 3b cuda against cpu"
  timeout 150 $ab/$v/foundry verify --model "$m" --backend cuda --against cpu 2>&1 | grep -E "relative|largest|steps|verify"
done
for r in 1 2 3; do
  for v in base sw lm4 lm5; do
    echo "=== $v infer-bench (round $r)"
    timeout 100 $ab/$v/foundry infer-bench --model "$m" --backend cuda --report "$o/infer-$v-$r.json" | grep -E "end to end|prefill:|decode:"
  done
done
echo "=== generated ids equal to base's"
for v in sw lm4 lm5; do
  python3 -c "import json,sys; a=json.load(open('$o/infer-base-1.json'))['generated_ids']; b=json.load(open('$o/infer-$v-1.json'))['generated_ids']; print('$v', a==b)"
done
date -u
gzip $o/test_cuda_ops-*.txt
tar -C /tmp -czf "$OUT/call57.tgz" o57
