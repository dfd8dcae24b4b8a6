#!/bin/bash
# GPU call 77 (2026-12-04): two changes of this session, alone and
# together, against main (0da4328):
#   mlp  (branch mlp): NORM_MLP_Q4, a layer's MLP as one op; on CUDA the
#        slab kernel (gate/up + SwiGLU of 64 features a block, then those
#        64 columns of down from shared memory, copied before the wait)
#        and a reduction kernel (docs/tuning-log.md entry 54);
#   attn (branch attn-wsoft): attention decode's softmax per warp (no
#        block-wide softmax phase, 2 barriers a chunk instead of 4);
#   both (branch mlp-attn).
# Every GPU test of `both` (test_cuda_ops beside the verify runs, which
# check no memory levels; the others alone), verify of the fixtures and
# of the 3B against the CPU, the kernel bench's chain of 20 for base and
# both, infer-bench in three alternating rounds of the four builds.
cd "$(dirname "$0")/../../.."
export LD_LIBRARY_PATH=$PWD/build-gpu-run/lib:$LD_LIBRARY_PATH
export FOUNDRY_TEST_DATA=$PWD/tests/data
ab=build-gpu-run/ab; m=/tmp/m3b; o=/tmp/o77; mkdir -p $o
gunzip $ab/*/*.gz && chmod +x $ab/*/*
exec > >(tee "$o/log77.txt") 2>&1
date -u
for v in base mlp attn both; do echo "$v $($ab/$v/foundry --version | sed -n 2p)"; done
(FOUNDRY_REQUIRE_CUDA=1 timeout 300 $ab/both/test_cuda_ops > $o/ops-both.txt 2>&1; echo "rc=$?" >> $o/ops-both.txt) &
ops=$!
$ab/base/foundry make-model --preset llama-3.2-3b --seed 1 --out "$m" | tail -1
echo "=== both: fixtures verify --backend cuda"
for f in tests/data/llama3-*; do
  timeout 60 $ab/both/foundry verify --model "$f/model" --reference "$f/expected.safetensors" --backend cuda 2>&1 | tail -1
done
for v in both mlp; do
  echo "=== $v: verify 3b cuda against cpu"
  timeout 150 $ab/$v/foundry verify --model "$m" --backend cuda --against cpu 2>&1 | grep -E "relative|largest|steps|verify"
done
wait $ops
echo "=== both test_cuda_ops $(tail -1 $o/ops-both.txt)"
grep -E '^\[  FAILED|^\[  PASSED|^\[  ERROR|LINE|norm_mlp' $o/ops-both.txt | head -40
for v in base both; do
  echo "=== $v kernel bench, chain 20"
  timeout 120 $ab/$v/cuda_kernel_bench --chain 20 --repeats 30 --report "$o/kb-$v.json" | grep -E "d2d|device-to|attention|norm\+|residual"
done
for r in 1 2 3; do
  for v in base mlp attn both; do
    echo "=== $v infer-bench (round $r)"
    timeout 100 $ab/$v/foundry infer-bench --model "$m" --backend cuda --report "$o/infer-$v-$r.json" | grep -E "end to end|prefill:|decode:"
  done
done
python3 -c "
import json
ids = {v: json.load(open('$o/infer-%s-1.json' % v))['generated_ids'] for v in ('base', 'mlp', 'attn', 'both')}
for v in ('mlp', 'attn', 'both'):
    same = sum(1 for a, b in zip(ids['base'], ids[v]) if a == b)
    print(v, 'ids as base:', ids['base'] == ids[v], 'first difference at', next((i for i, (a, b) in enumerate(zip(ids['base'], ids[v])) if a != b), None))
"
for t in test_cuda_graph test_cuda test_cuda_faults; do
  s=$(date +%s)
  FOUNDRY_REQUIRE_CUDA=1 timeout 300 $ab/both/$t > $o/$t.txt 2>&1
  echo "=== both $t rc=$? ($(( $(date +%s) - s )) s)"
  grep -E '^\[  FAILED|^\[  PASSED|^\[  ERROR|LINE|above|exception' $o/$t.txt | grep -v " 0 of " | head -20
done
for sc in host_wait drain; do
  FOUNDRY_REQUIRE_CUDA=1 timeout 60 $ab/both/test_cuda_lost $sc > $o/l.txt 2>&1; echo "=== both test_cuda_lost $sc rc=$?"
done
date -u
gzip $o/ops-both.txt $o/test_cuda*.txt
tar -C /tmp -czf "$OUT/call77.tgz" o77
