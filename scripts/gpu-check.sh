#!/bin/bash
# The GPU verification and the batched measurements, on a machine with an
# NVIDIA GPU, from binaries built for it (the build directory of
# `cmake -B DIR -DCMAKE_BUILD_TYPE=Release` with CUDA, or a folder holding
# its foundry binary and tests/cuda test executables in the same layout):
#
#   scripts/gpu-check.sh OUTDIR BUILD [BASELINE_FOUNDRY] [--quick]
#                        [--stages LIST] [--batches LIST]
#
# Stages (all by default, in this order; LIST is comma-separated):
#   ops       test_cuda_ops with FOUNDRY_REQUIRE_CUDA=1;
#   tests     the other GPU tests likewise (test_cuda, test_cuda_graph,
#             test_cuda_faults) and the backend contract suite over cuda
#             (test_backend_contract cuda);
#   verify    verify --backend cuda on every fixture of tests/data;
#   verify3b  a random Llama 3.2 3B (make-model, seed 1) against the CPU
#             backend;
#   batched   infer-bench (token-ids-512x128-v1, --kv-dtype f16) of the 3B
#             at batch 1, 8, 32, 64 and 128 (--batches), resident and
#             streamed under a 512 MiB weight budget, with each report's
#             same-run
#             host-to-device ceiling; the ids of every sequence compared
#             between the batched runs (bitwise batch invariance for
#             B >= 2 makes them equal);
#   trace     Chrome traces of the 3B at batch 64, streamed (the copies
#             against the batch's compute) and resident, each with its
#             device time per op kind (scripts/trace_ops.py);
#   8b        a random Llama 3.1 8B streamed under 1 GiB at batch 64;
#   speculative  the 3B streamed under 512 MiB drafting for itself (K 8
#             fixed: every proposal accepted, the mechanism's ceiling)
#             and without a draft; unless --quick, a random Llama 3.2 1B
#             drafting for the 8B streamed under 1 GiB, and the 8B alone;
#   baseline  batch 1 against BASELINE_FOUNDRY (a foundry binary of the
#             commit to compare with) in alternating rounds;
#   peers     when python3 imports torch and transformers, at batch 64 on
#             the prompts of OUTDIR/resident-b64.json: transformers bf16
#             with a static cache (resident);
#   offload   the same with Accelerate offload under 2 GiB (the smallest
#             budget it accepts for the 3B), 16 ids per sequence;
#   serve     `foundry serve` of the 3B (64 sequences, --kv-dtype f16,
#             context 1024), resident and streamed under 512 MiB, loaded
#             by scripts/serve_load.py with prompts of 512 ids and 128
#             generated at 1, 8, 32 and 64 concurrent clients (or the
#             counts of SERVE_CLIENTS in the environment),
#             2 requests each, after one warm-up request;
#   lab       every program of the kernel lab (BUILD/lab: lab/cuda/README.md)
#             with all its versions, twice in alternating order: each checks
#             its versions against its CPU reference (a mismatch fails the
#             stage) and times them against the same run's copy rate.
#
# --quick (for a short device lease): the stages ops, verify, batched,
# baseline and peers unless --stages says otherwise; batches 1, 8 and 64
# resident and 1 and 64 streamed unless --batches says otherwise, the
# streamed ones with 1 warm-up and 3 measured executions.
#
# Writes every report and a summary (summary.txt, appended to) to OUTDIR,
# and all of it as OUTDIR.tar.gz; prints the summary. Exits 1 when a test
# or a check fails.
set -u
usage() {
  echo "usage: scripts/gpu-check.sh OUTDIR BUILD [BASELINE_FOUNDRY] [--quick]" \
    "[--stages LIST]" >&2
  exit 2
}
[ $# -ge 2 ] || usage
out=$1
build=$2
shift 2
baseline=""
quick=0
stages=""
batches=""
while [ $# -gt 0 ]; do
  case $1 in
  --quick) quick=1 ;;
  --stages)
    [ $# -ge 2 ] || usage
    stages=$2
    shift
    ;;
  --batches)
    [ $# -ge 2 ] || usage
    batches=${2//,/ }
    shift
    ;;
  -*) usage ;;
  *)
    [ -z "$baseline" ] || usage
    baseline=$1
    ;;
  esac
  shift
done
if [ -z "$stages" ]; then
  stages=ops,tests,verify,verify3b,batched,trace,8b,speculative,baseline,peers,offload,serve,lab
  [ $quick -eq 1 ] && stages=ops,verify,batched,baseline,peers
fi
for stage in ${stages//,/ }; do
  case $stage in
  ops | tests | verify | verify3b | batched | trace | 8b | speculative | baseline | peers | offload | serve | lab) ;;
  *)
    echo "gpu-check: unknown stage '$stage' (ops, tests, verify, verify3b," \
      "batched, trace, 8b, speculative, baseline, peers, offload, serve," \
      "lab)" >&2
    exit 2
    ;;
  esac
done
for b in $batches; do
  case $b in
  '' | *[!0-9]*) usage ;;
  esac
done
runs() { case ",$stages," in *",$1,"*) return 0 ;; esac; return 1; }
root=$(cd "$(dirname "$0")/.." && pwd)
foundry=$build/foundry
[ -x "$foundry" ] || foundry=$build/src/cli/foundry
if [ ! -x "$foundry" ]; then
  echo "gpu-check: no foundry binary in $build" >&2
  exit 2
fi
mkdir -p "$out"
summary=$out/summary.txt
failed=0
note() { echo "$*" | tee -a "$summary"; }
fail() {
  note "FAIL: $*"
  failed=1
}
export FOUNDRY_TEST_DATA=$root/tests/data FOUNDRY_REQUIRE_CUDA=1
note "gpu-check $(date -u +%Y-%m-%dT%H:%MZ) $("$foundry" --version | head -1)" \
  "stages $stages"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader |
  tee -a "$summary"
model=/tmp/gpu-check-3b
if runs verify3b || runs batched || runs trace || runs baseline ||
  runs peers || runs offload || runs speculative; then
  [ -d "$model" ] || "$foundry" make-model --preset llama-3.2-3b --seed 1 \
    --out "$model" >/dev/null
fi

tests=""
runs ops && tests=test_cuda_ops
runs tests && tests="$tests test_cuda test_cuda_graph test_cuda_faults"
if [ -n "$tests" ]; then
  for t in $tests; do
    bin=$build/tests/cuda/$t
    [ -x "$bin" ] || bin=$build/$t
    if [ ! -x "$bin" ]; then
      fail "$t: not built"
      continue
    fi
    start=$(date +%s)
    timeout 300 "$bin" >"$out/$t.txt" 2>&1
    rc=$?
    note "$t: rc $rc ($(($(date +%s) - start)) s)"
    grep -E '^\[  FAILED|^\[  ERROR|LINE' "$out/$t.txt" | head -20 |
      tee -a "$summary"
    [ $rc -eq 0 ] || fail "$t"
  done
fi
if runs tests; then
  bin=$build/tests/contract/test_backend_contract
  [ -x "$bin" ] || bin=$build/test_backend_contract
  if [ -x "$bin" ]; then
    start=$(date +%s)
    timeout 300 "$bin" cuda >"$out/contract_cuda.txt" 2>&1
    rc=$?
    note "test_backend_contract cuda: rc $rc ($(($(date +%s) - start)) s)"
    grep -E '^\[  FAILED|^\[  ERROR|LINE' "$out/contract_cuda.txt" | head -20 |
      tee -a "$summary"
    [ $rc -eq 0 ] || fail "test_backend_contract cuda"
  else
    fail "test_backend_contract: not built"
  fi
fi

if runs verify; then
  for f in "$root"/tests/data/*/; do
    f=${f%/}
    [ -f "$f/expected.safetensors" ] || continue
    line=$(timeout 120 "$foundry" verify --model "$f/model" \
      --reference "$f/expected.safetensors" --backend cuda 2>&1 | tail -1)
    note "verify $(basename "$f"): $line"
    case $line in *passed*) ;; *) fail "verify $(basename "$f")" ;; esac
  done
fi

if runs verify3b; then
  timeout 300 "$foundry" verify --model "$model" --backend cuda --against cpu \
    >"$out/verify-3b.txt" 2>&1
  rc=$?
  note "verify 3B cuda against cpu: rc $rc: $(tail -1 "$out/verify-3b.txt")"
  [ $rc -eq 0 ] || fail "verify 3B against cpu"
fi

bench() { # NAME MODEL ARGS...: one infer-bench report
  local name=$1 m=$2
  shift 2
  timeout 420 "$foundry" infer-bench --model "$m" --backend cuda \
    --kv-dtype f16 "$@" --report "$out/$name.json" >"$out/$name.txt" 2>&1 ||
    fail "infer-bench $name: $(tail -1 "$out/$name.txt")"
}

if runs batched; then
  streamed_batches=$batches
  streamed_runs=""
  if [ $quick -eq 1 ]; then
    [ -n "$batches" ] || { batches="1 8 64" && streamed_batches="1 64"; }
    streamed_runs="--warmup 1 --iterations 3"
  fi
  [ -n "$batches" ] || { batches="1 8 32 64 128" && streamed_batches=$batches; }
  for b in $batches; do
    bench "resident-b$b" "$model" --batch "$b"
  done
  for b in $streamed_batches; do
    # shellcheck disable=SC2086
    bench "streamed-b$b" "$model" --batch "$b" --weight-budget 512MiB \
      --buffers 2 $streamed_runs
  done
  # shellcheck disable=SC2086
  python3 - "$out" $batches <<'PY' | tee -a "$summary"
import json, os, sys
out, batches = sys.argv[1], [int(b) for b in sys.argv[2:]]
def load(name):
    path = os.path.join(out, name + ".json")
    return json.load(open(path)) if os.path.exists(path) else None
print("B | resident tok/s | streamed tok/s | streamed bound | streamed bytes/step")
ids = {}
for b in batches:
    r, s = load(f"resident-b{b}"), load(f"streamed-b{b}")
    cell = lambda x, k: "-" if x is None else "%.1f" % x["statistics"][k]
    bound = "-"
    if s and s.get("streaming") and s["streaming"].get("aggregate_decode_tokens_per_second_bound"):
        bound = "%.1f" % s["streaming"]["aggregate_decode_tokens_per_second_bound"]
    step = "-" if s is None else s["weights"]["streamed_bytes_per_decode_step"]
    print(f"{b} | {cell(r, 'aggregate_decode_tokens_per_second')} | "
          f"{cell(s, 'aggregate_decode_tokens_per_second')} | {bound} | {step}")
    for kind, x in (("resident", r), ("streamed", s)):
        if x is not None and b >= 2:
            ids[(kind, b)] = x["generated_ids_by_sequence"]
# batch invariance: a sequence's ids equal in every batch of 2 or more
bad = 0
for (kind, b), seqs in ids.items():
    for (kind2, b2), seqs2 in ids.items():
        n = min(len(seqs), len(seqs2))
        for k in range(n):
            if seqs[k] != seqs2[k]:
                bad += 1
                print(f"FAIL: sequence {k} differs: {kind} B={b} vs {kind2} B={b2}")
print(f"batched ids compared across {len(ids)} reports: {bad} differences")
sys.exit(1 if bad else 0)
PY
  [ "${PIPESTATUS[0]}" -eq 0 ] || failed=1
fi

if runs trace; then
  bench streamed-b64-traced "$model" --batch 64 --weight-budget 512MiB \
    --buffers 2 --warmup 1 --iterations 1 --trace "$out/streamed-b64.trace.json"
  bench resident-b64-traced "$model" --batch 64 --warmup 1 --iterations 1 \
    --trace "$out/resident-b64.trace.json"
  for t in streamed-b64 resident-b64; do
    [ -f "$out/$t.trace.json" ] || continue
    note "trace: $out/$t.trace.json"
    python3 "$root/scripts/trace_ops.py" "$out/$t.trace.json" |
      tee -a "$summary"
  done
fi

if runs 8b; then
  model8=/tmp/gpu-check-8b
  [ -d "$model8" ] || "$foundry" make-model --preset llama-3.1-8b --seed 1 \
    --out "$model8" >/dev/null
  bench streamed-8b-b64 "$model8" --batch 64 --weight-budget 1GiB --buffers 2 \
    --warmup 1 --iterations 3
  [ -f "$out/streamed-8b-b64.json" ] && python3 -c "
import json, sys
r = json.load(open(sys.argv[1]))
b = (r.get('streaming') or {}).get('aggregate_decode_tokens_per_second_bound')
print('8B streamed 1 GiB, batch 64: %.1f tok/s aggregate (bound %s)' % (
    r['statistics']['aggregate_decode_tokens_per_second'],
    '-' if b is None else '%.1f' % b))
" "$out/streamed-8b-b64.json" | tee -a "$summary"
fi

spec_line() { # NAME: a speculative report's figures
  [ -f "$out/$1.json" ] || return 0
  python3 -c "
import json, sys
r = json.load(open(sys.argv[1]))
s, x = r['statistics'], r.get('speculative') or {}
print('%s: decode %.1f tok/s, end to end %.3f s' % (sys.argv[2],
      s['decode_tokens_per_second'], s['end_to_end']['median_seconds']) +
      ('' if not x else ', acceptance %.3f, %.2f ids per target pass'
       % (x['acceptance_rate'], x['ids_per_target_pass'])))
" "$out/$1.json" "$1" | tee -a "$summary"
}
if runs speculative; then
  runs3="--warmup 1 --iterations 3 --weight-budget 512MiB --buffers 2"
  # shellcheck disable=SC2086
  bench spec-3b-plain "$model" $runs3 && spec_line spec-3b-plain
  # shellcheck disable=SC2086
  bench spec-3b-self "$model" $runs3 --draft-model "$model" \
    --draft-tokens 8 --draft-fixed && spec_line spec-3b-self
  if [ $quick -eq 0 ]; then
    model8=/tmp/gpu-check-8b model1=/tmp/gpu-check-1b
    [ -d "$model8" ] || "$foundry" make-model --preset llama-3.1-8b --seed 1 \
      --out "$model8" >/dev/null
    [ -d "$model1" ] || "$foundry" make-model --preset llama-3.2-1b --seed 1 \
      --out "$model1" >/dev/null
    runs8="--warmup 1 --iterations 2 --weight-budget 1GiB --buffers 2"
    # shellcheck disable=SC2086
    bench spec-8b-plain "$model8" $runs8 && spec_line spec-8b-plain
    # shellcheck disable=SC2086
    bench spec-8b-1b "$model8" $runs8 --draft-model "$model1" \
      --draft-tokens 4 && spec_line spec-8b-1b
  fi
fi

if runs baseline && [ -n "$baseline" ]; then
  for r in 1 2; do
    timeout 200 "$baseline" infer-bench --model "$model" --backend cuda \
      --report "$out/baseline-$r.json" >/dev/null 2>&1 ||
      fail "baseline infer-bench round $r"
    timeout 200 "$foundry" infer-bench --model "$model" --backend cuda \
      --report "$out/new-$r.json" >/dev/null 2>&1 ||
      fail "infer-bench round $r"
  done
  python3 - "$out" <<'PY' | tee -a "$summary"
import json, os, sys
out = sys.argv[1]
for r in (1, 2):
    for name in (f"baseline-{r}", f"new-{r}"):
        p = os.path.join(out, name + ".json")
        if os.path.exists(p):
            s = json.load(open(p))["statistics"]
            print(f"batch 1 {name}: decode {s['decode_tokens_per_second']:.1f} "
                  f"tok/s, prefill {s['prefill_median_seconds'] * 1e3:.2f} ms, "
                  f"end to end {s['end_to_end']['median_seconds']:.4f} s")
PY
fi

peer() { # NAME ARGS...: one transformers report at batch 64
  local name=$1
  shift
  if ! python3 -c "import torch, transformers" 2>/dev/null ||
    [ ! -f "$out/resident-b64.json" ]; then
    note "$name: skipped (no torch and transformers, or no resident-b64.json)"
    return
  fi
  timeout 400 python3 "$root/scripts/torch_baseline.py" --model "$model" \
    --prompt-from "$out/resident-b64.json" --batch 64 "$@" \
    --report "$out/$name.json" >"$out/$name.txt" 2>&1 ||
    fail "$name: $(tail -1 "$out/$name.txt")"
  [ -f "$out/$name.json" ] && python3 -c "
import json, sys
s = json.load(open(sys.argv[1]))['statistics']
print(sys.argv[2], 'aggregate decode %.1f tok/s' % s['aggregate_decode_tokens_per_second'])
" "$out/$name.json" "$name" | tee -a "$summary"
}
runs peers && peer torch-b64
runs offload && peer torch-offload-b64 --offload-budget 2GiB --gen-tokens 16 \
  --warmup 1 --iterations 3

serve_mode() { # MODE ARGS...: a server of the 3B, loaded at each count
  local mode=$1 pid port="" i=0 c
  shift
  "$foundry" serve --model "$model" --backend cuda --kv-dtype f16 \
    --context 1024 --max-sequences 64 --max-queue 256 --port 0 "$@" \
    2>"$out/serve-$mode.err" &
  pid=$!
  while [ -z "$port" ] && [ $i -lt 600 ] && kill -0 $pid 2>/dev/null; do
    sleep 0.1
    i=$((i + 1))
    port=$(sed -n 's|.*listening on http://127.0.0.1:\([0-9]*\).*|\1|p' \
      "$out/serve-$mode.err")
  done
  if [ -z "$port" ]; then
    fail "serve $mode: not listening: $(tail -1 "$out/serve-$mode.err")"
    kill $pid 2>/dev/null
    wait $pid
    return
  fi
  load() { python3 "$root/scripts/serve_load.py" --url "http://127.0.0.1:$port" "$@"; }
  load --prompt-tokens 512 --max-tokens 8 --clients 1 --requests 1 \
    >"$out/serve-$mode-warmup.json" 2>&1 || fail "serve $mode: warm-up"
  for c in $clients; do
    load --prompt-tokens 512 --max-tokens 128 --clients "$c" \
      --requests 2 --distinct "$c" >"$out/serve-$mode-c$c.json" \
      2>"$out/serve-$mode-c$c.err" || fail "serve $mode, $c clients"
  done
  kill -TERM $pid
  wait $pid || fail "serve $mode: exit status $?"
}
if runs serve; then
  clients=${SERVE_CLIENTS:-1 8 32 64}
  serve_mode resident
  serve_mode streamed --weight-budget 512MiB --buffers 2
  python3 - "$out" <<'PY' | tee -a "$summary"
import glob, json, os, re, sys
out = sys.argv[1]
print("serve | clients | tok/s | TTFT p50 / p99 s | ITL p50 / p99 ms | failed")
for path in sorted(glob.glob(os.path.join(out, "serve-*-c*.json")),
                   key=lambda p: (p, int(re.search(r"-c(\d+)", p).group(1)))):
    mode, c = re.search(r"serve-(\w+)-c(\d+)\.json", path).groups()
    try:
        r = json.loads(open(path).read().strip().splitlines()[-1])
    except (ValueError, IndexError):
        print(f"{mode} | {c} | unreadable report")
        continue
    print(f"{mode} | {c} | {r['tokens_per_second']:.1f} | "
          f"{r['ttft_p50']:.3f} / {r['ttft_p99']:.3f} | "
          f"{r['itl_p50'] * 1e3:.2f} / {r['itl_p99'] * 1e3:.2f} | "
          f"{r['failed']}")
PY
fi
if runs lab; then
  programs=$(find "$build/lab" -maxdepth 1 -type f -perm -u+x 2>/dev/null | sort)
  [ -n "$programs" ] || fail "lab: no programs in $build/lab"
  for round in 1 2; do
    order=$programs
    [ $round -eq 2 ] && order=$(echo "$programs" | sort -r)
    for p in $order; do
      name=$(basename "$p")
      timeout 300 "$p" >"$out/lab-$name-$round.txt" 2>&1
      rc=$?
      note "lab $name (round $round): rc $rc"
      grep -iE 'version|copy|error' "$out/lab-$name-$round.txt" | head -20 |
        tee -a "$summary"
      case $rc in
      0) ;;
      77) note "lab $name: no sm_90 device" ;;
      *) fail "lab $name (rc $rc)" ;;
      esac
    done
  done
fi
note "gpu-check: $([ $failed -eq 0 ] && echo passed || echo FAILED)"
tar -czf "$out.tar.gz" -C "$(dirname "$out")" "$(basename "$out")"
exit $failed
