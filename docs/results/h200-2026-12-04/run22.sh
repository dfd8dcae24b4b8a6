#!/bin/bash
# GPU call 22 (2026-12-04, the tensor-core decode GEMV and programmatic
# dependent launch; commit in the log):
# correctness first (every GPU test, memcheck over the op tests and the
# truncated-checkpoint test), then the kernel benchmark, verify on the 3B
# checkpoint, infer-bench with dependent launch on and off.
cd "$(dirname "$0")/../../.."
export LD_LIBRARY_PATH=$PWD/build-gpu-run/lib:$LD_LIBRARY_PATH
export FOUNDRY_TEST_DATA=$PWD/tests/data
b=build-gpu-run; m=/tmp/m3b
exec > >(tee "$OUT/log22.txt") 2>&1
date -u; $b/foundry --version | head -2
FOUNDRY_TEST_FILTER=test_truncated_checkpoint_streamed FOUNDRY_REQUIRE_CUDA=1 \
  timeout 250 compute-sanitizer --tool memcheck --leak-check full \
  $b/test_cuda_faults > "$OUT/mc-faults-truncated.txt" 2>&1 &
mcpid=$!
for t in test_cuda_ops test_cuda_graph test_cuda test_cuda_faults; do
  s=$(date +%s)
  FOUNDRY_REQUIRE_CUDA=1 timeout 200 $b/$t > /tmp/$t.txt 2>&1
  echo "=== $t rc=$? ($(( $(date +%s) - s )) s)"
  grep -E '^\[  FAILED|^\[  PASSED|FAIL|error|differ|worst|rel' /tmp/$t.txt | head -40
done
for sc in host_wait drain; do
  FOUNDRY_REQUIRE_CUDA=1 timeout 60 $b/test_cuda_lost $sc > /tmp/l.txt 2>&1; echo "=== test_cuda_lost $sc rc=$?"
done
echo "=== memcheck test_cuda_ops (small shapes)"
FOUNDRY_CUDA_OPS_SMALL=1 FOUNDRY_REQUIRE_CUDA=1 timeout 150 compute-sanitizer --tool memcheck --leak-check full $b/test_cuda_ops > /tmp/mc.txt 2>&1
echo "memcheck rc=$?"; grep -E "ERROR SUMMARY|LEAK SUMMARY|PASSED|FAILED" /tmp/mc.txt | head -5
grep -E "Invalid|out of bounds|Leaked" -A6 /tmp/mc.txt | head -40
wait $mcpid; echo "=== memcheck test_cuda_faults truncated rc=$?"
grep -E "ERROR SUMMARY|LEAK SUMMARY|PASSED|FAILED|packed|Invalid" "$OUT/mc-faults-truncated.txt" | head -12
echo "=== kernel bench rows 1"; timeout 60 $b/cuda_kernel_bench --report "$OUT/kb1.json" | tail -16
echo "=== kernel bench rows 512"; timeout 60 $b/cuda_kernel_bench --rows 512 --repeats 30 --report "$OUT/kb512.json" | tail -16
echo "=== fixtures verify --backend cuda"
for f in tests/data/llama3-*; do
  timeout 60 $b/foundry verify --model "$f/model" --reference "$f/expected.safetensors" --backend cuda 2>&1 | tail -1
done
$b/foundry make-model --preset llama-3.2-3b --seed 1 --out "$m" | tail -1
echo "=== verify 3b cuda against cpu"
timeout 150 $b/foundry verify --model "$m" --backend cuda --against cpu --prompt-tokens 64 --steps 16 2>&1 | tail -6
for d in on off; do
  echo "=== infer-bench resident, dependent launch $d"
  timeout 100 $b/foundry infer-bench --model "$m" --backend cuda --dependent-launch $d --report "$OUT/infer-res-pdl-$d.json" | grep -E "end to end|prefill:|decode:|decode bandwidth|identical"
done
echo "=== ncu new GEMV (rows 1)"
timeout 120 ncu --clock-control none --section SpeedOfLight --section SchedulerStats --section WarpStateStats --section InstructionStats --section Occupancy --section LaunchStats -k regex:gemv_q4 --launch-count 12 $b/cuda_kernel_bench --warmup 1 --repeats 1 > "$OUT/ncu-gemv.txt" 2>&1
echo "ncu rc=$?"; grep -E "gemv_q4_kernel<|Duration|DRAM Throughput|Issued Warp|Executed Instructions  |Registers Per|Achieved Occ" "$OUT/ncu-gemv.txt" | head -60
date -u
