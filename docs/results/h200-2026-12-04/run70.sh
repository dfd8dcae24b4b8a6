#!/bin/bash
# GPU call 70 (2026-12-04): (1) test_cuda then test_cuda_faults, ten times,
# every output kept (call 67 saw test_truncated_checkpoint_streamed die of
# SIGBUS once after test_cuda); (2) where attention decode's time goes
# inside the decode graph: timing-only builds (results wrong by design;
# /work/variants/attn_*.py, diffs in call70/) that return after q, k and v
# are staged (attn_qk), after the scores (attn_scores), after the
# weighted sum (attn_pv), before the counter (skip_combine), against main,
# infer-bench in two alternating rounds.
cd "$(dirname "$0")/../../.."
export LD_LIBRARY_PATH=$PWD/build-gpu-run/lib:$LD_LIBRARY_PATH
export FOUNDRY_TEST_DATA=$PWD/tests/data
b=build-gpu-run; ab=$b/ab; m=/tmp/m3b; o=/tmp/o70; mkdir -p $o
gunzip $b/*.gz $ab/*/*.gz && chmod +x $b/test_cuda* $ab/*/*
exec > >(tee "$o/log70.txt") 2>&1
date -u
for v in base attn_qk; do echo "$v $($ab/$v/foundry --version | sed -n 2p)"; done
for i in 1 2 3 4 5 6 7 8 9 10; do
  FOUNDRY_REQUIRE_CUDA=1 timeout 120 $b/test_cuda > $o/cuda-$i.txt 2>&1; r1=$?
  FOUNDRY_REQUIRE_CUDA=1 timeout 120 $b/test_cuda_faults > $o/faults-$i.txt 2>&1; r2=$?
  echo "=== round $i: test_cuda rc=$r1 $(grep -c '^\[       OK' $o/cuda-$i.txt) ok; test_cuda_faults rc=$r2 $(grep -c '^\[       OK' $o/faults-$i.txt) ok"
  grep -E "FAILED  \] test|ERROR|exception|packed" $o/faults-$i.txt | head -6
done
$ab/base/foundry make-model --preset llama-3.2-3b --seed 1 --out "$m" | tail -1
vs="base attn_qk attn_scores attn_pv skip_combine"
for r in 1 2; do
  for v in $vs; do
    echo "=== $v infer-bench (round $r)"
    timeout 100 $ab/$v/foundry infer-bench --model "$m" --backend cuda --report "$o/infer-$v-$r.json" | grep -E "decode:"
  done
done
date -u
tar -C /tmp -czf "$OUT/call70.tgz" o70
