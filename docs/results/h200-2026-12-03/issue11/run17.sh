#!/bin/bash
# GPU call 17 (wave1 + fuse + ooc): GPU tests, then end to end on
# make-model llama-3.2-3b: infer-bench resident (graphs on and off),
# verify against the CPU, streamed at 512 MiB (packed and not), and the
# transformers peer compiled. Full logs under $OUT.
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$PWD/build-gpu-run/lib:$LD_LIBRARY_PATH
export FOUNDRY_TEST_DATA=$PWD/tests/data
b=build-gpu-run; m=/tmp/m3b
exec > >(tee "$OUT/log17.txt") 2>&1
date -u
for t in test_cuda_ops test_cuda_graph test_cuda_faults test_cuda; do
  echo "=== $t"
  FOUNDRY_REQUIRE_CUDA=1 timeout 150 $b/$t > "$OUT/$t.txt" 2>&1
  echo "$t rc=$?"
  grep -E '^\[  FAILED|^\[  PASSED|ERROR|fused|vs cpu|calls of|packed:|registered copy' "$OUT/$t.txt" | head -30
done
echo "=== g2 (gemv2) test_cuda_ops"
FOUNDRY_REQUIRE_CUDA=1 timeout 150 $b/g2/test_cuda_ops > "$OUT/g2-test_cuda_ops.txt" 2>&1
g2rc=$?; echo "g2 test_cuda_ops rc=$g2rc"
grep -E '^\[  FAILED|^\[  PASSED|ERROR' "$OUT/g2-test_cuda_ops.txt" | head
echo "=== g2 test_cuda_graph"
FOUNDRY_REQUIRE_CUDA=1 timeout 100 $b/g2/test_cuda_graph > "$OUT/g2-test_cuda_graph.txt" 2>&1
echo "g2 test_cuda_graph rc=$?"; grep -E '^\[  FAILED|^\[  PASSED|ERROR' "$OUT/g2-test_cuda_graph.txt" | head
echo "=== g2 kernel bench rows 1"
timeout 60 $b/g2/cuda_kernel_bench --report "$OUT/kb-g2-rows1.json"
$b/foundry make-model --preset llama-3.2-3b --seed 1 --out "$m" | tail -1
echo "=== fixtures verify --backend cuda"
for f in tests/data/*/; do
  [ -f "$f/expected.safetensors" ] || continue
  timeout 60 $b/foundry verify --model "$f/model" --reference "$f/expected.safetensors" --backend cuda 2>&1 | tail -2
done
echo "=== infer-bench resident, graphs on"
timeout 100 $b/foundry infer-bench --model "$m" --backend cuda --report "$OUT/infer-res.json" --trace "$OUT/infer-res.trace.json"
echo "=== infer-bench resident, graphs off"
timeout 100 $b/foundry infer-bench --model "$m" --backend cuda --graphs off --report "$OUT/infer-res-nographs.json"
echo "=== infer-bench 512MiB 2 buffers packed"
timeout 100 $b/foundry infer-bench --model "$m" --backend cuda --weight-budget 512MiB --buffers 2 --report "$OUT/infer-s512.json" --trace "$OUT/infer-s512.trace.json"
echo "=== infer-bench 512MiB 2 buffers unpacked"
timeout 100 $b/foundry infer-bench --model "$m" --backend cuda --weight-budget 512MiB --buffers 2 --pack-streamed off --report "$OUT/infer-s512-unpacked.json"
echo "=== verify 3b against cpu"
timeout 120 $b/foundry verify --model "$m" --backend cuda --against cpu --prompt-tokens 64 --steps 16 --seed 0 2>&1 | tail -22
echo "=== torch compile"
timeout 150 python3 $b/scripts/torch_baseline.py --model "$m" --prompt-from "$OUT/infer-res.json" --report "$OUT/torch-compile.json" 2>&1 | tail -15
python3 $b/scripts/compare_reports.py "$OUT/infer-res.json" "$OUT/torch-compile.json" "$OUT/infer-res-nographs.json" "$OUT/infer-s512.json"
if [ "$g2rc" = 0 ]; then
  echo "=== g2 infer-bench resident"
  timeout 100 $b/g2/foundry infer-bench --model "$m" --backend cuda --report "$OUT/infer-g2-res.json"
fi
gzip -f "$OUT"/*.trace.json
date -u
