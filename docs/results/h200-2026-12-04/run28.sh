#!/bin/bash
# GPU call 28 (2026-12-04; commit in the log): where the cycles go in the
# LM head GEMV and the attention decode kernel, for the next tuning step
# (ncu stall reasons and source counters, clocks left alone).
cd "$(dirname "$0")/../../.."
export LD_LIBRARY_PATH=$PWD/build-gpu-run/lib:$LD_LIBRARY_PATH
b=build-gpu-run
exec > >(tee "$OUT/log28.txt") 2>&1
date -u; $b/foundry --version | head -2
sec="--section SpeedOfLight --section SchedulerStats --section WarpStateStats --section MemoryWorkloadAnalysis --section SourceCounters"
echo "=== ncu LM head GEMV (the 9th gemv launch: lm_head, first repeat)"
timeout 150 ncu --clock-control none $sec -k regex:gemv_q4 --launch-skip 8 --launch-count 1 $b/cuda_kernel_bench --warmup 1 --repeats 1 > "$OUT/ncu-lmhead.txt" 2>&1
echo "ncu rc=$?"
echo "=== ncu rope_attention decode (context 640)"
timeout 150 ncu --clock-control none $sec -k regex:decode_kernel --launch-skip 2 --launch-count 1 $b/cuda_kernel_bench --warmup 1 --repeats 1 > "$OUT/ncu-attn.txt" 2>&1
echo "ncu rc=$?"
for f in ncu-lmhead ncu-attn; do
  echo "=== $f"; grep -E "  [a-z_]+kernel|Duration|DRAM Throughput|Issued Warp|No Eligible|Warp Cycles Per Issued|Stall|stall|smsp__pcsamp|Warning|Uncoalesced|Bank" "$OUT/$f.txt" | head -40
done
date -u
