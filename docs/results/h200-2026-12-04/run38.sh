#!/bin/bash
# GPU call 38 (2026-12-04; commit in the log): same-call A/B in infer-bench
# of three variants of the commit (call38/*.diff): attention decode chunks
# of at least 8 positions (16 now), each GEMV item's mmas on two
# accumulators, and the many-row (prefill) ops as dependent launches too.
cd "$(dirname "$0")/../../.."
b=build-gpu-run; m=/tmp/m3b
exec > >(tee "$OUT/log38.txt") 2>&1
date -u; $b/foundry --version | sed -n 2p
$b/foundry make-model --preset llama-3.2-3b --seed 1 --out "$m" | tail -1
for r in 1 2; do
  for v in base chunk8 acc2 prefillpdl; do
    s=_$v; [ $v = base ] && s=
    echo "=== infer-bench $v (round $r)"
    timeout 100 $b/foundry$s infer-bench --model "$m" --backend cuda --report "$OUT/infer-$r-$v.json" | grep -E "end to end|prefill:|decode:"
  done
done
date -u
