#!/bin/bash
# GPU call 12 (after "one engine", commit 3a6ef1d): Release binaries built
# with -DFOUNDRY_WERROR=ON from a clean clone, carried in build-gpu-run/:
# the CUDA tests (also under compute-sanitizer), the ceilings, the benchmark
# runs of docs/benchmark.md through the executor, and the executor overhead.
cd "$(dirname "$0")/../../.."
export LD_LIBRARY_PATH=$PWD/build-gpu-run/lib:$LD_LIBRARY_PATH
b=build-gpu-run
exec > >(tee "$OUT/log12.txt") 2>&1
date -u; nvidia-smi --query-gpu=name,driver_version,pcie.link.gen.current,pcie.link.width.current --format=csv
FOUNDRY_REQUIRE_CUDA=1 $b/test_cuda 2>&1 | tail -3; echo "test_cuda rc=${PIPESTATUS[0]}"
FOUNDRY_REQUIRE_CUDA=1 $b/test_bench_cuda 2>&1 | tail -2; echo "test_bench_cuda rc=${PIPESTATUS[0]}"
$b/cuda_ceilings 20
run() { echo "=== foundry bench --no-progress $*"; $b/foundry bench --no-progress "$@"; echo "rc=$?"; }
run --report $OUT/r-default.json
run --compute-passes 104 --report $OUT/r-overlap104.json --trace $OUT/t-overlap104.json
run --host-mode staged --report $OUT/r-staged.json
run --layers 12 --weight-mib 256 --report $OUT/r-256.json
echo "=== foundry bench --overhead"; $b/foundry bench --overhead --report $OUT/r-overhead.json; echo "rc=$?"
for r in $OUT/r-default.json $OUT/r-overlap104.json $OUT/r-staged.json $OUT/r-256.json; do python3 scripts/bench_summary.py "$r" | head -1; echo "summary rc=$?"; done
python3 scripts/trace_overlap.py $OUT/t-overlap104.json | tail -3
gzip -9 $OUT/t-overlap104.json
FOUNDRY_REQUIRE_CUDA=1 timeout 200 compute-sanitizer --tool memcheck --leak-check full $b/test_cuda 2>&1 | tail -4
date -u
