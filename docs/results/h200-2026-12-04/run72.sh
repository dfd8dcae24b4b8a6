#!/bin/bash
# GPU call 72 (2026-12-04; commit in the log): ncu on one rope_attention
# decode launch inside infer-bench's decode graph (entry 35's method, graph
# nodes profiled one by one), with the warp stall reasons and the source
# lines where the warps stall (SourceCounters), for entry 50's unexplained
# 4.6 us between q/k staged and the scores.
cd "$(dirname "$0")/../../.."
b=build-gpu-run; m=/tmp/m3b
gunzip $b/*.gz; chmod +x $b/foundry
exec > >(tee "$OUT/log72.txt") 2>&1
date -u; $b/foundry --version | sed -n 2p
$b/foundry make-model --preset llama-3.2-3b --seed 1 --out "$m" | tail -1
sec="--section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --section SourceCounters"
echo "=== ncu: one rope_attention of a decode layer"
timeout 240 ncu --clock-control none --graph-profiling node $sec --import-source yes -k regex:decode_kernel --launch-skip 250 --launch-count 1 $b/foundry infer-bench --model "$m" --backend cuda --warmup 0 --iterations 1 --report /tmp/r2.json > "$OUT/ncu-attention.txt" 2>&1
echo "ncu rc=$?"
grep -E "decode_kernel|Duration|DRAM Throughput|Achieved Occupancy|Issue Slots Busy|No Eligible|Grid Size|Warp Cycles Per Issued|Stall|stall" "$OUT/ncu-attention.txt" | head -60
echo "=== ncu: raw stall metrics per source line (top)"
timeout 240 ncu --clock-control none --graph-profiling node --metrics smsp__pcsamp_warps_issue_stalled_long_scoreboard,smsp__pcsamp_warps_issue_stalled_barrier,smsp__pcsamp_warps_issue_stalled_wait,smsp__pcsamp_warps_issue_stalled_short_scoreboard,smsp__pcsamp_warps_issue_stalled_membar,smsp__pcsamp_sample_count -k regex:decode_kernel --launch-skip 250 --launch-count 1 --page source --csv --print-source sass $b/foundry infer-bench --model "$m" --backend cuda --warmup 0 --iterations 1 --report /tmp/r3.json > "$OUT/ncu-attention-source.csv" 2>&1
echo "ncu rc=$?"
head -c 600 "$OUT/ncu-attention-source.csv"; echo
gzip "$OUT/ncu-attention.txt" "$OUT/ncu-attention-source.csv"
date -u
