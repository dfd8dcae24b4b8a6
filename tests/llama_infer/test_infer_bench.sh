#!/bin/sh
# End-to-end tests of `foundry infer-bench` and `foundry verify --against`
# on the llama3-tiny fixture (CPU backend, small shapes): exit codes (0 ok,
# 1 failure, 2 usage), the report's fields and their consistency (checked
# with python3 when given), a report never overwritten, and the comparison
# of a backend with itself (errors exactly 0) at different thread counts;
# `--batch` on the llama3-micro fixture: the batched fields, sequence k's
# ids those of seed + k alone, the streamed bytes per step independent of
# the batch, its trace, bad values; with python3, the pure-Python parts of
# the peers' scripts: the prompt rule of scripts/torch_baseline.py (batches
# too) against the report's ids, its dequantizer (numpy, when present)
# against scripts/make_reference_fixture.py's on every quantized tensor of
# a make-model tiny checkpoint and of the 8-bit and mixed fixtures,
# scripts/compare_reports.py and scripts/plot_batch.py (its
# errors; the plot where python3 imports matplotlib).
# usage: test_infer_bench.sh FOUNDRY_BINARY TEST_DATA_DIR SCRIPTS [PYTHON3]
set -u
foundry=$1
data=$2
scripts=$3
python=${4:-}
model=$data/llama3-tiny/model
work=$(mktemp -d)
trap 'chmod -R u+w "$work"; rm -rf "$work"' EXIT
. "$(dirname "$0")/../cli_lib.sh"
small="--prompt-tokens 12 --gen-tokens 5 --warmup 1 --iterations 3"

# a run: summary, report with every section
expect 0 infer-bench --model "$model" --threads 2 $small --seed 7 \
  --report "$work/r.json"
contains "$out" "end to end: median"
contains "$out" "time to first token"
contains "$out" "not measured"
contains "$out" "identical across executions: yes"
[ -s "$work/r.json" ] || fail "no report written"
contains "$work/r.json" '"format": "foundry.infer.report"'

if [ -n "$python" ]; then
  expect_cmd 0 "report consistency" "$python" - "$work/r.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
assert r["format"] == "foundry.infer.report" and r["version"] == 3, r
assert r["status"] == "ok" and r["error"] is None
assert r["implementation"] == "foundry" and r["backend"] == "cpu"
assert r["build"]["git_commit"] and "git_dirty" in r["build"]
assert r["environment"]["threads"] == 2
p = r["protocol"]
assert p["name"] == "custom" and p["prompt_source"] == "seed"
assert p["seed"] == "7" and p["prompt_tokens"] == 12 and p["gen_tokens"] == 5
assert p["warmup"] == 1 and p["iterations"] == 3 and p["context"] == 17
assert p["kv_dtype"] == "F32" and p["batch"] == 1
ids = p["prompt_ids"]
assert len(ids) == 12 and all(0 <= i < r["model"]["vocab_size"] for i in ids)
assert not {1, 2, 3} & set(ids)  # the fixture's BOS and EOS ids
ex = r["executions"]
assert len(ex) == 4 and [e["measured"] for e in ex] == [False, True, True, True]
s = r["statistics"]
totals = sorted(e["total_seconds"] for e in ex[1:])
e2e = s["end_to_end"]
assert e2e["median_seconds"] == totals[1]
assert e2e["median_ci_low_seconds"] <= e2e["median_seconds"] <= e2e["median_ci_high_seconds"]
assert e2e["min_seconds"] == totals[0] and e2e["max_seconds"] == totals[2]
prefill = sorted(e["prefill_seconds"] for e in ex[1:])[1]
assert s["prefill_median_seconds"] == prefill == s["time_to_first_token_seconds"]
assert abs(s["prefill_tokens_per_second"] - 12 / prefill) < 1e-6 * 12 / prefill
tps = sorted(e["decode_tokens_per_second"] for e in ex[1:])[1]
assert s["decode_tokens_per_second"] == tps
for e in ex:
    assert abs(e["decode_tokens_per_second"] - 4 / e["decode_seconds"]) < 1e-6 * e["decode_tokens_per_second"]
    assert e["total_seconds"] >= e["prefill_seconds"] + e["decode_seconds"]
m = r["memory"]
assert m["weights_resident"] > 0 and m["kv_cache"] > 0 and m["activations"] > 0
assert m["device_in_use_bytes"] is None
b = r["bandwidth"]
# tied embeddings: the LM head reads the whole table, the lookup one row
assert b["decode_weight_bytes_per_token"] > m["weights_resident"]
assert b["decode_weight_bytes_per_token"] == r["model"]["decode_weight_bytes_per_token"]
assert abs(b["achieved_bytes_per_second"] - b["decode_weight_bytes_per_token"] * tps) <= 1e-6 * b["achieved_bytes_per_second"]
assert b["d2d"] is None and b["fraction_of_d2d"] is None
assert len(r["generated_ids"]) == 5 and r["ids_identical_across_executions"] is True
# a batch of one: the aggregate is the decode rate, the one sequence's ids
assert s["aggregate_decode_tokens_per_second"] == tps
assert r["generated_ids_by_sequence"] == [r["generated_ids"]]
assert r["weights"]["streamed_bytes_per_decode_step"] == 0
assert r["weights"]["streamed_bytes_per_decode_token"] == 0
assert r["streaming"]["aggregate_decode_tokens_per_second_bound"] is None
for e in ex:
    assert len(e["decode_step_seconds"]) == 4
    assert e["aggregate_decode_tokens_per_second"] == e["decode_tokens_per_second"]
assert s["decode_step_seconds"]["count"] == 12
PY
fi

# weights streamed under a budget (llama3-tiny: embedding 884,736 bytes,
# each layer 3,542,016, head 1,536): 7 MiB with one buffer keeps the
# embedding and the head resident and streams both layers every token; with
# two buffers the embedding streams too (copied twice per token: the
# lookup and the tied LM head). The report's streamed bytes per decode
# token equal the bytes of those copies, summed here from the
# checkpoint's safetensors header (every tensor of the fixture is a multiple
# of 256 bytes, so the units have no padding); a trace of one more
# execution has an event per command of each run, as `foundry plan --dump`
# plans them.
expect 0 infer-bench --model "$model" --threads 2 $small --seed 7 \
  --weight-budget 7MiB --buffers 1 --report "$work/s1.json" \
  --trace "$work/s1.trace.json"
contains "$out" "streamed per decode token"
contains "$out" "host-to-device ceiling not measured"
contains "$out" "trace: $work/s1.trace.json"
expect 0 infer-bench --model "$model" --threads 2 $small --seed 7 \
  --weight-budget 7MiB --buffers 2 --prefill-rows 5 --report "$work/s2.json"
# the streamed units copied tensor by tensor from the mapped checkpoint
expect 0 infer-bench --model "$model" --threads 2 $small --seed 7 \
  --weight-budget 7MiB --buffers 1 --pack-streamed off \
  --report "$work/s1u.json"
contains "$out" "(--pack-streamed off)"
# an F16 KV cache, recorded in the report; a bad dtype is a usage error
expect 0 infer-bench --model "$model" --threads 2 $small --seed 7 \
  --kv-dtype f16 --report "$work/kv16.json"
contains "$work/kv16.json" '"kv_dtype": "F16"'
expect 2 infer-bench --model "$model" $small --kv-dtype f8 \
  --report "$work/kv8.json"
contains "$err" "--kv-dtype must be f32 or f16"
expect 0 infer-bench --model "$model" $small --seed 7 --report "$work/r3.json" \
  --trace "$work/r3.trace.json"
expect 0 plan --dump "$work/p1.json" --model "$model" --context 17 \
  --budget 7MiB --buffers 1
expect 0 plan --dump "$work/p0.json" --model "$model" --context 17
if [ -n "$python" ]; then
  expect_cmd 0 "streamed bytes and traces" "$python" - "$model" "$work" <<'PY'
import json, os, struct, sys
model, work = sys.argv[1:]
with open(os.path.join(model, "model.safetensors"), "rb") as f:
    header = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
sizes = {k: v["data_offsets"][1] - v["data_offsets"][0]
         for k, v in header.items() if k != "__metadata__"}
assert all(b % 256 == 0 for b in sizes.values())
def unit(name):
    prefix = ("model.embed_tokens." if name == "embed" else
              "model.norm." if name == "head" else
              "model.layers.%s." % name.split(".")[1])
    return sum(b for k, b in sizes.items() if k.startswith(prefix))
def load(name):
    return json.load(open(os.path.join(work, name)))
resident, s1, s2 = load("r.json"), load("s1.json"), load("s2.json")
s1u = load("s1u.json")
# packed (the default): each streamed unit once in page-locked memory,
# page-aligned; off: nothing packed, the same results
page = lambda n: (n + 4095) // 4096 * 4096
for r in (resident, s1, s2):
    h = r["host_memory"]
    assert h["pack_streamed"] is True
    assert h["packed_bytes"] == sum(page(unit(u))
                                    for u in r["weights"]["streamed_units"]), h
assert s1u["host_memory"]["pack_streamed"] is False
assert s1u["host_memory"]["packed_bytes"] == 0
assert s1u["weights"] == s1["weights"]
assert s1u["generated_ids"] == s1["generated_ids"]
everything = ["embed", "layer.0", "layer.1", "head"]
for r, streamed in ((resident, []), (s1, ["layer.0", "layer.1"]),
                    (s2, ["embed", "layer.0", "layer.1"])):
    w = r["weights"]
    assert w["streamed_units"] == streamed, w
    assert sorted(w["resident_units"] + streamed) == sorted(everything), w
    assert w["streamed_bytes"] == sum(unit(u) for u in streamed)
    # the tied embedding, when streamed, is copied for the lookup and again
    # for the LM head (its slot is reused by the layers in between)
    per_token = w["streamed_bytes"] + ("embed" in streamed) * unit("embed")
    assert w["streamed_bytes_per_decode_token"] == per_token, (w, per_token)
    assert r["streaming"]["streamed_bytes_per_decode_token"] == per_token
    assert w["streamed_bytes_per_prefill_run"] == per_token
    assert w["resident_bytes"] == sum(unit(u) for u in w["resident_units"])
    assert w["largest_streamed_bytes"] == max([unit(u) for u in streamed] + [0])
    assert w["device_resident_bytes"] + w["device_slot_bytes"] <= w["budget_bytes"]
    assert r["streaming"]["h2d"] is None
    assert r["streaming"]["decode_tokens_per_second_bound"] is None
    assert r["generated_ids"] == resident["generated_ids"]
    h = r["host_memory"]
    assert h["peak_rss_bytes"] > 0 and h["mapped_bytes"] >= sum(sizes.values())
    assert h["registered_bytes"] > 0
assert resident["weights"]["budget_source"] == "device memory"
assert s1["weights"]["budget_bytes"] == 7 << 20 and s1["weights"]["buffers"] == 1
assert s1["weights"]["device_slot_bytes"] == unit("layer.0")
assert s2["weights"]["buffers"] == 2 and s2["protocol"]["prefill_rows"] == 5
assert resident["protocol"]["prefill_rows"] == 17 and resident["trace"] is None

def sections(plan):
    p, first, out = load(plan), 0, {}
    for sec in p["sections"]:
        out[sec["name"]] = range(first, first + len(sec["commands"]))
        first += len(sec["commands"])
    return out
for report, trace, plan in (("s1.json", "s1.trace.json", "p1.json"),
                            ("r3.json", "r3.trace.json", "p0.json")):
    r, t, secs = load(report), load(trace), sections(plan)
    assert r["trace"] == os.path.join(work, trace), r["trace"]
    o = t["otherData"]
    assert o["report"] == os.path.join(work, report)
    assert o["runs"] == 5 and o["prefill_rows"] == 17  # 1 prefill + 4 decode
    assert o["ids_identical_to_measured"] is True
    x = [e for e in t["traceEvents"] if e["ph"] == "X"]
    runs = [e for e in x if e["cat"] == "run"]
    assert [e["args"]["step"] for e in runs] == ["prefill"] + ["decode"] * 4
    for k, run in enumerate(runs):
        cmds = [e for e in x if e["cat"] != "run" and e["args"]["run"] == k]
        want = secs[run["args"]["step"]]
        assert [e["args"]["command"] for e in cmds] == list(want), (k, len(cmds))
        assert all(e["dur"] >= 0 for e in cmds)
    names = [e["name"] for e in x]
    assert "matmul_add_q4 decode.layer.1.mlp_residual" in names
    assert "matmul_add_q4 prefill.layer.1.mlp_residual" in names
    assert "embed_q4 prefill.embed" in names and "sample decode.next" in names
    assert o["device_timed_events"] + o["host_timed_events"] == len(x) - 5
    threads = {e["tid"]: e["args"]["name"] for e in t["traceEvents"]
               if e["name"] == "thread_name"}
    assert len(threads) == 1 + load(plan)["streams"], threads
prefetches = [e for e in load("s1.trace.json")["traceEvents"]
              if e["ph"] == "X" and e["name"].startswith("prefetch")]
assert [e["name"] for e in prefetches] == ["prefetch layer.0", "prefetch layer.1"] * 5
assert not [e for e in load("r3.trace.json")["traceEvents"]
            if e["name"].startswith("prefetch")]
PY
  # scripts/trace_overlap.py reads the infer-bench trace per run
  "$python" "$scripts/trace_overlap.py" "$work/s1.trace.json" >"$work/ov1.txt" ||
    fail "trace_overlap.py on the streamed trace"
  grep -q "^decode runs: median .* of compute overlapped by prefetches" \
    "$work/ov1.txt" || fail "streamed overlap: $(cat "$work/ov1.txt")"
  [ "$(grep -c "  decode  " "$work/ov1.txt")" -eq 4 ] ||
    fail "streamed overlap rows: $(cat "$work/ov1.txt")"
  "$python" "$scripts/trace_overlap.py" "$work/r3.trace.json" >"$work/ov3.txt" ||
    fail "trace_overlap.py on the resident trace"
  grep -q "^decode runs: nothing prefetched" "$work/ov3.txt" ||
    fail "resident overlap: $(cat "$work/ov3.txt")"
  # scripts/trace_ops.py: the decode step's device time by op kind
  "$python" "$scripts/trace_ops.py" "$work/r3.trace.json" >"$work/ops3.txt" ||
    fail "trace_ops.py on the resident trace"
  for line in "^decode: [0-9]* runs" \
    "^norm_matmul_q4 | [0-9]* | [0-9.]* | [0-9.]*%$" "^sum of launches: "; do
    grep -q "$line" "$work/ops3.txt" || fail "trace_ops: $(cat "$work/ops3.txt")"
  done
  "$python" "$scripts/trace_ops.py" "$work/r3.trace.json" --step nothing \
    >/dev/null 2>"$work/ops-none.txt" && fail "trace_ops: a step never run"
  grep -q "no launches of step 'nothing'" "$work/ops-none.txt" ||
    fail "trace_ops: $(cat "$work/ops-none.txt")"
fi

# the trace: never overwritten, never the report's file, a usage error
: >"$work/taken.trace.json"
expect 1 infer-bench --model "$model" $small --report "$work/t1.json" \
  --trace "$work/taken.trace.json"
[ -s "$work/taken.trace.json" ] && fail "an existing trace was overwritten"
[ -e "$work/t1.json" ] && fail "a report for a refused trace"
expect 2 infer-bench --model "$model" $small --report "$work/t2.json" \
  --trace "$work/./t2.json"
[ -e "$work/t2.json" ] && fail "a report for a trace on the report"
expect 1 infer-bench --model "$model" $small --report "$work/t3.json" \
  --trace "$work/no/dir.json"

# an impossible budget: exit 1 naming the minimum, recorded in the report
expect 1 infer-bench --model "$model" $small --weight-budget 1MiB \
  --report "$work/b.json"
contains "$err" "at least 7084032 bytes"
contains "$err" "for --buffers 2: at least 6.76 MiB"
contains "$work/b.json" '"status": "failed"'
contains "$work/b.json" '"kind": "budget"'
expect 2 infer-bench --model "$model" --report "$work/u.json" \
  --weight-budget 0
expect 2 infer-bench --model "$model" --report "$work/u.json" --buffers 65
expect 2 infer-bench --model "$model" --report "$work/u.json" \
  --pack-streamed maybe
contains "$err" "--pack-streamed must be on or off"
expect 2 infer-bench --model "$model" --report "$work/u.json" \
  --prefill-rows 65537

# the same seed gives the same prompt and ids; the default protocol's name
expect 0 infer-bench --model "$model" --threads 1 $small --seed 7 \
  --report "$work/r2.json"
if [ -n "$python" ]; then
  expect_cmd 0 "same seed, same ids" "$python" - "$work/r.json" "$work/r2.json" <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
assert a["protocol"]["prompt_ids"] == b["protocol"]["prompt_ids"]
assert a["generated_ids"] == b["generated_ids"]
PY
fi

if [ -n "$python" ]; then
  expect_cmd 0 "compare_reports.py" "$python" "$scripts/compare_reports.py" \
    "$work/r.json" "$work/r2.json"
  contains "$out" "same prompt ids: yes"
  contains "$out" "agree with report 1 for the first 5 of 5"
  expect_cmd 2 "compare_reports.py with one report" "$python" \
    "$scripts/compare_reports.py" "$work/r.json"
  expect_cmd 1 "compare_reports.py on a non-report" "$python" \
    "$scripts/compare_reports.py" "$work/r.json" "$model/config.json"
  : >"$work/t.json"
  expect_cmd 1 "torch_baseline.py over an existing report" "$python" \
    "$scripts/torch_baseline.py" --model "$model" --report "$work/t.json"
  expect 0 make-model --preset tiny --seed 5 --out "$work/tiny"
  expect_cmd 0 "prompt rule and dequantizer" "$python" - "$scripts" \
    "$work/r.json" "$model/config.json" "$work/tiny" \
    "$data/llama3-micro-q8-g32/model" "$data/llama3-micro-mixed/model" <<'PY'
import json, os, sys
sys.path.insert(0, sys.argv[1])
import torch_baseline as tb
import make_reference_fixture as ref
from peer_common import module_bits
report = json.load(open(sys.argv[2]))
config = json.load(open(sys.argv[3]))
assert tb.prompt_ids(config, 7, 12) == report["protocol"]["prompt_ids"]
try:
    import numpy as np
except ImportError:
    print("numpy missing: dequantizer check skipped")
    sys.exit(0)
checked = {}
for d in sys.argv[4:]:
    cfg = json.load(open(os.path.join(d, "config.json")))
    tensors = ref.read_safetensors(os.path.join(d, "model.safetensors"))
    for name in sorted(tensors):
        prefix = name[: -len(".weight")]
        bits = module_bits(cfg, tensors, prefix) if name.endswith(".weight") else 0
        if not bits:
            continue
        _, shape, raw = tensors[name]
        packed = np.frombuffer(raw, dtype="<u4").reshape(shape).astype(np.int64)
        halves = [np.array(ref.decode_halves(tensors[prefix + k][0], tensors[prefix + k][2]),
                           dtype=np.float64).reshape(tensors[prefix + k][1])
                  for k in (".scales", ".biases")]
        ours = tb.dequantize(packed, halves[0], halves[1], np.arange(0, 32, bits))
        want = np.array(ref.dequantize(cfg, tensors, prefix))
        assert ours.shape == want.shape, (name, ours.shape, want.shape)
        assert np.array_equal(ours, want), name
        checked[bits] = checked.get(bits, 0) + 1
print("dequantizer agrees on %d 4-bit and %d 8-bit tensors" % (checked[4], checked[8]))
PY
  "$python" -c "import numpy" 2>/dev/null &&
    contains "$out" "dequantizer agrees on"
fi

# --prompt-file: the ids of the file
printf ' 5,6,7,8\n' >"$work/prompt.txt"
expect 0 infer-bench --model "$model" --prompt-file "$work/prompt.txt" \
  --gen-tokens 3 --warmup 0 --iterations 1 --report "$work/f.json"
contains "$work/f.json" '"prompt_source": "file"'
contains "$work/f.json" '"prompt_tokens": 4'

# never overwritten: an existing report is a failure before any work
: >"$work/taken.json"
expect 1 infer-bench --model "$model" $small --report "$work/taken.json"
[ -s "$work/taken.json" ] && fail "an existing report was overwritten"
expect 1 infer-bench --model "$model" $small --report "$work/r.json"
contains "$err" "exists"
expect 1 infer-bench --model "$model" $small --report "$work/no/dir.json"

# a missing model, a missing prompt file, ids that do not fit the context
expect 1 infer-bench --model "$work/missing" $small --report "$work/m.json"
[ -e "$work/m.json" ] && fail "a report for a model that does not open"
expect 1 infer-bench --model "$model" --prompt-file "$work/none.txt" \
  --report "$work/m2.json"
# a NUL byte inside the id list (issue #31: it ended the list at 1,2)
printf '1,2\0,3' >"$work/nul.txt"
expect 1 infer-bench --model "$model" --prompt-file "$work/nul.txt" \
  --gen-tokens 1 --warmup 0 --iterations 1 --report "$work/nul.json"
contains "$err" "foundry: error: $work/nul.txt: NUL byte at byte offset 3"
[ -e "$work/nul.json" ] && fail "a report for a prompt file with a NUL byte"
expect 1 infer-bench --model "$model" $small --context 8 \
  --report "$work/ctx.json"
contains "$work/ctx.json" '"status": "failed"'

# usage errors
expect 2 infer-bench --model "$model"
expect 2 infer-bench --report "$work/u.json"
expect 2 infer-bench --model "$model" --report "$work/u.json" --backend metal
expect 2 infer-bench --model "$model" --report "$work/u.json" --iterations 0
expect 2 infer-bench --model "$model" --report "$work/u.json" --gen-tokens 0
expect 2 infer-bench --model "$model" --report "$work/u.json" \
  --prompt-tokens 0
expect 2 infer-bench --model "$model" --report "$work/u.json" --seed -1
# byte counts above 2^63 - 1 (issue #31: reported as negative numbers)
for size in 9223372036854775808 18446744073709551615 8388608TiB; do
  expect 2 infer-bench --model "$model" --report "$work/u.json" \
    --weight-budget "$size"
  contains "$err" "--weight-budget: '$size' is above the largest size"
done
expect 0 infer-bench --model "$model" $small --weight-budget \
  9223372036854775807 --report "$work/max.json"
contains "$work/max.json" '"budget_bytes": 9223372036854775807'
expect 2 infer-bench --model "$model" --report "$work/u.json" --bogus
expect 2 infer-bench --model "$model" --report "$work/u.json" extra
expect 2 infer-bench --model "$model" --report "$work/u.json" \
  --prompt-file "$work/prompt.txt" --prompt-tokens 4
expect 2 infer-bench --model "$model" --report "$work/u.json" \
  --backend cuda --threads 2
[ -e "$work/u.json" ] && fail "a usage error left a report"
expect 0 help infer-bench
contains "$out" "token-ids-512x128-v1"

# --batch B on llama3-micro (CPU): B sequences, sequence k's prompt from
# seed + k, prefilled one by one and decoded together. Sequence 0 generates
# the ids of --batch 1, sequence 1 those of --seed 8 alone (the CPU
# backend's rows do not depend on each other); the budget of 512 KiB with
# one buffer streams both layers (314,368 bytes each) at every batch, and
# the bytes streamed per decode step do not grow with it. A trace of a
# batch holds each sequence's prefill run, then the decode steps of 4 rows.
# No timing is checked, only the fields and their consistency.
micro=$data/llama3-micro/model
expect 0 infer-bench --model "$micro" --threads 2 $small --seed 7 \
  --report "$work/m1.json"
expect 0 infer-bench --model "$micro" --threads 2 $small --seed 8 \
  --report "$work/m1s8.json"
expect 0 infer-bench --model "$micro" --threads 2 $small --seed 7 \
  --batch 4 --report "$work/m4.json" --trace "$work/m4.trace.json"
contains "$out" "aggregate over 4 sequences"
contains "$out" "decode step of 4 rows: p50"
expect 0 infer-bench --model "$micro" --threads 2 $small --seed 7 \
  --weight-budget 512KiB --buffers 1 --report "$work/ms1.json"
expect 0 infer-bench --model "$micro" --threads 2 $small --seed 7 \
  --weight-budget 512KiB --buffers 1 --batch 4 --report "$work/ms4.json"
contains "$out" "streamed per decode token (step)"
expect 0 infer-bench --model "$micro" --threads 2 $small --seed 7 \
  --batch 4 --kv-dtype f16 --report "$work/m4h.json"
for bad in 0 -1 1025 4x ""; do
  expect 2 infer-bench --model "$micro" --report "$work/u.json" --batch "$bad"
  contains "$err" "infer-bench: error: --batch"
done
expect 2 infer-bench --model "$micro" --report "$work/u.json" --batch
expect 2 infer-bench --model "$micro" --report "$work/u.json" \
  --prompt-file "$work/prompt.txt" --batch 2
contains "$err" "--prompt-file gives one prompt"
[ -e "$work/u.json" ] && fail "a bad --batch left a report"
expect 0 help infer-bench
contains "$out" "--batch B"
if [ -n "$python" ]; then
  expect_cmd 0 "batched reports" "$python" - "$work" "$scripts" <<'PY'
import json, os, sys
work = sys.argv[1]
sys.path.insert(0, sys.argv[2])
import bench_summary
def load(name):
    return json.load(open(os.path.join(work, name)))
m1, m1s8, m4, ms1, ms4 = (load(n + ".json") for n in ("m1", "m1s8", "m4", "ms1", "ms4"))
for r, batch in ((m1, 1), (m4, 4), (ms1, 1), (ms4, 4)):
    assert r["version"] == 3 and r["status"] == "ok"
    p = r["protocol"]
    assert p["batch"] == batch and p["context"] == 17 and p["prompt_ids"] == m1["protocol"]["prompt_ids"]
    assert p["name"] == "custom" and p["iterations"] == 3 and p["warmup"] == 1
    by = r["generated_ids_by_sequence"]
    assert len(by) == batch and all(len(ids) == 5 for ids in by)
    assert r["generated_ids"] == by[0] == m1["generated_ids"]
    assert r["ids_identical_across_executions"] is True
    ex, s = r["executions"], r["statistics"]
    assert len(ex) == 4
    for e in ex:
        assert len(e["decode_step_seconds"]) == 4
        assert all(t > 0 for t in e["decode_step_seconds"])
        assert sum(e["decode_step_seconds"]) <= e["decode_seconds"]
        assert abs(e["decode_tokens_per_second"] * e["decode_seconds"] - 4) < 1e-9
        assert abs(e["aggregate_decode_tokens_per_second"]
                   - batch * e["decode_tokens_per_second"]) <= 1e-9 * e["aggregate_decode_tokens_per_second"]
    measured = ex[1:]
    agg = sorted(e["aggregate_decode_tokens_per_second"] for e in measured)[1]
    assert s["aggregate_decode_tokens_per_second"] == agg > 0
    steps = [t for e in measured for t in e["decode_step_seconds"]]
    d = s["decode_step_seconds"]
    assert d["count"] == 12 == len(steps)
    assert abs(d["mean"] - bench_summary.mean(steps)) <= 1e-12
    steps.sort()
    assert d["p50"] == bench_summary.percentile_sorted(steps, 0.5)
    assert d["p99"] == bench_summary.percentile_sorted(steps, 0.99)
    assert steps[0] <= d["p50"] <= d["p99"] <= steps[-1]
    prefill = s["prefill_median_seconds"]
    assert abs(s["prefill_tokens_per_second"] - batch * 12 / prefill) < 1e-6 * s["prefill_tokens_per_second"]
    w = r["weights"]
    assert w["streamed_bytes_per_decode_step"] == w["streamed_bytes_per_decode_token"]
    assert r["streaming"]["aggregate_decode_tokens_per_second_bound"] is None  # no h2d on cpu
# sequence k's prompt is seed + k's: sequence 1 decodes what seed 8 decodes alone
assert m4["generated_ids_by_sequence"][1] == m1s8["generated_ids"]
# streamed: the same bytes per step at every batch; the same ids as resident
assert m1["weights"]["streamed_bytes_per_decode_step"] == 0
assert m4["weights"]["streamed_bytes_per_decode_step"] == 0
step = ms1["weights"]["streamed_bytes_per_decode_step"]
assert step == 2 * 314368 == ms4["weights"]["streamed_bytes_per_decode_step"], step
assert ms1["weights"]["streamed_units"] == ms4["weights"]["streamed_units"] == ["layer.0", "layer.1"]
assert ms4["generated_ids_by_sequence"] == m4["generated_ids_by_sequence"]
# the KV cache: batch regions of context positions (F16: half the bytes)
m4h = load("m4h.json")
assert m4h["protocol"]["kv_dtype"] == "F16" and m4["protocol"]["kv_dtype"] == "F32"
assert m4h["protocol"]["batch"] == 4 and len(m4h["generated_ids_by_sequence"]) == 4
assert m4["memory"]["kv_cache"] == 4 * m1["memory"]["kv_cache"]
assert m4h["memory"]["kv_cache"] * 2 == m4["memory"]["kv_cache"]
t = load("m4.trace.json")
o = t["otherData"]
assert o["batch"] == 4 and o["runs"] == 4 + 4 and o["ids_identical_to_measured"] is True
runs = [e for e in t["traceEvents"] if e["ph"] == "X" and e["cat"] == "run"]
assert [e["args"]["step"] for e in runs] == ["prefill"] * 4 + ["decode"] * 4
assert [e["args"]["tokens"] for e in runs] == [12] * 4 + [4] * 4
PY
  # compare_reports.py reads batched reports: the batch is part of what
  # must match, and the ids agree sequence by sequence
  expect_cmd 0 "compare_reports.py, batches" "$python" \
    "$scripts/compare_reports.py" "$work/m4.json" "$work/ms4.json"
  contains "$out" "aggregate decode (tok/s)"
  contains "$out" "decode step p99 (ms)"
  contains "$out" "comparable: yes"
  contains "$out" "(4 of 4 sequences agree on every id)"
  expect_cmd 0 "compare_reports.py, batch 1 against 4" "$python" \
    "$scripts/compare_reports.py" "$work/m1.json" "$work/m4.json"
  contains "$out" "MISMATCH: batch: report 1 1, report 2 4"
  # the peer's batch prompts: sequence k from seed + k, the report's first
  expect_cmd 0 "batch prompt rule" "$python" - "$scripts" "$work/m1.json" \
    "$work/m1s8.json" "$micro/config.json" <<'PY'
import json, sys
sys.path.insert(0, sys.argv[1])
import torch_baseline as tb
m1, m1s8, config = (json.load(open(p)) for p in sys.argv[2:])
prompts = tb.batch_prompts(config, 7, 12, 3)
assert prompts[0] == m1["protocol"]["prompt_ids"]
assert prompts[1] == m1s8["protocol"]["prompt_ids"]
assert tb.batch_prompts(config, 7, 12, 2, first=[5] * 12) == [[5] * 12, prompts[1]]
assert tb.batch_prompts(config, 2**64 - 1, 4, 2)[1] == tb.prompt_ids(config, 0, 4)
PY
  # scripts/plot_batch.py: errors before any plot; the plot with matplotlib
  "$python" - "$work" <<'PY'
import json, os, sys
d = sys.argv[1]
r = json.load(open(os.path.join(d, "m4.json")))
json.dump(dict(r, version=2), open(os.path.join(d, "v2.json"), "w"))
del r["statistics"]["aggregate_decode_tokens_per_second"]
json.dump(r, open(os.path.join(d, "noagg.json"), "w"))
PY
  expect_cmd 1 "plot_batch.py on a version 2 report" "$python" \
    "$scripts/plot_batch.py" --out "$work/p.png" "$work/m4.json" \
    "$work/v2.json"
  contains "$err" "version 2 has no batch"
  expect_cmd 1 "plot_batch.py on a failed report" "$python" \
    "$scripts/plot_batch.py" --out "$work/p.png" "$work/b.json"
  contains "$err" "failed run"
  expect_cmd 1 "plot_batch.py on a report without the aggregate" "$python" \
    "$scripts/plot_batch.py" --out "$work/p.png" "$work/noagg.json"
  contains "$err" "no statistics.aggregate_decode_tokens_per_second"
  expect_cmd 1 "plot_batch.py, one series twice at one batch" "$python" \
    "$scripts/plot_batch.py" --out "$work/p.png" "$work/m4.json" \
    "$work/m4.json"
  contains "$err" "at batch 4: give one"
  expect_cmd 2 "plot_batch.py without --out" "$python" \
    "$scripts/plot_batch.py" "$work/m4.json"
  expect_cmd 0 "plot_batch.py --help" "$python" "$scripts/plot_batch.py" --help
  [ -e "$work/p.png" ] && fail "a refused plot left a file"
  if "$python" -c "import matplotlib" 2>/dev/null; then
    expect_cmd 0 "plot_batch.py" "$python" "$scripts/plot_batch.py" \
      --out "$work/p.png" "$work/m1.json" "$work/m4.json" "$work/ms1.json" \
      "$work/ms4.json"
    contains "$out" "| 4 | "
    [ -s "$work/p.png" ] || fail "plot_batch.py wrote no plot"
    expect_cmd 1 "plot_batch.py over an existing plot" "$python" \
      "$scripts/plot_batch.py" --out "$work/p.png" "$work/m4.json"
  else
    expect_cmd 1 "plot_batch.py without matplotlib" "$python" \
      "$scripts/plot_batch.py" --out "$work/p.png" "$work/m4.json"
    contains "$err" "matplotlib is needed"
  fi
fi

# --draft-model: speculative decoding gives the ids of the plain run, for a
# draft of another checkpoint (mostly rejected) and the model drafting for
# itself (every proposal accepted); the report's speculative section
untied=$data/llama3-micro-untied-g32/model
mha=$data/llama3-micro-mha-g128/model
spec="--prompt-tokens 16 --gen-tokens 20 --warmup 1 --iterations 2 --threads 2"
# shellcheck disable=SC2086
expect 0 infer-bench --model "$untied" $spec --report "$work/plain.json"
for draft in "$mha" "$untied"; do
  rm -f "$work/spec.json"
  # shellcheck disable=SC2086
  expect 0 infer-bench --model "$untied" --draft-model "$draft" \
    --draft-tokens 3 $spec --report "$work/spec.json"
  contains "$out" "speculative: K 3 adaptive"
  expect_cmd 0 "speculative ids against plain ($draft)" python3 -c "
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
x = a['speculative']
assert a['generated_ids'] == b['generated_ids'], 'ids differ'
assert b['speculative'] is None
assert x['draft_tokens'] == 3 and x['max_draft_tokens'] == 6 and x['adaptive']
assert x['accepted'] <= x['proposed'] and x['target_passes'] > 0
assert abs(x['ids_per_target_pass'] - 2 * 19 / x['target_passes']) < 1e-9
if sys.argv[3] == 'self':
    assert x['acceptance_rate'] == 1.0 and x['ids_per_target_pass'] > 3, x
assert a['statistics']['decode_step_seconds'] is None
" "$work/spec.json" "$work/plain.json" \
    "$([ "$draft" = "$untied" ] && echo self || echo other)"
done
# shellcheck disable=SC2086
expect 0 infer-bench --model "$untied" --draft-model "$mha" --draft-fixed \
  $spec --report "$work/fixed.json"
contains "$out" "speculative: K 4 fixed"
expect 1 infer-bench --model "$model" --draft-model "$untied" $spec \
  --report "$work/vocab.json"
contains "$err" "vocabulary of 512 ids"
[ ! -e "$work/vocab.json" ] || fail "a refused draft wrote a report"
expect 2 infer-bench --model "$untied" --draft-model "$mha" --batch 2 \
  --report "$work/b2.json"
contains "$err" "--batch must be 1"
expect 2 infer-bench --model "$untied" --draft-tokens 3 --report "$work/x.json"
contains "$err" "--draft-tokens needs --draft-model"
expect 2 infer-bench --model "$untied" --draft-fixed --report "$work/x.json"
contains "$err" "--draft-fixed needs --draft-model"
expect 2 infer-bench --model "$untied" --draft-model "$mha" --draft-tokens 65 \
  --report "$work/x.json"

# verify --against: a backend against itself, at different thread counts
expect 0 verify --model "$model" --against cpu --threads 1 \
  --against-threads 2 --prompt-tokens 20 --steps 5 --seed 3
contains "$out" "logits relative error: 0.000e+00"
contains "$out" "largest absolute logit difference: 0.0000e+00"
contains "$out" "verify: passed"
[ "$(grep -c ' yes  yes$' "$out")" -eq 5 ] || fail "5 agreeing steps expected"
expect 0 verify --model "$data/llama3-micro/model" --against cpu \
  --prompt-tokens 8 --steps 3
# an F16 KV cache on both sides
expect 0 verify --model "$model" --against cpu --threads 1 \
  --against-threads 2 --prompt-tokens 20 --steps 3 --kv-dtype f16
contains "$out" "logits relative error: 0.000e+00"
expect 2 verify --model "$model" --against cpu --kv-dtype bf16
contains "$err" "--kv-dtype must be f32 or f16"
expect 1 verify --model "$model" --against cpu --prompt-tokens 20 \
  --steps 5 --context 10
contains "$err" "context"
expect 2 verify --model "$model" --against metal
expect 2 verify --model "$model" --against cpu --reference x.safetensors
expect 2 verify --model "$model" --reference x.safetensors --steps 4
expect 2 verify --model "$model" --against cpu --steps 0
expect 1 verify --model "$work/missing" --against cpu

finish infer-bench
