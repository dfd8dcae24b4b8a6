#!/bin/bash
# GPU call 33 (2026-12-04; commit in the log): the cluster attention decode
# (branch attn3, merged) and the LM head at three blocks per SM: every GPU
# test, verify, the kernel bench (alone and in chains, F32 and F16 caches,
# contexts 640 and 4096), infer-bench; and two timing-only GEMV variants of
# the commit before the merge (call33/*.diff: no prologue, no compute;
# their results are wrong by design) to see where a GEMV's time goes.
cd "$(dirname "$0")/../../.."
export LD_LIBRARY_PATH=$PWD/build-gpu-run/lib:$LD_LIBRARY_PATH
export FOUNDRY_TEST_DATA=$PWD/tests/data
b=build-gpu-run; m=/tmp/m3b
exec > >(tee "$OUT/log33.txt") 2>&1
date -u; $b/foundry --version | sed -n 2p
for t in test_cuda_ops test_cuda_graph test_cuda test_cuda_faults; do
  s=$(date +%s)
  FOUNDRY_REQUIRE_CUDA=1 timeout 240 $b/$t > /tmp/$t.txt 2>&1
  echo "=== $t rc=$? ($(( $(date +%s) - s )) s)"
  grep -E '^\[  FAILED|^\[  PASSED|^\[  ERROR|LINE|above' /tmp/$t.txt | grep -v " 0 of " | head -20
  grep -E 'rope_attention|lm_head|streaming' /tmp/$t.txt | head -12
done
gzip -c /tmp/test_cuda_ops.txt > "$OUT/test_cuda_ops.txt.gz"
for c in f32 f16; do
  for mode in "--chain 1" "--chain 20"; do
    echo "=== kernel bench rows 1 cache $c $mode"
    timeout 90 $b/cuda_kernel_bench --cache $c $mode --repeats 50 --report "$OUT/kb-$c-${mode// /}.json" | grep -vE "^report"
  done
done
echo "=== kernel bench context 4096 chain 20"
timeout 90 $b/cuda_kernel_bench --context 4096 --chain 20 --repeats 30 | grep -E "attention"
for v in noprologue nocompute; do
  echo "=== kernel bench $v (timing only) chain 20"
  timeout 90 $b/cuda_kernel_bench_$v --chain 20 --repeats 30 | grep -E "matmul|\+"
done
echo "=== fixtures verify --backend cuda"
for f in tests/data/llama3-*; do
  timeout 60 $b/foundry verify --model "$f/model" --reference "$f/expected.safetensors" --backend cuda 2>&1 | tail -1
done
$b/foundry make-model --preset llama-3.2-3b --seed 1 --out "$m" | tail -1
echo "=== verify 3b cuda against cpu"
timeout 150 $b/foundry verify --model "$m" --backend cuda --against cpu 2>&1 | grep -E "relative|largest|steps|verify"
for r in 1 2; do
  echo "=== infer-bench (round $r)"
  timeout 100 $b/foundry infer-bench --model "$m" --backend cuda --report "$OUT/infer-$r.json" | grep -E "end to end|prefill:|decode:|decode bandwidth"
done
date -u
