#!/bin/bash
# GPU call 41 (2026-12-04; commit in the log): what a decode token costs
# besides the kernels' bodies: a timing-only build (call41/skipall.diff)
# in which every GEMV and attention kernel returns right after
# fdy_grid_wait (143 launches remain, with the embedding and the argmax);
# two alternating rounds against the commit.
cd "$(dirname "$0")/../../.."
b=build-gpu-run; m=/tmp/m3b
exec > >(tee "$OUT/log41.txt") 2>&1
date -u; $b/foundry --version | sed -n 2p
$b/foundry make-model --preset llama-3.2-3b --seed 1 --out "$m" | tail -1
for r in 1 2; do
  for v in base skipall; do
    s=_$v; [ $v = base ] && s=
    echo "=== infer-bench $v (round $r)"
    timeout 100 $b/foundry$s infer-bench --model "$m" --backend cuda --report "$OUT/infer-$r-$v.json" | grep -E "end to end|prefill:|decode:"
  done
done
date -u
