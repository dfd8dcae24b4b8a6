#!/bin/bash
# GPU call 44 (2026-12-04; commit in the log): ncu on the decode GEMVs and
# the attention decode kernel as they run inside infer-bench's decode graph
# (graph nodes profiled one by one, caches flushed per pass: cold weights
# as in the real decode): 4 consecutive GEMV launches of one decode layer
# (norm + q/k/v, o + residual, norm + gate/up + SwiGLU, down + residual)
# and one rope_attention, for the next GEMV and attention designs.
cd "$(dirname "$0")/../../.."
b=build-gpu-run; m=/tmp/m3b
exec > >(tee "$OUT/log44.txt") 2>&1
date -u; $b/foundry --version | sed -n 2p
$b/foundry make-model --preset llama-3.2-3b --seed 1 --out "$m" | tail -1
sec="--section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis"
echo "=== ncu: 4 GEMVs of a decode layer (launches 1001-1004 of gemv_q4_kernel)"
timeout 240 ncu --clock-control none --graph-profiling node $sec -k regex:gemv_q4 --launch-skip 1000 --launch-count 4 $b/foundry infer-bench --model "$m" --backend cuda --warmup 0 --iterations 1 --report /tmp/r1.json > "$OUT/ncu-gemv.txt" 2>&1
echo "ncu rc=$?"
grep -E "gemv_q4_kernel|Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Issue Slots Busy|No Eligible|Registers Per|Grid Size|Warp Cycles Per Issued" "$OUT/ncu-gemv.txt" | head -60
echo "=== ncu: one rope_attention of a decode layer"
timeout 200 ncu --clock-control none --graph-profiling node $sec -k regex:decode_kernel --launch-skip 250 --launch-count 1 $b/foundry infer-bench --model "$m" --backend cuda --warmup 0 --iterations 1 --report /tmp/r2.json > "$OUT/ncu-attention.txt" 2>&1
echo "ncu rc=$?"
grep -E "decode_kernel|Duration|DRAM Throughput|Achieved Occupancy|Issue Slots Busy|No Eligible|Grid Size|Warp Cycles Per Issued" "$OUT/ncu-attention.txt" | head -20
gzip "$OUT/ncu-gemv.txt" "$OUT/ncu-attention.txt"
date -u
