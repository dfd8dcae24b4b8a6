#!/bin/bash
# GPU call 76 (2026-12-04; commit in the log): the session's final state
# (entry 53 merged): every GPU test (test_cuda, test_cuda_faults,
# test_cuda_lost and test_cuda_graph each alone; test_cuda_ops beside the
# verify runs, which check no memory levels), verify on every fixture and
# the 3B against the CPU, and issue #11's measurement: infer-bench (three
# rounds) and the transformers baseline (bf16, static cache,
# torch.compile) on the same prompt in the same call.
cd "$(dirname "$0")/../../.."
export LD_LIBRARY_PATH=$PWD/build-gpu-run/lib:$LD_LIBRARY_PATH
export FOUNDRY_TEST_DATA=$PWD/tests/data
b=build-gpu-run; m=/tmp/m3b
gunzip $b/*.gz && chmod +x $b/foundry $b/test_cuda*
exec > >(tee "$OUT/log76.txt") 2>&1
date -u; $b/foundry --version | head -3
(FOUNDRY_REQUIRE_CUDA=1 timeout 300 $b/test_cuda_ops > /tmp/test_cuda_ops.txt 2>&1; echo "rc=$?" >> /tmp/test_cuda_ops.txt) &
ops=$!
$b/foundry make-model --preset llama-3.2-3b --seed 1 --out "$m" | tail -1
echo "=== fixtures verify --backend cuda"
for f in tests/data/llama3-*; do
  timeout 60 $b/foundry verify --model "$f/model" --reference "$f/expected.safetensors" --backend cuda 2>&1 | tail -1
done
echo "=== verify 3b cuda against cpu"
timeout 150 $b/foundry verify --model "$m" --backend cuda --against cpu 2>&1 | grep -E "relative|largest|steps|verify"
wait $ops
echo "=== test_cuda_ops $(tail -1 /tmp/test_cuda_ops.txt)"
grep -E '^\[  FAILED|^\[  PASSED|^\[  ERROR|LINE' /tmp/test_cuda_ops.txt | head -20
gzip -c /tmp/test_cuda_ops.txt > "$OUT/test_cuda_ops.txt.gz"
for t in test_cuda_graph test_cuda test_cuda_faults; do
  s=$(date +%s)
  FOUNDRY_REQUIRE_CUDA=1 timeout 300 $b/$t > /tmp/$t.txt 2>&1
  echo "=== $t rc=$? ($(( $(date +%s) - s )) s)"
  grep -E '^\[  FAILED|^\[  PASSED|^\[  ERROR|LINE|above|exception' /tmp/$t.txt | grep -v " 0 of " | head -20
done
for sc in host_wait drain; do
  FOUNDRY_REQUIRE_CUDA=1 timeout 60 $b/test_cuda_lost $sc > /tmp/l.txt 2>&1; echo "=== test_cuda_lost $sc rc=$?"
done
for r in 1 2 3; do
  echo "=== infer-bench (round $r)"
  timeout 100 $b/foundry infer-bench --model "$m" --backend cuda --report "$OUT/infer-$r.json" | grep -E "end to end|prefill:|decode:|decode bandwidth"
done
echo "=== transformers bf16 static cache, torch.compile, same prompt"
timeout 240 python3 scripts/torch_baseline.py --model "$m" --prompt-from "$OUT/infer-1.json" --report "$OUT/torch-compile.json" 2>&1 | tail -3
for r in 1 2 3; do
  python3 scripts/compare_reports.py "$OUT/infer-$r.json" "$OUT/torch-compile.json" 2>&1 | grep -E "end to end|prefill median|decode \(tok|same prompt|agree"
done
date -u
