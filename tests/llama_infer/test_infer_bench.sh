#!/bin/sh
# End-to-end tests of `foundry infer-bench` and `foundry verify --against`
# on the llama3-tiny fixture (CPU backend, small shapes): exit codes (0 ok,
# 1 failure, 2 usage), the report's fields and their consistency (checked
# with python3 when given), a report never overwritten, and the comparison
# of a backend with itself (errors exactly 0) at different thread counts;
# with python3, the pure-Python parts of the peers' scripts: the prompt rule
# of scripts/torch_baseline.py against the report's ids, its dequantizer
# (numpy, when present) against scripts/make_reference_fixture.py's on a
# make-model tiny checkpoint, and scripts/compare_reports.py.
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
assert r["format"] == "foundry.infer.report" and r["version"] == 2, r
assert r["status"] == "ok" and r["error"] is None
assert r["implementation"] == "foundry" and r["backend"] == "cpu"
assert r["build"]["git_commit"] and "git_dirty" in r["build"]
assert r["environment"]["threads"] == 2
p = r["protocol"]
assert p["name"] == "custom" and p["prompt_source"] == "seed"
assert p["seed"] == "7" and p["prompt_tokens"] == 12 and p["gen_tokens"] == 5
assert p["warmup"] == 1 and p["iterations"] == 3 and p["context"] == 17
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
PY
fi

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
    "$work/r.json" "$model/config.json" "$work/tiny" <<'PY'
import json, os, sys
sys.path.insert(0, sys.argv[1])
import torch_baseline as tb
import make_reference_fixture as ref
report = json.load(open(sys.argv[2]))
config = json.load(open(sys.argv[3]))
assert tb.prompt_ids(config, 7, 12) == report["protocol"]["prompt_ids"]
try:
    import numpy as np
except ImportError:
    print("numpy missing: dequantizer check skipped")
    sys.exit(0)
d = sys.argv[4]
cfg = json.load(open(os.path.join(d, "config.json")))
path = os.path.join(d, "model.safetensors")
tensors = ref.read_safetensors(path)
group = cfg["quantization"]["group_size"]
checked = 0
for prefix in ("model.layers.0.self_attn.k_proj", "model.layers.1.mlp.down_proj"):
    _, shape, raw = tensors[prefix + ".weight"]
    packed = np.frombuffer(raw, dtype="<u4").reshape(shape).astype(np.int64)
    halves = [np.array(ref.decode_halves(tensors[prefix + k][0], tensors[prefix + k][2]),
                       dtype=np.float64).reshape(tensors[prefix + k][1])
              for k in (".scales", ".biases")]
    ours = tb.dequantize(packed, halves[0], halves[1], group, np.arange(0, 32, 4))
    want = np.array(ref.dequantize(tensors, prefix))
    assert ours.shape == want.shape, (ours.shape, want.shape)
    assert np.array_equal(ours, want), prefix
    checked += 1
print("dequantizer agrees on", checked, "tensors")
PY
  "$python" -c "import numpy" 2>/dev/null && contains "$out" "agrees on 2 tensors"
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
expect 2 infer-bench --model "$model" --report "$work/u.json" --bogus
expect 2 infer-bench --model "$model" --report "$work/u.json" extra
expect 2 infer-bench --model "$model" --report "$work/u.json" \
  --prompt-file "$work/prompt.txt" --prompt-tokens 4
expect 2 infer-bench --model "$model" --report "$work/u.json" \
  --backend cuda --threads 2
[ -e "$work/u.json" ] && fail "a usage error left a report"
expect 0 help infer-bench
contains "$out" "token-ids-512x128-v1"

# verify --against: a backend against itself, at different thread counts
expect 0 verify --model "$model" --against cpu --threads 1 \
  --against-threads 2 --prompt-tokens 20 --steps 5 --seed 3
contains "$out" "logits relative error: 0.000e+00"
contains "$out" "largest absolute logit difference: 0.0000e+00"
contains "$out" "verify: passed"
[ "$(grep -c ' yes  yes$' "$out")" -eq 5 ] || fail "5 agreeing steps expected"
expect 0 verify --model "$data/llama3-micro/model" --against cpu \
  --prompt-tokens 8 --steps 3
expect 1 verify --model "$model" --against cpu --prompt-tokens 20 \
  --steps 5 --context 10
contains "$err" "context"
expect 2 verify --model "$model" --against metal
expect 2 verify --model "$model" --against cpu --reference x.safetensors
expect 2 verify --model "$model" --reference x.safetensors --steps 4
expect 2 verify --model "$model" --against cpu --steps 0
expect 1 verify --model "$work/missing" --against cpu

finish infer-bench
