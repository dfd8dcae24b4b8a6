#!/bin/sh
# Tests of the peers of `foundry infer-bench`: scripts/torch_baseline.py
# (usage errors and their exit codes before torch is imported, an existing
# report, a prompt report that is not one, the size parser) and
# scripts/compare_reports.py (ratios, protocol and shape mismatches flagged,
# report versions, failed reports). When PYTHON3 imports torch and
# transformers, torch_baseline.py also runs the protocol on the CPU on the
# llama3-tiny fixture: in float32 its greedy ids equal foundry's CPU ids, the
# report is consistent, and so do the ids of every format and family of
# tests/data (8-bit, unquantized, mixed; Mistral, Qwen2, Qwen3); a model
# that does not load or whose model_type foundry does not run gives a
# failed report; and
# with accelerate, the offload device map places every byte once. Exit 77
# (skipped) without python3.
# usage: test_peers.sh FOUNDRY_BINARY TEST_DATA_DIR SCRIPTS [PYTHON3]
set -u
foundry=$1
data=$2
scripts=$3
python=${4:-}
if [ -z "$python" ]; then
  echo "python3 missing: skipped"
  exit 77
fi
model=$data/llama3-tiny/model
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
. "$(dirname "$0")/../cli_lib.sh"
tb=$scripts/torch_baseline.py
cmp=$scripts/compare_reports.py

# a foundry report to compare with and take the prompt from
expect 0 infer-bench --model "$model" --threads 1 --prompt-tokens 12 \
  --gen-tokens 6 --warmup 1 --iterations 3 --seed 3 --report "$work/f.json"

# torch_baseline.py usage errors: exit 2, no report
for args in "--mode fast" "--offload-budget 0" "--offload-budget 2GB" \
  "--offload-budget -1GiB" "--offload-budget 1.5GiB" \
  "--offload-budget 2GiB --device cpu" "--offload-budget 2GiB --mode compile" \
  "--prompt-from $work/f.json --prompt-tokens 12" "--iterations 0" \
  "--gen-tokens 0" "--prompt-tokens 0" "--warmup -1" "--seed -1" \
  "--device metal" "--dtype float16" "--bogus"; do
  # shellcheck disable=SC2086  # the cases are word lists
  expect_cmd 2 "torch_baseline.py $args" "$python" "$tb" --model "$model" \
    --report "$work/u.json" $args
  contains "$err" "error"
done
expect_cmd 2 "torch_baseline.py without --report" "$python" "$tb" --model "$model"
[ -e "$work/u.json" ] && fail "a usage error left a report"

# an existing report: exit 1, untouched; a prompt report that is not one
: >"$work/taken.json"
expect_cmd 1 "torch_baseline.py over an existing report" "$python" "$tb" \
  --model "$model" --report "$work/taken.json"
contains "$err" "exists"
[ -s "$work/taken.json" ] && fail "an existing report was overwritten"
expect_cmd 1 "torch_baseline.py --prompt-from config.json" "$python" "$tb" \
  --model "$model" --prompt-from "$model/config.json" --report "$work/p.json"
contains "$err" "not an infer-bench report"
[ -e "$work/p.json" ] && fail "a bad prompt report left a report"

expect_cmd 0 "size parser" "$python" - "$scripts" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
import torch_baseline as tb
good = {"123": 123, "123B": 123, "64KiB": 64 << 10, "450MiB": 450 << 20,
        "2GiB": 2 << 30, "2 GiB": 2 << 30, "1TiB": 1 << 40}
for text, want in good.items():
    assert tb.parse_bytes(text) == want, text
for text in ("", "0", "0GiB", "2GB", "2gib", "1.5GiB", "-1", "GiB", "2  GiB", " 2",
             "18446744073709551616", "16777216TiB"):
    try:
        tb.parse_bytes(text)
    except ValueError:
        continue
    raise AssertionError("accepted %r" % text)
assert tb.device_of({"model.layers.1": 0, "model": "cpu"}, "model.layers.1.mlp.up.weight") == 0
assert tb.device_of({"model.layers.1": 0, "model": "cpu"}, "model.layers.10.x") == "cpu"
assert tb.device_of({"": 0}, "lm_head.weight") == 0
PY

# compare_reports.py: a peer-like report derived from foundry's
expect_cmd 0 "derived reports" "$python" - "$work" <<'PY'
import json, os, sys
d = sys.argv[1]
r = json.load(open(os.path.join(d, "f.json")))
peer = dict(r, implementation="transformers", backend="transformers-bf16-compile",
            version=2, peer={"mode": "compile", "compile": {"seconds": 12.5}})
peer["statistics"] = dict(r["statistics"], decode_tokens_per_second=
                          r["statistics"]["decode_tokens_per_second"] / 4)
peer["generated_ids"] = r["generated_ids"][:3] + [-5] * 3
json.dump(peer, open(os.path.join(d, "peer.json"), "w"))
other = dict(r, protocol=dict(r["protocol"], gen_tokens=7, iterations=4,
                              deviations=["iterations 4 (protocol 10)"]))
json.dump(other, open(os.path.join(d, "other.json"), "w"))
json.dump(dict(r, status="failed", error={"stage": "executions"}),
          open(os.path.join(d, "failed.json"), "w"))
json.dump(dict(r, version=4), open(os.path.join(d, "v4.json"), "w"))
PY
expect_cmd 0 "compare_reports.py, a peer" "$python" "$cmp" "$work/f.json" \
  "$work/peer.json"
contains "$out" "comparable: yes"
contains "$out" "same prompt ids: yes"
contains "$out" "(x4.00)"
contains "$out" "12.5"
contains "$out" "agree with report 1 for the first 3 of 6"
grep -q "MISMATCH" "$out" && fail "same protocol flagged as a mismatch"
expect_cmd 0 "compare_reports.py, other shapes" "$python" "$cmp" \
  "$work/f.json" "$work/other.json"
contains "$out" "MISMATCH: generated tokens: report 1 6, report 2 7"
contains "$out" "MISMATCH: measured executions: report 1 3, report 2 4"
contains "$out" "note: report 2 is not the whole protocol: iterations 4"
contains "$out" "comparable: no"
expect_cmd 1 "compare_reports.py on a failed report" "$python" "$cmp" \
  "$work/f.json" "$work/failed.json"
contains "$err" "failed run"
expect_cmd 1 "compare_reports.py on version 4" "$python" "$cmp" \
  "$work/f.json" "$work/v4.json"
expect_cmd 1 "compare_reports.py on a missing file" "$python" "$cmp" \
  "$work/f.json" "$work/none.json"
expect_cmd 2 "compare_reports.py with an option" "$python" "$cmp" \
  --all "$work/f.json" "$work/peer.json"

if ! "$python" -c "import torch, transformers" 2>/dev/null; then
  echo "torch or transformers missing: the CPU runs of torch_baseline.py skipped"
  finish peers
  exit 0
fi

# float32 on the CPU: the greedy ids of foundry's CPU backend
expect_cmd 0 "torch_baseline.py eager float32" "$python" "$tb" --model "$model" \
  --prompt-from "$work/f.json" --device cpu --dtype float32 --mode eager \
  --warmup 1 --iterations 3 --report "$work/t32.json"
contains "$out" "not the token-ids-512x128-v1 protocol"
expect_cmd 0 "float32 report" "$python" - "$work/f.json" "$work/t32.json" <<'PY'
import json, sys
f, t = (json.load(open(p)) for p in sys.argv[1:])
assert t["format"] == "foundry.infer.report" and t["version"] == 3
assert t["status"] == "ok" and t["error"] is None
assert t["implementation"] == "transformers" and t["backend"] == "transformers-f32-eager"
assert t["build"]["torch"] and t["build"]["transformers"]
p = t["protocol"]
assert p["prompt_ids"] == f["protocol"]["prompt_ids"] and p["seed"] == "3"
assert p["prompt_source"] == "report" and p["gen_tokens"] == 6 and p["context"] == 18
assert p["name"] == "custom" and p["warmup"] == 1 and p["iterations"] == 3
assert "iterations 3 (protocol 10)" in p["deviations"]
assert t["peer"]["mode"] == "eager" and t["peer"]["compile"] is None
assert t["peer"]["offload"] is None and t["peer"]["dtype"] == "float32"
assert t["generated_ids"] == f["generated_ids"], (t["generated_ids"], f["generated_ids"])
assert t["ids_identical_across_executions"] is True
ex = t["executions"]
assert [e["measured"] for e in ex] == [False, True, True, True]
for e in ex:
    assert e["total_seconds"] >= e["prefill_seconds"] + e["decode_seconds"] > 0
    assert abs(e["decode_tokens_per_second"] * e["decode_seconds"] - 5) < 1e-9
s = t["statistics"]
assert s["end_to_end"]["median_seconds"] == sorted(e["total_seconds"] for e in ex[1:])[1]
m = t["memory"]
assert m["weights_offloaded"] == 0 and m["kv_cache"] == 2 * 2 * 2 * 18 * 128 * 4
assert t["model"]["vocab_size"] == f["model"]["vocab_size"]
assert t["model"]["layers"] == f["model"]["layers"] == 2
assert t["environment"]["device"]["name"] == "cpu"
PY
expect_cmd 0 "compare_reports.py, foundry and transformers" "$python" "$cmp" \
  "$work/f.json" "$work/t32.json"
contains "$out" "comparable: yes"
contains "$out" "agree with report 1 for the first 6 of 6"

# every format and family of tests/data: float32 greedy ids equal foundry's
# CPU ids (8-bit, unquantized, mixed bits; Mistral, Qwen2 with its biases,
# Qwen3 with its per-head norms)
for fixture in llama3-micro-q8-g32 llama3-micro-bf16 llama3-micro-mixed \
  mistral-micro qwen2-micro qwen3-micro; do
  expect 0 infer-bench --model "$data/$fixture/model" --threads 1 \
    --prompt-tokens 12 --gen-tokens 8 --warmup 0 --iterations 1 --seed 3 \
    --report "$work/$fixture.f.json"
  expect_cmd 0 "torch_baseline.py on $fixture" "$python" "$tb" \
    --model "$data/$fixture/model" --prompt-from "$work/$fixture.f.json" \
    --device cpu --dtype float32 --mode eager --warmup 0 --iterations 1 \
    --report "$work/$fixture.t.json"
  expect_cmd 0 "$fixture: the ids of foundry" "$python" - \
    "$work/$fixture.f.json" "$work/$fixture.t.json" <<'PY'
import json, sys
f, t = (json.load(open(p)) for p in sys.argv[1:])
assert len(f["generated_ids"]) == 8
assert t["generated_ids"] == f["generated_ids"], (t["generated_ids"], f["generated_ids"])
assert t["model"]["group_size"] == f["model"]["group_size"]
PY
done

# a family foundry does not run: a failed report naming it
mkdir "$work/gemma"
cp "$data/llama3-micro/model/"* "$work/gemma/"
sed 's/"model_type": *"llama"/"model_type": "gemma"/' \
  "$data/llama3-micro/model/config.json" >"$work/gemma/config.json"
expect_cmd 1 "torch_baseline.py on model_type gemma" "$python" "$tb" \
  --model "$work/gemma" --device cpu --dtype float32 --mode eager \
  --warmup 0 --iterations 1 --report "$work/gemma.json"
contains "$work/gemma.json" "model_type 'gemma' is none of llama, mistral, qwen2, qwen3"

# bfloat16, the seeded prompt rule
expect_cmd 0 "torch_baseline.py eager bfloat16" "$python" "$tb" --model "$model" \
  --seed 3 --prompt-tokens 12 --gen-tokens 6 --device cpu --mode eager \
  --warmup 0 --iterations 1 --report "$work/tbf.json"
expect_cmd 0 "bfloat16 report" "$python" - "$work/f.json" "$work/tbf.json" <<'PY'
import json, sys
f, t = (json.load(open(p)) for p in sys.argv[1:])
assert t["backend"] == "transformers-bf16-eager"
assert t["protocol"]["prompt_ids"] == f["protocol"]["prompt_ids"]
assert t["protocol"]["prompt_source"] == "seed"
assert len(t["generated_ids"]) == 6 and t["memory"]["kv_cache"] == 2 * 2 * 2 * 18 * 128 * 2
PY

# a model that does not load: exit 1, a failed report naming the stage
expect_cmd 1 "torch_baseline.py on a missing model" "$python" "$tb" \
  --model "$work/missing" --device cpu --report "$work/m.json"
contains "$work/m.json" '"status": "failed"'
contains "$work/m.json" '"stage": "setup"'
expect_cmd 1 "compare_reports.py on it" "$python" "$cmp" "$work/f.json" \
  "$work/m.json"

if "$python" -c "import accelerate" 2>/dev/null; then
  expect_cmd 0 "offload device map" "$python" - "$scripts" "$model" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
import torch
import torch_baseline as tb
raw, config, model = tb.build_model(sys.argv[2], "cpu", torch.bfloat16)
total = sum(p.numel() * p.element_size() for p in model.parameters())
table = model.model.embed_tokens.weight.numel() * 2
layer = sum(p.numel() * p.element_size() for p in model.model.layers[0].parameters())
# nothing fits, the table only, everything
for budget, resident in ((1 << 20, 0), (table + layer + (1 << 20), table), (2 * total, total)):
    device_map = tb.offload_device_map(model, budget, 1 << 34)
    r, off, copied = tb.placement_bytes(model, device_map)
    assert (r, off) == (resident, total - resident), (budget, device_map, r, off)
    assert copied == off, (device_map, copied, off)
print("offload maps checked")
PY
  contains "$out" "offload maps checked"
else
  echo "accelerate missing: the offload device map check skipped"
fi

finish peers
