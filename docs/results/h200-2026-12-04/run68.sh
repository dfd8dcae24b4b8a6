#!/bin/bash
# GPU call 68 (2026-12-04): call 66's binaries (42edf34): call 67 saw
# test_truncated_checkpoint_streamed die of SIGBUS (it passed in calls 63
# and 66); five runs of it alone with its whole output, then the whole of
# test_cuda_faults once more.
cd "$(dirname "$0")/../../.."
export LD_LIBRARY_PATH=$PWD/build-gpu-run/lib:$LD_LIBRARY_PATH
export FOUNDRY_TEST_DATA=$PWD/tests/data
b=build-gpu-run
gunzip $b/*.gz && chmod +x $b/foundry $b/cuda_kernel_bench $b/test_cuda*
exec > >(tee "$OUT/log68.txt") 2>&1
date -u; $b/foundry --version | head -2; ulimit -l; df -h /tmp | tail -1
for i in 1 2 3 4 5; do
  echo "=== run $i"
  FOUNDRY_REQUIRE_CUDA=1 FOUNDRY_TEST_FILTER=test_truncated_checkpoint_streamed timeout 120 $b/test_cuda_faults 2>&1 | tail -12
  echo "rc=${PIPESTATUS[0]}"
done
echo "=== test_cuda_faults"
FOUNDRY_REQUIRE_CUDA=1 timeout 300 $b/test_cuda_faults 2>&1 | grep -E '^\[  FAILED|^\[  PASSED|^\[  ERROR|LINE|packed|unpacked'
date -u
