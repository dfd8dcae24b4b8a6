#!/bin/bash
# GPU call 21 (2026-12-04, main at the commit in the log): issue #12's GPU
# bitwise comparison (test_cuda_graph: streamed runs against the resident
# run) and the overlap of a streamed infer-bench trace; issue #15's
# compute-sanitizer leak check over the fault and graph tests; issue #11's
# stall reasons of the decode GEMV and attention kernels (ncu, clocks left
# alone).
cd "$(dirname "$0")/../../.."
export LD_LIBRARY_PATH=$PWD/build-gpu-run/lib:$LD_LIBRARY_PATH
export FOUNDRY_TEST_DATA=$PWD/tests/data
b=build-gpu-run; m=/tmp/m3b
exec > >(tee "$OUT/log21.txt") 2>&1
date -u; $b/foundry --version | head -2; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
for t in test_cuda_graph test_cuda_faults; do
  s=$(date +%s)
  FOUNDRY_REQUIRE_CUDA=1 timeout 120 $b/$t > /tmp/$t.txt 2>&1
  echo "=== $t rc=$? ($(( $(date +%s) - s )) s)"
  grep -E '^\[  FAILED|^\[  PASSED|^\[       OK|bitwise|streamed' /tmp/$t.txt | head -20
done
for t in test_cuda_graph test_cuda_faults; do
  echo "=== compute-sanitizer memcheck --leak-check full $t"
  FOUNDRY_REQUIRE_CUDA=1 timeout 200 compute-sanitizer --tool memcheck --leak-check full $b/$t > /tmp/mc-$t.txt 2>&1
  echo "rc=$?"; grep -E "ERROR SUMMARY|LEAK SUMMARY|PASSED|FAILED|Leaked|Invalid" /tmp/mc-$t.txt | sort | uniq -c | head -12
  grep -B2 -A12 "Program hit\|Invalid\|Leaked" /tmp/mc-$t.txt | head -60
done
$b/foundry make-model --preset llama-3.2-3b --seed 1 --out "$m" | tail -1
echo "=== infer-bench 512 MiB, 2 buffers, traced"
timeout 120 $b/foundry infer-bench --model "$m" --backend cuda --weight-budget 512MiB --buffers 2 --report "$OUT/infer-3b-512m.json" --trace "$OUT/infer-3b-512m.trace.json" | grep -vE "^report"
python3 $b/scripts/trace_overlap.py "$OUT/infer-3b-512m.trace.json" | tail -25
gzip -f "$OUT/infer-3b-512m.trace.json"
echo "=== ncu decode kernels (rows 1)"
sec="--section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --section InstructionStats"
timeout 200 ncu --clock-control none $sec -k regex:"gemv_q4|decode_kernel|argmax|rope" --launch-count 24 $b/cuda_kernel_bench --warmup 1 --repeats 2 > "$OUT/ncu-rows1.txt" 2>&1
echo "ncu rc=$?"; grep -E "gemv_q4|attention|argmax|Duration|Memory Throughput|DRAM Throughput|Issue Slots Busy|No Eligible|Achieved Occupancy|Stall|Registers Per" "$OUT/ncu-rows1.txt" | head -120
echo "=== ncu prefill kernels (rows 512)"
timeout 150 ncu --clock-control none $sec -k regex:"mma_q4|prefill_kernel" --launch-count 8 $b/cuda_kernel_bench --rows 512 --warmup 1 --repeats 1 > "$OUT/ncu-rows512.txt" 2>&1
echo "ncu rc=$?"
date -u
