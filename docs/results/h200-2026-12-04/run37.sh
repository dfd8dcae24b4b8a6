#!/bin/bash
# GPU call 37 (2026-12-04; commit in the log): what each decode kernel
# costs inside the real decode graph. Timing-only variants of the commit
# (call37/*.diff; their outputs are wrong by design) return right after
# fdy_grid_wait in one kernel: rope_attention, norm + q/k/v, the residual
# GEMVs (o and down), norm + gate/up + SwiGLU, the final norm + LM head.
# infer-bench's decode time minus a variant's is that kernel's body.
cd "$(dirname "$0")/../../.."
b=build-gpu-run; m=/tmp/m3b
exec > >(tee "$OUT/log37.txt") 2>&1
date -u; $b/foundry --version | sed -n 2p
$b/foundry make-model --preset llama-3.2-3b --seed 1 --out "$m" | tail -1
for v in base skip_attn skip_qkv skip_res skip_gateup skip_head base; do
  s=_$v; [ $v = base ] && s=
  echo "=== infer-bench $v"
  timeout 100 $b/foundry$s infer-bench --model "$m" --backend cuda --report "$OUT/infer-$v-$(date +%s%N).json" | grep -E "end to end|decode:"
done
date -u
