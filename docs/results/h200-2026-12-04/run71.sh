#!/bin/bash
# GPU call 71 (2026-12-04): entry 50's timing-only builds put 4.6 us of a
# layer's attention between q/k staged and the scores: the K rows' trip
# from DRAM, issued only once an attention block is resident. kvpf (branch
# kvpf, call71/kvpf.diff; an experiment, backend-side table): the q/k/v
# GEMV before each attention asks L2 for that attention's K and V cache
# rows 0 .. position - 1 (cp.async.bulk.prefetch.L2, before its wait).
# verify of the 3B, infer-bench against main in three alternating rounds
# (F32 cache), then both with the F16 cache; generated ids compared.
cd "$(dirname "$0")/../../.."
export LD_LIBRARY_PATH=$PWD/build-gpu-run/lib:$LD_LIBRARY_PATH
export FOUNDRY_TEST_DATA=$PWD/tests/data
ab=build-gpu-run/ab; m=/tmp/m3b; o=/tmp/o71; mkdir -p $o
gunzip $ab/*/*.gz && chmod +x $ab/*/*
exec > >(tee "$o/log71.txt") 2>&1
date -u
for v in base kvpf; do echo "$v $($ab/$v/foundry --version | sed -n 2p)"; done
$ab/base/foundry make-model --preset llama-3.2-3b --seed 1 --out "$m" | tail -1
echo "=== kvpf verify 3b cuda against cpu"
timeout 150 $ab/kvpf/foundry verify --model "$m" --backend cuda --against cpu 2>&1 | grep -E "relative|largest|steps|verify"
for r in 1 2 3; do
  for v in base kvpf; do
    echo "=== $v infer-bench (round $r)"
    timeout 100 $ab/$v/foundry infer-bench --model "$m" --backend cuda --report "$o/infer-$v-$r.json" | grep -E "end to end|decode:"
  done
done
for r in 1 2; do
  for v in base kvpf; do
    echo "=== $v infer-bench --kv-dtype f16 (round $r)"
    timeout 100 $ab/$v/foundry infer-bench --model "$m" --backend cuda --kv-dtype f16 --report "$o/infer16-$v-$r.json" | grep -E "end to end|decode:"
  done
done
python3 -c "import json; a=json.load(open('$o/infer-base-1.json'))['generated_ids']; b=json.load(open('$o/infer-kvpf-1.json'))['generated_ids']; print('kvpf ids as base:', a==b)"
date -u
tar -C /tmp -czf "$OUT/call71.tgz" o71
