#!/bin/bash
# GPU call 18 (wave1 at the commit in the log): GPU tests and memcheck, the
# kernel benchmark, infer-bench resident (with trace) and at a budget that
# holds the model, llama-3.1-8b streamed under 1 GiB (short protocol), and
# the Accelerate offload peer next to foundry at 2 GiB (short protocol).
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$PWD/build-gpu-run/lib:$LD_LIBRARY_PATH
export FOUNDRY_TEST_DATA=$PWD/tests/data
b=build-gpu-run; m=/tmp/m3b; m8=/tmp/m8b
exec > >(tee "$OUT/log18.txt") 2>&1
date -u; $b/foundry --version
for t in test_cuda_ops test_cuda_graph test_cuda test_cuda_faults; do
  s=$(date +%s)
  FOUNDRY_REQUIRE_CUDA=1 timeout 170 $b/$t > /tmp/$t.txt 2>&1
  echo "=== $t rc=$? ($(( $(date +%s) - s )) s)"
  grep -E '^\[  FAILED|^\[  PASSED|calls of|packed:|unpacked:|registered copy' /tmp/$t.txt | head -12
done
for sc in host_wait drain; do
  FOUNDRY_REQUIRE_CUDA=1 timeout 60 $b/test_cuda_lost $sc > /tmp/l.txt 2>&1; echo "=== test_cuda_lost $sc rc=$?"
done
echo "=== memcheck test_cuda_ops (small shapes)"
FOUNDRY_CUDA_OPS_SMALL=1 FOUNDRY_REQUIRE_CUDA=1 timeout 100 compute-sanitizer --tool memcheck --leak-check full $b/test_cuda_ops > /tmp/mc.txt 2>&1
echo "memcheck rc=$?"; grep -E "ERROR SUMMARY|LEAK SUMMARY|PASSED|FAILED" /tmp/mc.txt | head -5
echo "=== kernel bench rows 1"; timeout 60 $b/cuda_kernel_bench --report /tmp/kb1.json | tail -15
echo "=== kernel bench rows 512"; timeout 60 $b/cuda_kernel_bench --rows 512 --repeats 30 --report /tmp/kb512.json | tail -15
$b/foundry make-model --preset llama-3.2-3b --seed 1 --out "$m" | tail -1
echo "=== infer-bench resident"
timeout 100 $b/foundry infer-bench --model "$m" --backend cuda --report "$OUT/infer-final.json" --trace "$OUT/infer-final.trace.json"
echo "=== infer-bench --weight-budget 4GiB (holds the model)"
timeout 100 $b/foundry infer-bench --model "$m" --backend cuda --weight-budget 4GiB --report "$OUT/infer-4g.json" | grep -E "end to end|prefill:|decode:|weights:"
echo "=== foundry 2GiB, short protocol"
timeout 100 $b/foundry infer-bench --model "$m" --backend cuda --weight-budget 2GiB --gen-tokens 16 --warmup 1 --iterations 3 --report "$OUT/infer-2g-short.json" | grep -E "end to end|prefill:|decode:|weights:|streaming:"
echo "=== llama-3.1-8b, 1 GiB, short protocol"
$b/foundry make-model --preset llama-3.1-8b --seed 1 --out "$m8" | tail -1
timeout 150 $b/foundry infer-bench --model "$m8" --backend cuda --weight-budget 1GiB --gen-tokens 16 --warmup 1 --iterations 3 --report "$OUT/infer-8b-1g.json" | grep -E "setup|end to end|prefill:|decode:|weights:|streaming:|host memory"
echo "=== accelerate offload 2GiB, short protocol"
timeout 200 python3 $b/scripts/torch_baseline.py --model "$m" --prompt-from "$OUT/infer-2g-short.json" --offload-budget 2GiB --gen-tokens 16 --warmup 1 --iterations 3 --report "$OUT/torch-offload-2g.json" 2>&1 | tail -4
gzip -f "$OUT"/*.trace.json
date -u
