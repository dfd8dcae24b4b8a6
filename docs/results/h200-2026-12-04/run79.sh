#!/bin/bash
# GPU call 79 (2026-12-04): where call 77's NORM_MLP_Q4 slab kernel
# (branch mlp, 27.1 us in a chain against 11.9 + 9.0 for the pair) spends
# its time: the kernel bench's chain of 20 for main, mlp and three
# timing-only builds of mlp (diag-*.diff; results wrong by design):
# nocopy (the down columns not copied into shared memory), nodown (no
# copy, no down items), noreduce (the reduction kernel returns after its
# wait); then ncu on one mlp_q4_kernel of mlp and of nocopy (L1 and
# memory throughput, warp stalls). Also main's test_cuda_ops with the new
# test_gemv_chunk_scales (branch chunktest), and mlp-tma (branch mlp-tma:
# the slab's down columns, scales and biases by TMA tensor copies, 12 x 3
# a block, instead of 24 cp.async a thread): its test_cuda_ops, verify of
# the 3B, the chain of 20 and infer-bench in three rounds against main.
#
# Not run: no device was lent after call 78 (2026-12-04 21:40 UTC), and
# superseded by run80.sh (the ring replaces the slab design; run80 also
# runs main's chunk test); its mlp and tma binaries were deleted. Its
# binaries, gzipped under build-gpu-run/ (ignored; rebuild them with the
# Release build of README, -DFOUNDRY_WERROR=ON): diag/kb-base from main
# 0da4328; diag/kb-mlp from branch mlp (d2e3815); diag/kb-nocopy, kb-nodown
# and kb-noreduce from mlp with diag-*.diff applied; main/test_cuda_ops
# from main with test_gemv_chunk_scales; tma/foundry, cuda_kernel_bench
# and test_cuda_ops from branch mlp-tma (1352c63, mlp-tma.diff against
# mlp), tma/foundry-base from main. lib/libcmocka.so.0 as in earlier calls.
cd "$(dirname "$0")/../../.."
export LD_LIBRARY_PATH=$PWD/build-gpu-run/lib:$LD_LIBRARY_PATH
d=build-gpu-run/diag; o=/tmp/o79; mkdir -p $o
t=build-gpu-run/tma; m=/tmp/m3b
gunzip $d/*.gz build-gpu-run/main/*.gz $t/*.gz && chmod +x $d/* build-gpu-run/main/* $t/*
exec > >(tee "$o/log79.txt") 2>&1
date -u
for v in base mlp nocopy nodown noreduce; do
  echo "=== $v kernel bench, chain 20"
  timeout 120 $d/kb-$v --chain 20 --repeats 30 --report "$o/kb-$v.json" | grep -E "device-to|norm\+gate|down\+|norm\+mlp"
done
for v in mlp nocopy; do
  echo "=== $v ncu mlp_q4_kernel"
  timeout 120 ncu --clock-control none -k regex:mlp_q4_kernel --launch-skip 2 --launch-count 1 --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats $d/kb-$v --repeats 3 --warmup 2 > $o/ncu-$v.txt 2>&1
  grep -E "Duration|Throughput|L1/TEX Hit|Issued Warp|No Eligible|Stall|Mem Busy|Max Bandwidth|Mem Pipes" $o/ncu-$v.txt | head -30
done
FOUNDRY_REQUIRE_CUDA=1 FOUNDRY_TEST_DATA=$PWD/tests/data timeout 300 build-gpu-run/main/test_cuda_ops > $o/ops-main.txt 2>&1
echo "=== main (chunktest) test_cuda_ops rc=$?"
grep -E '^\[  FAILED|^\[  PASSED|^\[  ERROR|LINE|chunk 0' $o/ops-main.txt | head -20
gzip $o/ops-main.txt
echo "=== tma $($t/foundry --version | sed -n 2p)"
FOUNDRY_REQUIRE_CUDA=1 FOUNDRY_TEST_DATA=$PWD/tests/data timeout 300 $t/test_cuda_ops > $o/ops-tma.txt 2>&1
echo "=== tma test_cuda_ops rc=$?"
grep -E '^\[  FAILED|^\[  PASSED|^\[  ERROR|LINE|norm_mlp' $o/ops-tma.txt | head -30
gzip $o/ops-tma.txt
echo "=== tma kernel bench, chain 20"
timeout 120 $t/cuda_kernel_bench --chain 20 --repeats 30 --report "$o/kb-tma.json" | grep -E "device-to|norm\+gate|down\+|norm\+mlp"
$t/foundry-base make-model --preset llama-3.2-3b --seed 1 --out "$m" | tail -1
echo "=== tma verify 3b cuda against cpu"
timeout 150 $t/foundry verify --model "$m" --backend cuda --against cpu 2>&1 | grep -E "relative|largest|steps|verify"
for r in 1 2 3; do
  for v in foundry-base foundry; do
    echo "=== $v infer-bench (round $r)"
    timeout 100 $t/$v infer-bench --model "$m" --backend cuda --report "$o/infer-$v-$r.json" | grep -E "end to end|decode:"
  done
done
date -u
tar -C /tmp -czf "$OUT/call79.tgz" o79
