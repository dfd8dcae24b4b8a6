#!/bin/bash
# GPU call 80: the TMA weight rings of branch mlp-ring against main
# (docs/tuning-log.md entries 57 and 58): NORM_MLP_Q4 as one persistent
# kernel (mlp_q4.cu) and the LM head's GEMV as one (gemv_ring.cu). Their
# GPU tests (test_cuda_ops: test_decode_mlp's ring shapes, the GEMV/ring
# boundary, test_gemv_ring_norm; test_cuda_graph, test_cuda), main's
# test_cuda_ops with test_gemv_chunk_scales (never run on a GPU yet),
# verify of the fixtures and of the 3B against the CPU, the kernel bench's
# chain of 20 for main, ring and two timing-only builds of ring
# (diag-ring-*.diff; results wrong by design: nocompute, the MLP's
# consumers only wait for and free the slots; nowait, no block waits for
# another), ncu on one launch of each ring kernel, infer-bench in three
# alternating rounds of main, ringmlp (the MLP ring alone:
# diag-ring-nohead.diff, the LM head on the GEMV), ring and ringpacked
# (diag-ring-packed.diff: a gate/up unit's and an LM head tile's 16 rows
# unpadded, one bulk copy per matrix and kind instead of one per row, at
# the price of 2-way bank conflicts on the weight reads; results the same
# as ring's), with verify of ringpacked too.
#
# Binaries, gzipped under build-gpu-run/ (ignored; rebuild them with the
# Release build of README, -DFOUNDRY_WERROR=ON): ring/ from branch
# mlp-ring (b63082c); ringmlp/foundry, ringpacked/ and ringdiag/kb-* from
# b63082c with diag-ring-*.diff applied; tma/foundry-base and diag/kb-base from main
# 0da4328 (main's source since then differs in tests and docs only);
# main/test_cuda_ops from main 6344130; lib/libcmocka.so.0 as in earlier
# calls.
cd "$(dirname "$0")/../../.."
export LD_LIBRARY_PATH=$PWD/build-gpu-run/lib:$LD_LIBRARY_PATH
export FOUNDRY_TEST_DATA=$PWD/tests/data
g=build-gpu-run; m=/tmp/m3b; o=/tmp/o80; mkdir -p $o
gunzip $g/ring/*.gz $g/ringmlp/*.gz $g/ringpacked/*.gz $g/ringdiag/*.gz $g/main/*.gz $g/tma/foundry-base.gz $g/diag/kb-base.gz
chmod +x $g/ring/* $g/ringmlp/* $g/ringpacked/* $g/ringdiag/* $g/main/* $g/tma/foundry-base $g/diag/kb-base
base=$g/tma/foundry-base; ring=$g/ring/foundry; ringmlp=$g/ringmlp/foundry
packed=$g/ringpacked/foundry
exec > >(tee "$o/log80.txt") 2>&1
date -u
for f in $base $ringmlp $ring $packed; do echo "$f $($f --version | sed -n 2p)"; done
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader
(FOUNDRY_REQUIRE_CUDA=1 timeout 300 $g/ring/test_cuda_ops > $o/ops-ring.txt 2>&1; echo "rc=$?" >> $o/ops-ring.txt) &
ops=$!
$base make-model --preset llama-3.2-3b --seed 1 --out "$m" | tail -1
echo "=== ring: fixtures verify --backend cuda"
for f in tests/data/llama3-*; do
  timeout 60 $ring verify --model "$f/model" --reference "$f/expected.safetensors" --backend cuda 2>&1 | tail -1
done
for f in $ring $packed; do
  echo "=== $f: verify 3b cuda against cpu"
  timeout 150 $f verify --model "$m" --backend cuda --against cpu 2>&1 | grep -E "relative|largest|steps|verify|ring kernel"
done
wait $ops
echo "=== ring test_cuda_ops $(tail -1 $o/ops-ring.txt)"
grep -E '^\[  FAILED|^\[  PASSED|^\[  ERROR|LINE|ring kernel|norm_mlp|2047 tiles|2048 tiles|lm_head|out 4000' $o/ops-ring.txt | head -90
FOUNDRY_REQUIRE_CUDA=1 timeout 300 $g/main/test_cuda_ops > $o/ops-main.txt 2>&1
echo "=== main test_cuda_ops rc=$?"
grep -E '^\[  FAILED|^\[  PASSED|^\[  ERROR|LINE|ring kernel|chunk 0' $o/ops-main.txt | head -20
for v in base ring packed nocompute nowait; do
  kb=$g/ringdiag/kb-$v; [ $v = base ] && kb=$g/diag/kb-base; [ $v = ring ] && kb=$g/ring/cuda_kernel_bench
  [ $v = packed ] && kb=$g/ringpacked/cuda_kernel_bench
  echo "=== $v kernel bench, chain 20"
  timeout 120 $kb --chain 20 --repeats 30 --report "$o/kb-$v.json" | grep -E "device-to|norm\+gate|down\+|norm\+mlp|head"
done
for k in mlp_ring_kernel gemv_ring_kernel; do
  echo "=== ring ncu $k"
  timeout 150 ncu --clock-control none -k regex:$k --launch-skip 2 --launch-count 1 --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats $g/ring/cuda_kernel_bench --repeats 3 --warmup 2 > $o/ncu-$k.txt 2>&1
  grep -E "Duration|Throughput|Issued Warp|No Eligible|Stall|Mem Busy|Max Bandwidth" $o/ncu-$k.txt | head -24
done
for r in 1 2 3; do
  for v in base ringmlp ring packed; do
    f=$base; [ $v = ring ] && f=$ring; [ $v = ringmlp ] && f=$ringmlp; [ $v = packed ] && f=$packed
    echo "=== $v infer-bench (round $r)"
    timeout 100 $f infer-bench --model "$m" --backend cuda --report "$o/infer-$v-$r.json" | grep -E "end to end|prefill:|decode:|ring kernel|error"
  done
done
python3 -c "
import json
a = json.load(open('$o/infer-base-1.json'))['generated_ids']
for v in ('ringmlp', 'ring', 'packed'):
    b = json.load(open('$o/infer-%s-1.json' % v))['generated_ids']
    print(v, 'ids as base:', a == b, 'first difference at', next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None))
"
for t in test_cuda_graph test_cuda; do
  s=$(date +%s)
  FOUNDRY_REQUIRE_CUDA=1 timeout 300 $g/ring/$t > $o/$t.txt 2>&1
  echo "=== ring $t rc=$? ($(( $(date +%s) - s )) s)"
  grep -E '^\[  FAILED|^\[  PASSED|^\[  ERROR|LINE|ring kernel|above|exception' $o/$t.txt | grep -v " 0 of " | head -20
done
date -u
gzip $o/ops-*.txt $o/test_cuda*.txt $o/ncu-*.txt
tar -C /tmp -czf "$OUT/call80.tgz" o80
