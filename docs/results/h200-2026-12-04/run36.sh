#!/bin/bash
# GPU call 36 (2026-12-04; commit in the log): decode A/B in one call: the
# commit against variants of it (call36/*.diff) without the streaming LM
# head, without the GEMV's vectorized staging, and without both; three
# alternating rounds of infer-bench, and the kernel bench's decode rows
# alone (L2 flushed) for each.
cd "$(dirname "$0")/../../.."
export LD_LIBRARY_PATH=$PWD/build-gpu-run/lib:$LD_LIBRARY_PATH
b=build-gpu-run; m=/tmp/m3b
exec > >(tee "$OUT/log36.txt") 2>&1
date -u; $b/foundry --version | sed -n 2p
vs="base nostream nostaging nostream+nostaging"
for v in $vs; do
  s=_$v; [ $v = base ] && s=
  echo "=== kernel bench $v rows 1 alone"
  timeout 60 $b/cuda_kernel_bench$s --repeats 50 | grep -E "lm_head|\+"
done
$b/foundry make-model --preset llama-3.2-3b --seed 1 --out "$m" | tail -1
for r in 1 2 3; do
  for v in $vs; do
    s=_$v; [ $v = base ] && s=
    echo "=== infer-bench $v (round $r)"
    timeout 100 $b/foundry$s infer-bench --model "$m" --backend cuda --report "$OUT/infer-$r-${v/+/-}.json" | grep -E "end to end|decode:"
  done
done
date -u
