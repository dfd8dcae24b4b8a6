#!/bin/bash
# GPU call 78 (2026-12-04): sscale (branch sscale) against main
# (0da4328): the layer GEMVs (blocks of at most 8 tile halves, 24 KB of
# scales) copy their tiles' scales and biases into shared memory before
# the wait, by coalesced 16-byte cp.async, instead of 4 two-byte loads a
# lane and item (two thirds of an item's L1 wavefronts); docs/
# tuning-log.md entry 56. Every GPU test of sscale (test_cuda_ops beside
# the verify runs; the others alone), verify of the fixtures and of the
# 3B against the CPU, the kernel bench's chain of 20, infer-bench in
# three alternating rounds, ids compared.
cd "$(dirname "$0")/../../.."
export LD_LIBRARY_PATH=$PWD/build-gpu-run/lib:$LD_LIBRARY_PATH
export FOUNDRY_TEST_DATA=$PWD/tests/data
ab=build-gpu-run/ab; m=/tmp/m3b; o=/tmp/o78; mkdir -p $o
gunzip $ab/*/*.gz && chmod +x $ab/*/*
exec > >(tee "$o/log78.txt") 2>&1
date -u
for v in base sscale; do echo "$v $($ab/$v/foundry --version | sed -n 2p)"; done
(FOUNDRY_REQUIRE_CUDA=1 timeout 300 $ab/sscale/test_cuda_ops > $o/ops-sscale.txt 2>&1; echo "rc=$?" >> $o/ops-sscale.txt) &
ops=$!
$ab/base/foundry make-model --preset llama-3.2-3b --seed 1 --out "$m" | tail -1
echo "=== sscale: fixtures verify --backend cuda"
for f in tests/data/llama3-*; do
  timeout 60 $ab/sscale/foundry verify --model "$f/model" --reference "$f/expected.safetensors" --backend cuda 2>&1 | tail -1
done
echo "=== sscale: verify 3b cuda against cpu"
timeout 150 $ab/sscale/foundry verify --model "$m" --backend cuda --against cpu 2>&1 | grep -E "relative|largest|steps|verify"
wait $ops
echo "=== sscale test_cuda_ops $(tail -1 $o/ops-sscale.txt)"
grep -E '^\[  FAILED|^\[  PASSED|^\[  ERROR|LINE' $o/ops-sscale.txt | head -20
for v in base sscale; do
  echo "=== $v kernel bench, chain 20"
  timeout 120 $ab/$v/cuda_kernel_bench --chain 20 --repeats 30 --report "$o/kb-$v.json" | grep -E "device-to|norm\+|residual"
done
for r in 1 2 3; do
  for v in base sscale; do
    echo "=== $v infer-bench (round $r)"
    timeout 100 $ab/$v/foundry infer-bench --model "$m" --backend cuda --report "$o/infer-$v-$r.json" | grep -E "end to end|prefill:|decode:"
  done
done
python3 -c "import json; a=json.load(open('$o/infer-base-1.json'))['generated_ids']; b=json.load(open('$o/infer-sscale-1.json'))['generated_ids']; print('sscale ids as base:', a==b)"
for t in test_cuda_graph test_cuda test_cuda_faults; do
  s=$(date +%s)
  FOUNDRY_REQUIRE_CUDA=1 timeout 300 $ab/sscale/$t > $o/$t.txt 2>&1
  echo "=== sscale $t rc=$? ($(( $(date +%s) - s )) s)"
  grep -E '^\[  FAILED|^\[  PASSED|^\[  ERROR|LINE|above|exception' $o/$t.txt | grep -v " 0 of " | head -20
done
for sc in host_wait drain; do
  FOUNDRY_REQUIRE_CUDA=1 timeout 60 $ab/sscale/test_cuda_lost $sc > $o/l.txt 2>&1; echo "=== sscale test_cuda_lost $sc rc=$?"
done
date -u
gzip $o/ops-sscale.txt $o/test_cuda*.txt
tar -C /tmp -czf "$OUT/call78.tgz" o78
