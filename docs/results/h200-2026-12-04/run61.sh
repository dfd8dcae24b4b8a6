#!/bin/bash
# GPU call 61 (2026-12-04): main (the commit in the log) as issue #11
# measures it: infer-bench three rounds and the transformers baseline on
# the same prompt; in alternating rounds the GEMV's weight loads with an
# L2 prefetch hint of 256 or 128 bytes (call61/l2256.diff, l2128.diff) and
# main with an F16 KV cache (--kv-dtype f16; verify against the CPU
# first); the kernel bench's decode chain of each GEMV build. The binaries
# travel gzipped.
cd "$(dirname "$0")/../../.."
export LD_LIBRARY_PATH=$PWD/build-gpu-run/lib:$LD_LIBRARY_PATH
export FOUNDRY_TEST_DATA=$PWD/tests/data
ab=build-gpu-run/ab; m=/tmp/m3b; o=/tmp/o61; mkdir -p $o
gunzip $ab/*/*.gz && chmod +x $ab/*/*
exec > >(tee "$o/log61.txt") 2>&1
date -u
for v in base l2256 l2128; do echo "$v $($ab/$v/foundry --version | sed -n 2p)"; done
$ab/base/foundry make-model --preset llama-3.2-3b --seed 1 --out "$m" | tail -1
echo "=== base verify 3b cuda against cpu, --kv-dtype f16"
timeout 150 $ab/base/foundry verify --model "$m" --backend cuda --against cpu --kv-dtype f16 2>&1 | grep -E "relative|largest|steps|verify"
for v in base l2256 l2128; do
  echo "=== $v kernel bench rows 1, chain 20"
  timeout 90 $ab/$v/cuda_kernel_bench --chain 20 --repeats 30 --report "$o/kb-$v.json" | grep -E "matmul_q4|norm\+|residual"
done
for r in 1 2 3; do
  for v in base l2256 l2128 kv16; do
    echo "=== $v infer-bench (round $r)"
    if [ $v = kv16 ]; then
      timeout 100 $ab/base/foundry infer-bench --model "$m" --backend cuda --kv-dtype f16 --report "$o/infer-$v-$r.json" | grep -E "end to end|prefill:|decode:|decode bandwidth"
    else
      timeout 100 $ab/$v/foundry infer-bench --model "$m" --backend cuda --report "$o/infer-$v-$r.json" | grep -E "end to end|prefill:|decode:|decode bandwidth"
    fi
  done
done
echo "=== generated ids against base"
for v in l2256 l2128 kv16; do
  python3 -c "import json; a=json.load(open('$o/infer-base-1.json'))['generated_ids']; b=json.load(open('$o/infer-$v-1.json'))['generated_ids']; print('$v', a==b, sum(x==y for x,y in zip(a,b)), 'of', len(a))"
done
echo "=== transformers bf16 static cache, torch.compile, same prompt"
timeout 240 python3 scripts/torch_baseline.py --model "$m" --prompt-from "$o/infer-base-1.json" --report "$o/torch-compile.json" 2>&1 | tail -3
for r in 1 2 3; do
  python3 scripts/compare_reports.py "$o/infer-base-$r.json" "$o/torch-compile.json" 2>&1 | grep -E "end to end|prefill median|decode \(tok|same prompt|agree"
done
date -u
tar -C /tmp -czf "$OUT/call61.tgz" o61
