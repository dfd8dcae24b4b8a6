#!/bin/bash
# GPU call 10: the final commit's GPU tests and a short benchmark with outputs.
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$PWD/build-gpu-run/lib:$LD_LIBRARY_PATH
b=build-gpu-run
date -u
FOUNDRY_REQUIRE_CUDA=1 $b/test_cuda 2>&1 | tail -1; echo "test_cuda rc=${PIPESTATUS[0]}"
FOUNDRY_REQUIRE_CUDA=1 $b/test_bench_cuda 2>&1 | tail -1; echo "test_bench_cuda rc=${PIPESTATUS[0]}"
$b/foundry bench --no-progress --iterations 3 --report $OUT/r.json --trace $OUT/t.json | tail -3; echo "bench rc=${PIPESTATUS[0]}"
python3 scripts/bench_summary.py $OUT/r.json | head -1
$b/foundry --version
