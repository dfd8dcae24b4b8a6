#!/bin/bash
# GPU call 40 (2026-12-04; commit in the log): ids_only sessions, A/B in
# one call: the commit's infer-bench (its session copies back only the next
# id) against a build that still copies the logits (call40/logitsout.diff),
# three alternating rounds.
cd "$(dirname "$0")/../../.."
b=build-gpu-run; m=/tmp/m3b
exec > >(tee "$OUT/log40.txt") 2>&1
date -u; $b/foundry --version | sed -n 2p
$b/foundry make-model --preset llama-3.2-3b --seed 1 --out "$m" | tail -1
for r in 1 2 3; do
  for v in base logitsout; do
    s=_$v; [ $v = base ] && s=
    echo "=== infer-bench $v (round $r)"
    timeout 100 $b/foundry$s infer-bench --model "$m" --backend cuda --report "$OUT/infer-$r-$v.json" | grep -E "end to end|prefill:|decode:"
  done
done
date -u
