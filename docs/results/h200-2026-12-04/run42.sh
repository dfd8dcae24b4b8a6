#!/bin/bash
# GPU call 42 (2026-12-04; commit in the log): the prefill through the
# fused kinds (branch pfuse, merged): every GPU test, verify, the kernel
# bench at 512 rows, infer-bench against the build before the merge
# (foundry_premerge, 2306d7d) in alternating rounds; and the decode ops
# alone with L2 flushed and warm (is a cold weight slower?).
cd "$(dirname "$0")/../../.."
export LD_LIBRARY_PATH=$PWD/build-gpu-run/lib:$LD_LIBRARY_PATH
export FOUNDRY_TEST_DATA=$PWD/tests/data
b=build-gpu-run; m=/tmp/m3b
exec > >(tee "$OUT/log42.txt") 2>&1
date -u; $b/foundry --version | sed -n 2p; $b/foundry_premerge --version | sed -n 2p
for t in test_cuda_ops test_cuda_graph test_cuda test_cuda_faults; do
  s=$(date +%s)
  FOUNDRY_REQUIRE_CUDA=1 timeout 300 $b/$t > /tmp/$t.txt 2>&1
  echo "=== $t rc=$? ($(( $(date +%s) - s )) s)"
  grep -E '^\[  FAILED|^\[  PASSED|^\[  ERROR|LINE|above|differ' /tmp/$t.txt | grep -v " 0 of " | head -24
done
gzip -c /tmp/test_cuda_ops.txt > "$OUT/test_cuda_ops.txt.gz"
echo "=== fixtures verify --backend cuda"
for f in tests/data/llama3-*; do
  timeout 60 $b/foundry verify --model "$f/model" --reference "$f/expected.safetensors" --backend cuda 2>&1 | tail -1
done
$b/foundry make-model --preset llama-3.2-3b --seed 1 --out "$m" | tail -1
echo "=== verify 3b cuda against cpu"
timeout 150 $b/foundry verify --model "$m" --backend cuda --against cpu 2>&1 | grep -E "relative|largest|steps|verify"
echo "=== kernel bench rows 512"
timeout 240 $b/cuda_kernel_bench --rows 512 --context 512 --repeats 20 --report "$OUT/kb512.json" | grep -vE "^report"
for l2 in flushed warm; do
  echo "=== kernel bench rows 1 alone, L2 $l2"
  timeout 60 $b/cuda_kernel_bench --l2 $l2 --repeats 50 | grep -E "\+|attention|lm_head"
done
for r in 1 2; do
  for v in premerge base; do
    s=_$v; [ $v = base ] && s=
    echo "=== infer-bench $v (round $r)"
    timeout 100 $b/foundry$s infer-bench --model "$m" --backend cuda --report "$OUT/infer-$r-$v.json" | grep -E "end to end|prefill:|decode:"
  done
done
date -u
