#!/bin/bash
# GPU call 59 (2026-12-04; commit in the log): GEMV chains (down + residual split over K between block pairs; a decode
# layer's o + residual, norm + gate/up + SwiGLU, down + residual and the
# next layer's norm + q/k/v as one kernel with grid barriers): every GPU
# test, verify of the 3B against the CPU with chains on and off, and
# infer-bench with --gemv-chain on and off in three alternating rounds
# (generated ids compared). The binaries travel gzipped.
cd "$(dirname "$0")/../../.."
export LD_LIBRARY_PATH=$PWD/build-gpu-run/lib:$LD_LIBRARY_PATH
export FOUNDRY_TEST_DATA=$PWD/tests/data
b=build-gpu-run; m=/tmp/m3b; o=/tmp/o59; mkdir -p $o
gunzip $b/*.gz && chmod +x $b/foundry $b/test_cuda*
exec > >(tee "$o/log59.txt") 2>&1
date -u; $b/foundry --version | sed -n 2p
for t in test_cuda_graph test_cuda_ops test_cuda test_cuda_faults; do
  s=$(date +%s)
  FOUNDRY_REQUIRE_CUDA=1 timeout 150 $b/$t > $o/$t.txt 2>&1
  echo "=== $t rc=$? ($(( $(date +%s) - s )) s)"
  grep -E '^\[  FAILED|^\[  PASSED|^\[  ERROR|LINE|above|rror' $o/$t.txt | grep -v " 0 of " | head -20
done
for sc in host_wait drain; do
  FOUNDRY_REQUIRE_CUDA=1 timeout 60 $b/test_cuda_lost $sc > $o/l.txt 2>&1; echo "=== test_cuda_lost $sc rc=$?"
done
echo "=== fixtures verify --backend cuda"
for f in tests/data/llama3-*; do
  timeout 60 $b/foundry verify --model "$f/model" --reference "$f/expected.safetensors" --backend cuda 2>&1 | tail -1
done
$b/foundry make-model --preset llama-3.2-3b --seed 1 --out "$m" | tail -1
for c in on off; do
  echo "=== verify 3b cuda against cpu, --gemv-chain $c"
  timeout 150 $b/foundry verify --model "$m" --backend cuda --against cpu --gemv-chain $c 2>&1 | grep -E "relative|largest|steps|verify"
done
for r in 1 2 3; do
  for c in on off; do
    echo "=== infer-bench --gemv-chain $c (round $r)"
    timeout 100 $b/foundry infer-bench --model "$m" --backend cuda --gemv-chain $c --report "$o/infer-$c-$r.json" | grep -E "end to end|prefill:|decode:"
  done
done
echo "=== generated ids, chain on against off"
python3 -c "import json; a=json.load(open('$o/infer-on-1.json'))['generated_ids']; b=json.load(open('$o/infer-off-1.json'))['generated_ids']; print(a==b, sum(x==y for x,y in zip(a,b)), 'of', len(a))"
date -u
gzip $o/test_cuda*.txt
tar -C /tmp -czf "$OUT/call59.tgz" o59
