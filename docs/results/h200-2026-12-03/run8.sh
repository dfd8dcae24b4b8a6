#!/bin/bash
# GPU call 8: checksum tail with one acq_rel atomic instead of fence + count
# (tuning-log entry 5), A/B against the landed kernel, alternated twice.
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$PWD/build-gpu-run/lib:$LD_LIBRARY_PATH
b=build-gpu-run
exec > >(tee "$OUT/log8.txt") 2>&1
date -u
FOUNDRY_REQUIRE_CUDA=1 $b/var/test_cuda_acqrel 2>&1 | tail -2; echo "test_cuda (acq_rel) rc=${PIPESTATUS[0]}"
for round in 1 2; do
  for v in $b/cuda_ceilings $b/var/cc_acqrel; do
    echo "=== round $round: $v"; $v 20 | grep -v "staged\|^device\|sweep" | grep -v "^1073741824"
  done
done
date -u
