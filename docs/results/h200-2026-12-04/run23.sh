#!/bin/bash
# GPU call 23 (2026-12-04; commit in the log): issue #11's measurement in
# one call: GEMV correctness (test_cuda_ops, test_cuda_graph), the kernel
# benchmark, infer-bench resident with dependent launch on and off, and the
# transformers baseline (bf16, static cache, torch.compile) on the same
# prompt; then compute-sanitizer over test_cuda_faults' sweeps (issue #15).
cd "$(dirname "$0")/../../.."
export LD_LIBRARY_PATH=$PWD/build-gpu-run/lib:$LD_LIBRARY_PATH
export FOUNDRY_TEST_DATA=$PWD/tests/data
b=build-gpu-run; m=/tmp/m3b
exec > >(tee "$OUT/log23.txt") 2>&1
date -u; $b/foundry --version | head -2
for t in test_cuda_ops test_cuda_graph; do
  s=$(date +%s)
  FOUNDRY_REQUIRE_CUDA=1 timeout 200 $b/$t > /tmp/$t.txt 2>&1
  echo "=== $t rc=$? ($(( $(date +%s) - s )) s)"
  grep -E '^\[  FAILED|^\[  PASSED|above|x up to|x about|x of zeros|lm_head|gemv' /tmp/$t.txt | head -30
done
echo "=== kernel bench rows 1"; timeout 60 $b/cuda_kernel_bench --report "$OUT/kb1.json" | tail -15
$b/foundry make-model --preset llama-3.2-3b --seed 1 --out "$m" | tail -1
echo "=== verify 3b cuda against cpu"
timeout 150 $b/foundry verify --model "$m" --backend cuda --against cpu 2>&1 | tail -4
for d in on off; do
  echo "=== infer-bench resident, dependent launch $d"
  timeout 100 $b/foundry infer-bench --model "$m" --backend cuda --dependent-launch $d --report "$OUT/infer-res-pdl-$d.json" | grep -E "end to end|prefill:|decode:|decode bandwidth|identical"
done
echo "=== transformers bf16 static cache, torch.compile, same prompt"
timeout 200 python3 $b/scripts/torch_baseline.py --model "$m" --prompt-from "$OUT/infer-res-pdl-on.json" --report "$OUT/torch-compile.json" 2>&1 | tail -6
python3 $b/scripts/compare_reports.py "$OUT/infer-res-pdl-on.json" "$OUT/torch-compile.json" 2>&1 | tail -20
echo "=== memcheck --leak-check full test_cuda_faults sweeps"
FOUNDRY_TEST_FILTER='test_sweep_*' FOUNDRY_REQUIRE_CUDA=1 timeout 230 compute-sanitizer --tool memcheck --leak-check full $b/test_cuda_faults > /tmp/mcf.txt 2>&1
echo "rc=$?"; grep -E "ERROR SUMMARY|LEAK SUMMARY|PASSED|FAILED|calls of" /tmp/mcf.txt | head
grep "Program hit" /tmp/mcf.txt | sort | uniq -c | sort -rn | head -8
grep -E "Invalid|out of bounds|Leaked" -A4 /tmp/mcf.txt | head -20
date -u
