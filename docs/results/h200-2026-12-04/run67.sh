#!/bin/bash
# GPU call 67 (2026-12-04): call 66's binaries (42edf34): test_cuda and
# test_cuda_faults alone (call 66 ran them beside test_cuda_ops, whose
# memory broke their device-memory level checks), then infer-bench with the
# F32 (default) and the F16 KV cache in two alternating rounds.
cd "$(dirname "$0")/../../.."
export LD_LIBRARY_PATH=$PWD/build-gpu-run/lib:$LD_LIBRARY_PATH
export FOUNDRY_TEST_DATA=$PWD/tests/data
b=build-gpu-run; m=/tmp/m3b
gunzip $b/*.gz && chmod +x $b/foundry $b/cuda_kernel_bench $b/test_cuda*
exec > >(tee "$OUT/log67.txt") 2>&1
date -u; $b/foundry --version | head -3
for t in test_cuda test_cuda_faults; do
  s=$(date +%s)
  FOUNDRY_REQUIRE_CUDA=1 timeout 300 $b/$t > /tmp/$t.txt 2>&1
  echo "=== $t rc=$? ($(( $(date +%s) - s )) s)"
  grep -E '^\[  FAILED|^\[  PASSED|^\[  ERROR|LINE|above' /tmp/$t.txt | grep -v " 0 of " | head -20
done
$b/foundry make-model --preset llama-3.2-3b --seed 1 --out "$m" | tail -1
for r in 1 2; do
  for kv in f32 f16; do
    echo "=== infer-bench --kv-dtype $kv (round $r)"
    timeout 100 $b/foundry infer-bench --model "$m" --backend cuda --kv-dtype $kv --report "$OUT/infer-$kv-$r.json" | grep -E "end to end|prefill:|decode:"
  done
done
python3 -c "import json; a=json.load(open('$OUT/infer-f32-1.json'))['generated_ids']; b=json.load(open('$OUT/infer-f16-1.json'))['generated_ids']; print('f16 ids as f32:', a==b, sum(x==y for x,y in zip(a,b)), 'of', len(a))"
date -u
