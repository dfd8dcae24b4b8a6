#!/bin/bash
# GPU call 5: checksum-kernel variants for the fixed cost at 64 MiB
# (docs/tuning-log.md, entry 4), interleaved twice.
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$PWD/build-gpu-run/lib:$LD_LIBRARY_PATH
b=build-gpu-run
exec > >(tee "$OUT/log5.txt") 2>&1
date -u
for round in 1 2; do
  for v in $b/cuda_ceilings $b/var/cc_nohost $b/var/cc_noreduce $b/var/cc_partials $b/var/cc_t1024; do
    echo "=== round $round: $v"; $v 20 | grep -v "staged\|h2d\|^device" | grep -v "^ *268435456\|^1073741824"
  done
done
date -u
