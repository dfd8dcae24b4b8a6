#!/bin/bash
# GPU call 82: branch tail-ring (docs/tuning-log.md entry 59): the decode
# layer's o + residual + MLP as one MATMUL_ADD_MLP_Q4 on the ring kernel,
# with entries 57-58's rings, against main and mlp-ring. Its GPU tests
# (test_cuda_ops: test_decode_mlp, test_decode_out_mlp, the ring GEMV's;
# test_cuda_graph, test_cuda, test_cuda_faults, test_cuda_lost), verify of
# the fixtures and of the 3B against the CPU, the kernel bench's chain of
# 20 (o+mlp beside norm+mlp and the pair), infer-bench in three
# alternating rounds of main, ring and tail, the generated ids compared.
#
# Binaries, gzipped under build-gpu-run/ (ignored; rebuild them with the
# Release build of README, -DFOUNDRY_WERROR=ON): tail/ from branch
# tail-ring (cd2309a), ring/ from mlp-ring (run80.sh),
# tma/foundry-base and diag/kb-base from main 0da4328 (main's source since
# then differs in tests and docs only); lib/libcmocka.so.0.
cd "$(dirname "$0")/../../.."
export LD_LIBRARY_PATH=$PWD/build-gpu-run/lib:$LD_LIBRARY_PATH
export FOUNDRY_TEST_DATA=$PWD/tests/data
g=build-gpu-run; m=/tmp/m3b; o=/tmp/o82; mkdir -p $o
gunzip $g/tail/*.gz $g/ring/foundry.gz $g/tma/foundry-base.gz $g/diag/kb-base.gz
chmod +x $g/tail/* $g/ring/foundry $g/tma/foundry-base $g/diag/kb-base
base=$g/tma/foundry-base; ring=$g/ring/foundry; tail=$g/tail/foundry
exec > >(tee "$o/log82.txt") 2>&1
date -u
for f in $base $ring $tail; do echo "$f $($f --version | sed -n 2p)"; done
(FOUNDRY_REQUIRE_CUDA=1 timeout 300 $g/tail/test_cuda_ops > $o/ops-tail.txt 2>&1; echo "rc=$?" >> $o/ops-tail.txt) &
ops=$!
$base make-model --preset llama-3.2-3b --seed 1 --out "$m" | tail -1
echo "=== tail: fixtures verify --backend cuda"
for f in tests/data/llama3-*; do
  timeout 60 $tail verify --model "$f/model" --reference "$f/expected.safetensors" --backend cuda 2>&1 | tail -1
done
echo "=== tail: verify 3b cuda against cpu"
timeout 150 $tail verify --model "$m" --backend cuda --against cpu 2>&1 | grep -E "relative|largest|steps|verify|ring kernel"
wait $ops
echo "=== tail test_cuda_ops $(tail -1 $o/ops-tail.txt)"
grep -E '^\[  FAILED|^\[  PASSED|^\[  ERROR|LINE|ring kernel|_mlp_q4|2047 tiles|2048 tiles|lm_head|out 4000' $o/ops-tail.txt | head -100
for v in base tail; do
  kb=$g/diag/kb-base; [ $v = tail ] && kb=$g/tail/cuda_kernel_bench
  echo "=== $v kernel bench, chain 20"
  timeout 120 $kb --chain 20 --repeats 30 --report "$o/kb-$v.json" | grep -E "device-to|o\+residual|norm\+gate|down\+|mlp|head"
done
echo "=== tail ncu mlp_ring_kernel (o+mlp: the 8th launch, after norm+mlp's 5)"
timeout 150 ncu --clock-control none -k regex:mlp_ring_kernel --launch-skip 7 --launch-count 1 --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats $g/tail/cuda_kernel_bench --repeats 3 --warmup 2 > $o/ncu-tail.txt 2>&1
grep -E "Duration|Throughput|No Eligible|Stall|Mem Busy|Max Bandwidth" $o/ncu-tail.txt | head -20
for r in 1 2 3; do
  for v in base ring tail; do
    f=$base; [ $v = ring ] && f=$ring; [ $v = tail ] && f=$tail
    echo "=== $v infer-bench (round $r)"
    timeout 100 $f infer-bench --model "$m" --backend cuda --report "$o/infer-$v-$r.json" | grep -E "end to end|prefill:|decode:|ring kernel|error"
  done
done
python3 -c "
import json
a = json.load(open('$o/infer-base-1.json'))['generated_ids']
for v in ('ring', 'tail'):
    b = json.load(open('$o/infer-%s-1.json' % v))['generated_ids']
    print(v, 'ids as base:', a == b, 'first difference at', next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None))
"
for t in test_cuda_graph test_cuda test_cuda_faults; do
  s=$(date +%s)
  FOUNDRY_REQUIRE_CUDA=1 timeout 300 $g/tail/$t > $o/$t.txt 2>&1
  echo "=== tail $t rc=$? ($(( $(date +%s) - s )) s)"
  grep -E '^\[  FAILED|^\[  PASSED|^\[  ERROR|LINE|ring kernel|above|exception' $o/$t.txt | grep -v " 0 of " | head -20
done
for sc in host_wait drain; do
  FOUNDRY_REQUIRE_CUDA=1 timeout 60 $g/tail/test_cuda_lost $sc > $o/l.txt 2>&1; echo "=== tail test_cuda_lost $sc rc=$?"
done
date -u
gzip $o/ops-*.txt $o/test_cuda*.txt $o/ncu-*.txt
tar -C /tmp -czf "$OUT/call82.tgz" o82
