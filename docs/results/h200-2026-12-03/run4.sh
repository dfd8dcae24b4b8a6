#!/bin/bash
# GPU call 4: tests with the unfenced kernel, an A/B of the checksum kernel
# with and without __threadfence_system (cuda_ceilings_fenced), and the
# benchmark runs recorded in docs/benchmark.md.
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$PWD/build-gpu-run/lib:$LD_LIBRARY_PATH
b=build-gpu-run
exec > >(tee "$OUT/log4.txt") 2>&1
date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
FOUNDRY_REQUIRE_CUDA=1 $b/test_cuda 2>&1 | tail -3; echo "test_cuda rc=${PIPESTATUS[0]}"
FOUNDRY_REQUIRE_CUDA=1 $b/test_bench_cuda 2>&1 | tail -2; echo "test_bench_cuda rc=${PIPESTATUS[0]}"
for round in 1 2; do
  echo "=== round $round: unfenced"; $b/cuda_ceilings 20
  echo "=== round $round: fenced"; $b/cuda_ceilings_fenced 20
done
run() { echo "=== foundry bench $*"; $b/foundry bench --no-progress "$@"; echo "rc=$?"; }
run --report $OUT/r-default.json --trace $OUT/t-default.json
run --compute-passes 104 --report $OUT/r-overlap104.json --trace $OUT/t-overlap104.json
run --host-mode staged --report $OUT/r-staged.json
run --layers 12 --weight-mib 256 --report $OUT/r-256.json
for r in $OUT/r-*.json; do python3 scripts/bench_summary.py "$r" | tail -1; echo "summary rc=$?"; done
command -v compute-sanitizer >/dev/null && FOUNDRY_REQUIRE_CUDA=1 timeout 120 compute-sanitizer --tool memcheck $b/test_cuda 2>&1 | tail -3
date -u
