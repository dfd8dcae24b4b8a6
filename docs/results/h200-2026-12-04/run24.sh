#!/bin/bash
# GPU call 24 (2026-12-04; commit in the log): the final issue #11
# measurement with decode-only dependent launches (infer-bench on and off,
# a budget that holds the model, and the transformers baseline on the same
# prompt), test_cuda_graph, and compute-sanitizer over test_cuda_faults'
# sweeps with every reported error classified (issue #15).
cd "$(dirname "$0")/../../.."
export LD_LIBRARY_PATH=$PWD/build-gpu-run/lib:$LD_LIBRARY_PATH
export FOUNDRY_TEST_DATA=$PWD/tests/data
b=build-gpu-run; m=/tmp/m3b
exec > >(tee "$OUT/log24.txt") 2>&1
date -u; $b/foundry --version | head -2
for t in test_cuda_graph test_cuda_faults; do
  FOUNDRY_REQUIRE_CUDA=1 timeout 100 $b/$t > /tmp/$t.txt 2>&1
  echo "=== $t rc=$?"; grep -E '^\[  FAILED|^\[  PASSED|bitwise' /tmp/$t.txt | head -20
done
$b/foundry make-model --preset llama-3.2-3b --seed 1 --out "$m" | tail -1
for d in on off; do
  echo "=== infer-bench resident, dependent launch $d"
  timeout 100 $b/foundry infer-bench --model "$m" --backend cuda --dependent-launch $d --report "$OUT/infer-res-pdl-$d.json" | grep -E "end to end|prefill:|decode:|decode bandwidth|identical"
done
echo "=== infer-bench --weight-budget 4GiB (holds the model)"
timeout 100 $b/foundry infer-bench --model "$m" --backend cuda --weight-budget 4GiB --report "$OUT/infer-4g.json" | grep -E "end to end|prefill:|decode:|weights:"
echo "=== transformers bf16 static cache, torch.compile, same prompt"
timeout 200 python3 $b/scripts/torch_baseline.py --model "$m" --prompt-from "$OUT/infer-res-pdl-on.json" --report "$OUT/torch-compile.json" 2>&1 | tail -3
python3 $b/scripts/compare_reports.py "$OUT/infer-res-pdl-on.json" "$OUT/torch-compile.json" 2>&1 | grep -E "end to end|prefill median|decode \(tok|same prompt|agree"
echo "=== memcheck --leak-check full test_cuda_faults sweeps, every error classified"
FOUNDRY_TEST_FILTER='test_sweep_*' FOUNDRY_REQUIRE_CUDA=1 timeout 230 compute-sanitizer --tool memcheck --leak-check full --print-limit 1000000 --show-backtrace no $b/test_cuda_faults > /tmp/mcf.txt 2>&1
echo "rc=$?"; grep -E "ERROR SUMMARY|LEAK SUMMARY|PASSED|FAILED" /tmp/mcf.txt | head
grep "^=========" /tmp/mcf.txt | grep -vE "SUMMARY|^========= *$|COMPUTE-SANITIZER" | sed -E 's/0x[0-9a-f]+/ADDR/g' | sort | uniq -c | sort -rn | head -20
date -u
