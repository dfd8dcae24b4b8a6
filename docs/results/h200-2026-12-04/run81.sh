#!/bin/bash
# GPU call 81, to run after calls 80 and 82 with the build they keep
# (argument: tail, the default, for branch tail-ring, or ring for
# mlp-ring): issue #11's measurement as call 76 made it of main: every GPU test
# (test_cuda, test_cuda_faults, test_cuda_lost and test_cuda_graph each
# alone; test_cuda_ops beside the verify runs, which check no memory
# levels), verify on every fixture and the 3B against the CPU, infer-bench
# (three rounds) and the transformers baseline (bf16, static cache,
# torch.compile) on the same prompt in the same call, with the
# device-to-device copy (the kernel bench's ceiling line).
#
# Binaries: build-gpu-run/tail/ or ring/ (run82.sh's and run80.sh's
# headers).
cd "$(dirname "$0")/../../.."
export LD_LIBRARY_PATH=$PWD/build-gpu-run/lib:$LD_LIBRARY_PATH
export FOUNDRY_TEST_DATA=$PWD/tests/data
b=build-gpu-run/${1:-tail}; m=/tmp/m3b; o=/tmp/o81; mkdir -p $o
gunzip $b/*.gz && chmod +x $b/*
exec > >(tee "$o/log81.txt") 2>&1
date -u; $b/foundry --version | head -3
(FOUNDRY_REQUIRE_CUDA=1 timeout 300 $b/test_cuda_ops > $o/test_cuda_ops.txt 2>&1; echo "rc=$?" >> $o/test_cuda_ops.txt) &
ops=$!
$b/foundry make-model --preset llama-3.2-3b --seed 1 --out "$m" | tail -1
echo "=== fixtures verify --backend cuda"
for f in tests/data/llama3-*; do
  timeout 60 $b/foundry verify --model "$f/model" --reference "$f/expected.safetensors" --backend cuda 2>&1 | tail -1
done
echo "=== verify 3b cuda against cpu"
timeout 150 $b/foundry verify --model "$m" --backend cuda --against cpu 2>&1 | grep -E "relative|largest|steps|verify|ring kernel"
wait $ops
echo "=== test_cuda_ops $(tail -1 $o/test_cuda_ops.txt)"
grep -E '^\[  FAILED|^\[  PASSED|^\[  ERROR|LINE|ring kernel' $o/test_cuda_ops.txt | head -20
for t in test_cuda_graph test_cuda test_cuda_faults; do
  s=$(date +%s)
  FOUNDRY_REQUIRE_CUDA=1 timeout 300 $b/$t > $o/$t.txt 2>&1
  echo "=== $t rc=$? ($(( $(date +%s) - s )) s)"
  grep -E '^\[  FAILED|^\[  PASSED|^\[  ERROR|LINE|ring kernel|above|exception' $o/$t.txt | grep -v " 0 of " | head -20
done
for sc in host_wait drain; do
  FOUNDRY_REQUIRE_CUDA=1 timeout 60 $b/test_cuda_lost $sc > $o/l.txt 2>&1; echo "=== test_cuda_lost $sc rc=$?"
done
echo "=== the ceiling: device-to-device copy"
timeout 120 $b/cuda_kernel_bench --chain 20 --repeats 30 --report "$o/kb.json" | grep -E "device-to|norm\+mlp|head"
for r in 1 2 3; do
  echo "=== infer-bench (round $r)"
  timeout 100 $b/foundry infer-bench --model "$m" --backend cuda --report "$o/infer-$r.json" | grep -E "end to end|prefill:|decode:|decode bandwidth|ring kernel|error"
done
echo "=== transformers bf16 static cache, torch.compile, same prompt"
timeout 240 python3 scripts/torch_baseline.py --model "$m" --prompt-from "$o/infer-1.json" --report "$o/torch-compile.json" 2>&1 | tail -3
for r in 1 2 3; do
  python3 scripts/compare_reports.py "$o/infer-$r.json" "$o/torch-compile.json" 2>&1 | grep -E "end to end|prefill median|decode \(tok|same prompt|agree"
done
date -u
gzip $o/test_cuda*.txt
tar -C /tmp -czf "$OUT/call81.tgz" o81
