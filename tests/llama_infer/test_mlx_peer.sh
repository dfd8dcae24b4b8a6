#!/bin/sh
# Tests of the MLX side of the peers (issue #35): scripts/mlx_baseline.py,
# scripts/make_reference_fixture.py --engine mlx and scripts/compare_reports.py
# with an MLX report.
#   scripts: what needs no MLX (PYTHON3 is any python3): mlx_baseline.py's
#     usage errors (exit 2) and refusals before any work (exit 1), a failed
#     report naming the setup stage where mlx does not import,
#     make_reference_fixture.py's usage errors, and compare_reports.py on a
#     hand-made MLX report (versions, ratios, agreeing ids).
#   mlx: PYTHON3 imports mlx and mlx-lm (exit 77, skipped, otherwise): on the
#     CPU in float32, mlx_baseline.py on the llama3-tiny fixture generates
#     foundry's CPU ids from a report's prompt, from the seed and for a
#     batch; the report is consistent and compare_reports.py agrees; MLX
#     reproduces tests/data/llama3-micro-mlx (within 1e-5) and an MLX-made
#     reference of another checkpoint passes `foundry verify` at 1e-4.
# ctest passes FOUNDRY_MLX_PYTHON3 (cmake -DFOUNDRY_MLX_PYTHON3=...) as
# PYTHON3 to the mlx mode, python3 otherwise.
# usage: test_mlx_peer.sh scripts|mlx FOUNDRY_BINARY TEST_DATA_DIR SCRIPTS [PYTHON3]
set -u
mode=$1
foundry=$2
data=$3
scripts=$4
python=${5:-}
if [ -z "$python" ]; then
  echo "python3 missing: skipped"
  exit 77
fi
model=$data/llama3-tiny/model
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
. "$(dirname "$0")/../cli_lib.sh"
mb=$scripts/mlx_baseline.py
mrf=$scripts/make_reference_fixture.py
cmp=$scripts/compare_reports.py
has_mlx=no
"$python" -c "import mlx.core, mlx_lm" 2>/dev/null && has_mlx=yes

if [ "$mode" = mlx ] && [ "$has_mlx" = no ]; then
  echo "mlx or mlx-lm does not import in $python (pip install mlx mlx-lm, or"
  echo "mlx[cpu] on Linux without a GPU; cmake -DFOUNDRY_MLX_PYTHON3=PATH): skipped"
  exit 77
fi

# a foundry report to compare with and take the prompt from
expect 0 infer-bench --model "$model" --threads 1 --prompt-tokens 12 \
  --gen-tokens 6 --warmup 1 --iterations 3 --seed 3 --report "$work/f.json"

if [ "$mode" = scripts ]; then
  # usage errors: exit 2 before mlx is imported, no report
  for args in "--device metal" "--dtype float64" "--iterations 0" \
    "--gen-tokens 0" "--prompt-tokens 0" "--warmup -1" "--seed -1" \
    "--batch 0" "--batch 1025" "--prompt-from $work/f.json --prompt-tokens 12" \
    "--bogus"; do
    # shellcheck disable=SC2086  # the cases are word lists
    expect_cmd 2 "mlx_baseline.py $args" "$python" "$mb" --model "$model" \
      --report "$work/u.json" $args
    contains "$err" "error"
  done
  expect_cmd 2 "mlx_baseline.py without --report" "$python" "$mb" --model "$model"
  [ -e "$work/u.json" ] && fail "a usage error left a report"

  # refused before any work: exit 1, no report written
  : >"$work/taken.json"
  expect_cmd 1 "mlx_baseline.py over an existing report" "$python" "$mb" \
    --model "$model" --report "$work/taken.json"
  contains "$err" "exists"
  [ -s "$work/taken.json" ] && fail "an existing report was overwritten"
  expect_cmd 1 "mlx_baseline.py --prompt-from config.json" "$python" "$mb" \
    --model "$model" --prompt-from "$model/config.json" --report "$work/p.json"
  contains "$err" "not an infer-bench report"
  [ -e "$work/p.json" ] && fail "a bad prompt report left a report"

  if [ "$has_mlx" = no ]; then
    # without mlx: a failed report that says what to install
    expect_cmd 1 "mlx_baseline.py without mlx" "$python" "$mb" --model "$model" \
      --device cpu --report "$work/nomlx.json"
    contains "$work/nomlx.json" '"status": "failed"'
    contains "$work/nomlx.json" '"stage": "setup"'
    contains "$err" "pip install mlx"
    expect_cmd 1 "make_reference_fixture.py --engine mlx without mlx" "$python" \
      "$mrf" --engine mlx --check "$data/llama3-micro-mlx"
    contains "$err" "mlx"
  fi

  # make_reference_fixture.py usage errors
  for args in "--engine tf $work/x" "--engine mlx --model $model" \
    "--engine mlx --out $work/e.safetensors" \
    "--model $model --out $work/e.safetensors" \
    "--engine mlx --model $model --out $work/e.safetensors --greedy-tokens 0" \
    "--dtype native $work/x" "--bogus $work/x" ""; do
    # shellcheck disable=SC2086  # the cases are word lists
    expect_cmd 2 "make_reference_fixture.py $args" "$python" "$mrf" $args
  done
  [ -e "$work/x" ] || [ -e "$work/e.safetensors" ] &&
    fail "a usage error of make_reference_fixture.py wrote files"

  # compare_reports.py with a hand-made MLX report derived from foundry's:
  # decode half as fast, the first 4 of 6 ids the same
  expect_cmd 0 "an MLX report" "$python" - "$work" <<'PY'
import json, os, sys
d = sys.argv[1]
r = json.load(open(os.path.join(d, "f.json")))
mlx = dict(r, implementation="mlx", backend="mlx-f16",
           build={"python": "3.11.7", "mlx": "0.32.4", "mlx_lm": "0.32.2"},
           peer={"framework": "mlx-lm", "dtype": "float16"})
mlx["statistics"] = dict(r["statistics"], decode_tokens_per_second=
                         r["statistics"]["decode_tokens_per_second"] / 2)
mlx["generated_ids"] = r["generated_ids"][:4] + [-1, -2]
mlx["generated_ids_by_sequence"] = [mlx["generated_ids"]]
json.dump(mlx, open(os.path.join(d, "mlx.json"), "w"))
json.dump(dict(mlx, model=dict(r["model"], layers=3)),
          open(os.path.join(d, "mlx3.json"), "w"))
# another checkpoint: model.safetensors' hash differs
files = [dict(f, sha256="0" * 64) if f["name"] == "model.safetensors" else f
         for f in r["model"]["checkpoint"]["files"]]
json.dump(dict(mlx, model=dict(r["model"], checkpoint=dict(r["model"]["checkpoint"],
                                                           files=files))),
          open(os.path.join(d, "mlxck.json"), "w"))
PY
  expect_cmd 0 "compare_reports.py, foundry and mlx" "$python" "$cmp" \
    "$work/f.json" "$work/mlx.json"
  contains "$out" "mlx (mlx-f16)"
  contains "$out" "mlx 0.32.4, mlx-lm 0.32.2"
  contains "$out" "(x2.00)"
  contains "$out" "comparable: yes"
  contains "$out" "same prompt ids: yes"
  contains "$out" "agree with report 1 for the first 4 of 6"
  grep -q "MISMATCH" "$out" && fail "same protocol flagged as a mismatch"
  expect_cmd 0 "compare_reports.py, mlx first" "$python" "$cmp" \
    "$work/mlx.json" "$work/f.json"
  contains "$out" "agree with report 1 for the first 4 of 6"
  expect_cmd 0 "compare_reports.py, another shape" "$python" "$cmp" \
    "$work/f.json" "$work/mlx3.json"
  contains "$out" "MISMATCH: layers: report 1 2, report 2 3"
  contains "$out" "comparable: no"
  expect_cmd 0 "compare_reports.py, another checkpoint" "$python" "$cmp" \
    "$work/f.json" "$work/mlxck.json"
  contains "$out" "MISMATCH: checkpoint files of report 2 differ from report 1's: model.safetensors"
  contains "$out" "comparable: no"
  finish mlx_peer_scripts
  exit 0
fi

# ---- mode mlx: mlx and mlx-lm import --------------------------------------

# float32 on the CPU from the report's prompt: foundry's CPU ids
expect_cmd 0 "mlx_baseline.py float32" "$python" "$mb" --model "$model" \
  --prompt-from "$work/f.json" --device cpu --dtype float32 --warmup 1 \
  --iterations 3 --report "$work/m32.json"
contains "$out" "not the token-ids-512x128-v1 protocol"
expect_cmd 0 "float32 report" "$python" - "$work/f.json" "$work/m32.json" <<'PY'
import json, sys
f, m = (json.load(open(p)) for p in sys.argv[1:])
assert m["format"] == "foundry.infer.report" and m["version"] == 3
assert m["status"] == "ok" and m["error"] is None
assert m["implementation"] == "mlx" and m["backend"] == "mlx-f32", m["backend"]
assert m["build"]["mlx"] and m["build"]["mlx_lm"] and m["build"]["python"]
p = m["protocol"]
assert p["prompt_ids"] == f["protocol"]["prompt_ids"] and p["seed"] == "3"
assert p["prompt_source"] == "report" and p["gen_tokens"] == 6 and p["context"] == 18
assert p["name"] == "custom" and p["warmup"] == 1 and p["iterations"] == 3
assert p["ignore_eos"] is True and "iterations 3 (protocol 10)" in p["deviations"]
assert m["peer"]["dtype"] == "float32" and m["peer"]["dtype_source"] == "--dtype"
assert m["generated_ids"] == f["generated_ids"], (m["generated_ids"], f["generated_ids"])
assert m["generated_ids_by_sequence"] == [m["generated_ids"]]
assert m["ids_identical_across_executions"] is True
ex = m["executions"]
assert [e["measured"] for e in ex] == [False, True, True, True]
for e in ex:
    assert e["prefill_seconds"] > 0 and e["decode_seconds"] > 0
    assert abs(e["total_seconds"] - e["prefill_seconds"] - e["decode_seconds"]) < 1e-9
    assert len(e["decode_step_seconds"]) == 5
    assert abs(sum(e["decode_step_seconds"]) - e["decode_seconds"]) < 1e-9
    assert abs(e["decode_tokens_per_second"] * e["decode_seconds"] - 5) < 1e-9
s = m["statistics"]
assert s["end_to_end"]["median_seconds"] == sorted(e["total_seconds"] for e in ex[1:])[1]
assert s["decode_step_seconds"]["count"] == 15
assert m["environment"]["device"]["name"] == "cpu" and m["environment"]["backend"] == "cpu"
assert m["model"]["vocab_size"] == f["model"]["vocab_size"] == 2048
assert m["model"]["layers"] == 2 and m["model"]["group_size"] == 64
mem = m["memory"]
assert mem["weights_resident"] > 0 and mem["kv_cache"] > 0 and mem["weights_offloaded"] == 0
b = m["bandwidth"]
assert b["decode_weight_bytes_per_token"] > 0 and b["d2d"] is None
assert abs(b["achieved_bytes_per_second"]
           - b["decode_weight_bytes_per_token"] * s["decode_tokens_per_second"]) < 1e-3
# the checkpoint's files and SHA-256s, as infer-bench records them
ck = m["model"]["checkpoint"]
assert ck["files"] == f["model"]["checkpoint"]["files"], (ck, f["model"]["checkpoint"])
assert ck["hash_seconds"] >= 0 and ck["manifest"] is None
PY
expect_cmd 0 "compare_reports.py, foundry and mlx" "$python" "$cmp" \
  "$work/f.json" "$work/m32.json"
contains "$out" "comparable: yes"
contains "$out" "mlx (mlx-f32)"
contains "$out" "agree with report 1 for the first 6 of 6"

# the seeded prompt rule and a batch of 2 (sequence 1 from seed 4)
expect 0 infer-bench --model "$model" --threads 1 --prompt-tokens 12 \
  --gen-tokens 4 --warmup 0 --iterations 1 --seed 3 --batch 2 \
  --report "$work/fb.json"
expect_cmd 0 "mlx_baseline.py --batch 2 from the seed" "$python" "$mb" \
  --model "$model" --seed 3 --prompt-tokens 12 --gen-tokens 4 --batch 2 \
  --device cpu --dtype float32 --warmup 0 --iterations 1 --report "$work/mb.json"
expect_cmd 0 "batched report" "$python" - "$work/fb.json" "$work/mb.json" <<'PY'
import json, sys
f, m = (json.load(open(p)) for p in sys.argv[1:])
assert m["protocol"]["prompt_source"] == "seed" and m["protocol"]["batch"] == 2
assert m["protocol"]["prompt_ids"] == f["protocol"]["prompt_ids"]
assert m["generated_ids_by_sequence"] == f["generated_ids_by_sequence"], (
    m["generated_ids_by_sequence"], f["generated_ids_by_sequence"])
s = m["statistics"]
assert abs(s["aggregate_decode_tokens_per_second"] - 2 * s["decode_tokens_per_second"]) < 1e-6
PY
expect_cmd 0 "compare_reports.py, a batch" "$python" "$cmp" "$work/fb.json" \
  "$work/mb.json"
contains "$out" "2 of 2 sequences agree on every id"

# failures after the protocol was set: a failed report naming the stage
expect_cmd 1 "mlx_baseline.py on a missing model" "$python" "$mb" \
  --model "$work/missing" --device cpu --report "$work/missing.json"
contains "$work/missing.json" '"status": "failed"'
contains "$work/missing.json" '"stage": "setup"'
if ! "$python" -c "import mlx.core as mx; assert mx.is_available(mx.gpu)" \
  2>/dev/null; then
  expect_cmd 1 "mlx_baseline.py --device gpu without a GPU" "$python" "$mb" \
    --model "$model" --report "$work/nogpu.json"
  contains "$work/nogpu.json" '"stage": "setup"'
  contains "$err" "no GPU"
fi

# MLX reproduces the committed MLX-made fixture, and the generator writes
# the same checkpoint bytes again (its expected outputs, within the check's
# 1e-5, may differ in the last bits with another MLX version or device)
expect_cmd 0 "make_reference_fixture.py --engine mlx --check" "$python" "$mrf" \
  --engine mlx --check "$data/llama3-micro-mlx"
contains "$out" "greedy agreement 8/8"
expect_cmd 0 "make_reference_fixture.py --engine mlx llama3-micro-mlx" \
  "$python" "$mrf" --engine mlx "$work/fx" llama3-micro-mlx
contains "$out" "greedy ids equal"
for f in config.json model.safetensors model.safetensors.index.json; do
  cmp -s "$work/fx/llama3-micro-mlx/model/$f" "$data/llama3-micro-mlx/model/$f" ||
    fail "the regenerated llama3-micro-mlx/model/$f differs from the committed one"
done
expect 0 verify --model "$work/fx/llama3-micro-mlx/model" \
  --reference "$work/fx/llama3-micro-mlx/expected.safetensors" --tolerance 1e-4
contains "$out" "verify: passed"
contains "$work/fx/llama3-micro-mlx/reference.txt" "mlx-lm "

# a reference of any checkpoint from MLX: foundry verify passes on it
expect_cmd 0 "make_reference_fixture.py --engine mlx --model" "$python" "$mrf" \
  --engine mlx --model "$model" --out "$work/e.safetensors" --seed 5 \
  --prompt-tokens 10 --greedy-tokens 4
expect 0 verify --model "$model" --reference "$work/e.safetensors" \
  --tolerance 1e-4
contains "$out" "greedy agreement: 4/4"
contains "$out" "verify: passed"
expect_cmd 1 "make_reference_fixture.py --out over an existing file" "$python" \
  "$mrf" --engine mlx --model "$model" --out "$work/e.safetensors"
contains "$err" "exists"

finish mlx_peer
