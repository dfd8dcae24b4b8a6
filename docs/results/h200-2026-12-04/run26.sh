#!/bin/bash
# GPU call 26 (2026-12-04; commit in the log): everything merged today
# (tensor-core GEMV, dependent launches, tensor-core prefill attention, the
# prefill GEMM at two blocks per SM, ROPE_ATTENTION): every GPU test,
# memcheck over the op tests, the kernel benchmark (and helper branch
# gemv3's GEMV next to it), verify, and issue #11's measurement with the
# transformers baseline in the same call.
cd "$(dirname "$0")/../../.."
export LD_LIBRARY_PATH=$PWD/build-gpu-run/lib:$LD_LIBRARY_PATH
export FOUNDRY_TEST_DATA=$PWD/tests/data
b=build-gpu-run; m=/tmp/m3b
exec > >(tee "$OUT/log26.txt") 2>&1
date -u; $b/foundry --version | head -2
for t in test_cuda_ops test_cuda_graph test_cuda test_cuda_faults; do
  s=$(date +%s)
  FOUNDRY_REQUIRE_CUDA=1 timeout 200 $b/$t > /tmp/$t.txt 2>&1
  echo "=== $t rc=$? ($(( $(date +%s) - s )) s)"
  grep -E '^\[  FAILED|^\[  PASSED|above|differ \(bound 0\)' /tmp/$t.txt | grep -v " 0 of " | head -20
  grep -E 'rope_attention' /tmp/$t.txt | head -8
done
gzip -c /tmp/test_cuda_ops.txt > "$OUT/test_cuda_ops.txt.gz"
for sc in host_wait drain; do
  FOUNDRY_REQUIRE_CUDA=1 timeout 60 $b/test_cuda_lost $sc > /tmp/l.txt 2>&1; echo "=== test_cuda_lost $sc rc=$?"
done
echo "=== kernel bench rows 1 (context 640)"; timeout 60 $b/cuda_kernel_bench --report "$OUT/kb1.json" | tail -16
echo "=== helper branch gemv3's GEMV (not merged), same bench"; timeout 60 $b/cuda_kernel_bench_gemv3 | grep -E "d2d|matmul"
echo "=== fixtures verify --backend cuda"
for f in tests/data/llama3-*; do
  timeout 60 $b/foundry verify --model "$f/model" --reference "$f/expected.safetensors" --backend cuda 2>&1 | tail -1
done
$b/foundry make-model --preset llama-3.2-3b --seed 1 --out "$m" | tail -1
echo "=== verify 3b cuda against cpu"
timeout 150 $b/foundry verify --model "$m" --backend cuda --against cpu 2>&1 | grep -E "relative|largest|steps|verify"
for d in on off; do
  echo "=== infer-bench resident, dependent launch $d"
  timeout 100 $b/foundry infer-bench --model "$m" --backend cuda --dependent-launch $d --report "$OUT/infer-res-pdl-$d.json" | grep -E "end to end|prefill:|decode:|decode bandwidth|identical"
done
echo "=== transformers bf16 static cache, torch.compile, same prompt"
timeout 200 python3 $b/scripts/torch_baseline.py --model "$m" --prompt-from "$OUT/infer-res-pdl-on.json" --report "$OUT/torch-compile.json" 2>&1 | tail -3
python3 $b/scripts/compare_reports.py "$OUT/infer-res-pdl-on.json" "$OUT/torch-compile.json" 2>&1 | grep -E "end to end|prefill median|decode \(tok|same prompt|agree"
echo "=== memcheck test_cuda_ops (small shapes)"
FOUNDRY_CUDA_OPS_SMALL=1 FOUNDRY_REQUIRE_CUDA=1 timeout 150 compute-sanitizer --tool memcheck --leak-check full --print-limit 1000000 --show-backtrace no $b/test_cuda_ops > /tmp/mc.txt 2>&1
echo "memcheck rc=$?"; grep -E "ERROR SUMMARY|LEAK SUMMARY|PASSED|FAILED" /tmp/mc.txt | head -5
grep "^=========" /tmp/mc.txt | grep -vE "SUMMARY|^========= *$|COMPUTE-SANITIZER" | sed -E 's/0x[0-9a-f]+/ADDR/g' | sort | uniq -c | sort -rn | head -10
date -u
