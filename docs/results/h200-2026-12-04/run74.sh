#!/bin/bash
# GPU call 74 (2026-12-04): entry 49's attention counter and combine (3.0 us
# a layer) moved into the o projection: branch ocomb (call74/ocomb.diff,
# an experiment behind FOUNDRY_OCOMB=1): attention decode leaves its chunks'
# partials (up to 16 chunks) and the next one-row MATMUL_ADD_Q4 reading its
# output combines them while it stages x. One binary: off (unset) and on
# (FOUNDRY_OCOMB=1). test_cuda_ops and test_cuda_graph off (the kernels'
# default paths), verify of the 3B on, infer-bench off and on in three
# alternating rounds, ids compared.
cd "$(dirname "$0")/../../.."
export LD_LIBRARY_PATH=$PWD/build-gpu-run/lib:$LD_LIBRARY_PATH
export FOUNDRY_TEST_DATA=$PWD/tests/data
b=build-gpu-run/ab/ocomb; m=/tmp/m3b; o=/tmp/o74; mkdir -p $o
gunzip $b/*.gz && chmod +x $b/*
exec > >(tee "$o/log74.txt") 2>&1
date -u; $b/foundry --version | sed -n 2p
(FOUNDRY_REQUIRE_CUDA=1 timeout 300 $b/test_cuda_ops > $o/ops.txt 2>&1; echo "rc=$?" >> $o/ops.txt) &
ops=$!
$b/foundry make-model --preset llama-3.2-3b --seed 1 --out "$m" | tail -1
wait $ops
echo "=== test_cuda_ops (off) $(tail -1 $o/ops.txt)"; grep -E '^\[  FAILED|^\[  PASSED' $o/ops.txt
FOUNDRY_REQUIRE_CUDA=1 timeout 120 $b/test_cuda_graph > $o/graph.txt 2>&1; echo "=== test_cuda_graph (off) rc=$?"; grep -E '^\[  FAILED|^\[  PASSED' $o/graph.txt
for f in tests/data/llama3-*; do
  FOUNDRY_OCOMB=1 timeout 60 $b/foundry verify --model "$f/model" --reference "$f/expected.safetensors" --backend cuda 2>&1 | tail -1
done
echo "=== verify 3b cuda against cpu, on"
FOUNDRY_OCOMB=1 timeout 150 $b/foundry verify --model "$m" --backend cuda --against cpu 2>&1 | grep -E "relative|largest|steps|verify"
for r in 1 2 3; do
  echo "=== off infer-bench (round $r)"
  timeout 100 $b/foundry infer-bench --model "$m" --backend cuda --report "$o/infer-off-$r.json" | grep -E "end to end|decode:"
  echo "=== on infer-bench (round $r)"
  FOUNDRY_OCOMB=1 timeout 100 $b/foundry infer-bench --model "$m" --backend cuda --report "$o/infer-on-$r.json" | grep -E "end to end|decode:"
done
python3 -c "import json; a=json.load(open('$o/infer-off-1.json'))['generated_ids']; b=json.load(open('$o/infer-on-1.json'))['generated_ids']; print('on ids as off:', a==b, sum(x==y for x,y in zip(a,b)), 'of', len(a))"
date -u
tar -C /tmp -czf "$OUT/call74.tgz" o74
