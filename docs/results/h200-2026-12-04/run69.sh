#!/bin/bash
# GPU call 69 (2026-12-04): A/B of main (base) against four one-constant
# builds (/work/variants/*.py, diffs in call69/): wide_all (GEMV_WIDE_TILES
# 1024: gate/up + SwiGLU in 16-warp blocks too), narrow_all (0: every GEMV
# in two 8-warp blocks per SM), chunk128 and chunk32 (attention decode's
# DECODE_MIN_CHUNK, 64 in main). infer-bench in three alternating rounds,
# generated ids compared. The binaries travel gzipped.
cd "$(dirname "$0")/../../.."
export LD_LIBRARY_PATH=$PWD/build-gpu-run/lib:$LD_LIBRARY_PATH
export FOUNDRY_TEST_DATA=$PWD/tests/data
ab=build-gpu-run/ab; m=/tmp/m3b; o=/tmp/o69; mkdir -p $o
gunzip $ab/*/*.gz && chmod +x $ab/*/*
exec > >(tee "$o/log69.txt") 2>&1
date -u
vs="base wide_all narrow_all chunk128 chunk32"
for v in $vs; do echo "$v $($ab/$v/foundry --version | sed -n 2p)"; done
$ab/base/foundry make-model --preset llama-3.2-3b --seed 1 --out "$m" | tail -1
for r in 1 2 3; do
  for v in $vs; do
    echo "=== $v infer-bench (round $r)"
    timeout 100 $ab/$v/foundry infer-bench --model "$m" --backend cuda --report "$o/infer-$v-$r.json" | grep -E "end to end|decode:"
  done
done
echo "=== generated ids against base"
for v in wide_all narrow_all chunk128 chunk32; do
  python3 -c "import json; a=json.load(open('$o/infer-base-1.json'))['generated_ids']; b=json.load(open('$o/infer-$v-1.json'))['generated_ids']; print('$v', a==b, sum(x==y for x,y in zip(a,b)), 'of', len(a))"
done
date -u
tar -C /tmp -czf "$OUT/call69.tgz" o69
