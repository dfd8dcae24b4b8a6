#!/bin/bash
# GPU call 34 (2026-12-04; commit in the log): the helpers' merged work
# (per-shape prefill GEMM with a shorter loop, prefill attention per kv
# head) and the GEMV's vectorized staging: every GPU test, verify, the
# kernel bench (decode in chains, prefill with every GEMM block shape), and
# infer-bench; variants of the same commit (call34/*.diff) without the
# cluster attention and without the streaming LM head, to find which made
# call 33's decode slower.
cd "$(dirname "$0")/../../.."
export LD_LIBRARY_PATH=$PWD/build-gpu-run/lib:$LD_LIBRARY_PATH
export FOUNDRY_TEST_DATA=$PWD/tests/data
b=build-gpu-run; m=/tmp/m3b
exec > >(tee "$OUT/log34.txt") 2>&1
date -u; $b/foundry --version | sed -n 2p
for t in test_cuda_ops test_cuda_graph test_cuda test_cuda_faults; do
  s=$(date +%s)
  FOUNDRY_REQUIRE_CUDA=1 timeout 300 $b/$t > /tmp/$t.txt 2>&1
  echo "=== $t rc=$? ($(( $(date +%s) - s )) s)"
  grep -E '^\[  FAILED|^\[  PASSED|^\[  ERROR|LINE|above' /tmp/$t.txt | grep -v " 0 of " | head -20
done
gzip -c /tmp/test_cuda_ops.txt > "$OUT/test_cuda_ops.txt.gz"
for sc in host_wait drain; do
  FOUNDRY_REQUIRE_CUDA=1 timeout 60 $b/test_cuda_lost $sc > /tmp/l.txt 2>&1; echo "=== test_cuda_lost $sc rc=$?"
done
echo "=== kernel bench rows 1 chain 20"
timeout 90 $b/cuda_kernel_bench --chain 20 --repeats 50 --report "$OUT/kb1-chain20.json" | grep -vE "^report"
for v in nocluster nostream; do
  echo "=== kernel bench $v rows 1 chain 20"
  timeout 90 $b/cuda_kernel_bench_$v --chain 20 --repeats 30 | grep -E "attention|lm_head"
done
for c in f32 f16; do
  echo "=== kernel bench rows 512 context 512 cache $c"
  timeout 200 $b/cuda_kernel_bench --rows 512 --context 512 --cache $c --repeats 30 --report "$OUT/kb512-$c.json" | grep -vE "^report"
done
echo "=== fixtures verify --backend cuda"
for f in tests/data/llama3-*; do
  timeout 60 $b/foundry verify --model "$f/model" --reference "$f/expected.safetensors" --backend cuda 2>&1 | tail -1
done
$b/foundry make-model --preset llama-3.2-3b --seed 1 --out "$m" | tail -1
echo "=== verify 3b cuda against cpu"
timeout 150 $b/foundry verify --model "$m" --backend cuda --against cpu 2>&1 | grep -E "relative|largest|steps|verify"
for v in base nocluster nostream base; do
  s=_$v; [ $v = base ] && s=
  echo "=== infer-bench $v"
  timeout 100 $b/foundry$s infer-bench --model "$m" --backend cuda --report "$OUT/infer-$v-$(date +%s).json" | grep -E "end to end|prefill:|decode:"
done
date -u
