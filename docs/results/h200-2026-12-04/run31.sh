#!/bin/bash
# GPU call 31 (2026-12-04; commit in the log): where a decode kernel's time
# goes: the kernel bench per launch alone (L2 flushed), in a graph chain of
# 20 dependent launches (weights in L2 after the first), and with L2 warm;
# and a variant build (call31/variant-grid1.diff: the layer GEMVs on one
# block per SM, so that the next GEMV's blocks fit beside them and issue
# their weight loads before the wait) against the same commit's build.
cd "$(dirname "$0")/../../.."
export LD_LIBRARY_PATH=$PWD/build-gpu-run/lib:$LD_LIBRARY_PATH
b=build-gpu-run; m=/tmp/m3b
exec > >(tee "$OUT/log31.txt") 2>&1
date -u; $b/foundry --version | sed -n 2p; $b/foundry_grid1 --version | sed -n 2p
for v in "" _grid1; do
  for mode in "--chain 1" "--chain 20" "--chain 20 --l2 warm"; do
    echo "=== kernel bench$v rows 1 $mode"
    timeout 90 $b/cuda_kernel_bench$v $mode --repeats 50 | grep -E "median|d2d|matmul|rmsnorm|add|rope_attention|argmax"
  done
done
$b/foundry make-model --preset llama-3.2-3b --seed 1 --out "$m" | tail -1
for r in 1 2; do
  for v in "" _grid1; do
    echo "=== infer-bench$v (round $r)"
    timeout 100 $b/foundry$v infer-bench --model "$m" --backend cuda --report "$OUT/infer$v-$r.json" | grep -E "end to end|prefill:|decode:"
  done
done
echo "=== verify grid1 against cpu"
timeout 150 $b/foundry_grid1 verify --model "$m" --backend cuda --against cpu 2>&1 | grep -E "relative|steps|verify"
date -u
