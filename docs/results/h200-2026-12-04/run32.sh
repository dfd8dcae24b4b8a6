#!/bin/bash
# GPU call 32 (2026-12-04; commit in the log): GEMV variants built from the
# same commit (call32/*.diff): acc2 (each item's 8 mmas into two
# accumulators: two dependent chains of 4), occ3 (3 blocks per SM: at most
# 85 registers, spills), held4 (x held as 4 quads per thread), and their
# combinations; each in the kernel bench's graph chain and in infer-bench.
cd "$(dirname "$0")/../../.."
export LD_LIBRARY_PATH=$PWD/build-gpu-run/lib:$LD_LIBRARY_PATH
b=build-gpu-run; m=/tmp/m3b
exec > >(tee "$OUT/log32.txt") 2>&1
date -u; $b/foundry --version | sed -n 2p
vs="base acc2 occ3 acc2+occ3 held4+occ3"
for v in $vs; do
  s=_$v; [ $v = base ] && s=
  echo "=== kernel bench $v rows 1 --chain 20"
  timeout 90 $b/cuda_kernel_bench$s --chain 20 --repeats 30 | grep -E "matmul"
done
$b/foundry make-model --preset llama-3.2-3b --seed 1 --out "$m" | tail -1
for v in $vs base; do
  s=_$v; [ $v = base ] && s=
  echo "=== infer-bench $v"
  timeout 100 $b/foundry$s infer-bench --model "$m" --backend cuda --report "$OUT/infer-$v-$RANDOM.json" | grep -E "end to end|decode:"
done
date -u
