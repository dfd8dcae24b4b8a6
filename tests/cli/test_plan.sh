#!/bin/sh
# `foundry plan`: dump then check the default plan, refuse to overwrite,
# give the written file the umask's mode, reject a plan with one release
# removed and a truncated file, and reject bad options with exit 2.
# usage: test_plan.sh FOUNDRY TEST_DATA_DIR [PYTHON3]   (without PYTHON3 the
# checks that edit a plan with python are skipped)
set -u
foundry=$1
data=$2
python=${3:-}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
work=$dir
. "$(dirname "$0")/../cli_lib.sh"

mode() { # mode FILE: the permission string of ls -l, e.g. -rw-r--r--
  ls -l "$1" | cut -c1-10
}

# The default plan: 48 x 450 MiB (21 GiB) through 3 slots in a 4 GiB budget.
expect 0 plan --dump "$dir/default.json"
contains "$out" "default.json: valid, "
expect 0 plan --check "$dir/default.json"
grep -q "valid, .* 48 ops, 3 slots" "$out" || fail "summary of the default plan on stdout: $(cat "$out")"
[ -s "$err" ] && fail "a successful check wrote to stderr: $(cat "$err")"

# The written plan gets 0666 & ~umask like any new file, not mkstemp's 0600.
(umask 022 && "$foundry" plan --dump "$dir/m022.json" --layers 2 --weight-mib 1 --budget 8MiB) >/dev/null 2>&1 ||
  fail "dump under umask 022"
[ "$(mode "$dir/m022.json")" = "-rw-r--r--" ] || fail "mode under umask 022: $(mode "$dir/m022.json")"
(umask 077 && "$foundry" plan --dump "$dir/m077.json" --layers 2 --weight-mib 1 --budget 8MiB) >/dev/null 2>&1 ||
  fail "dump under umask 077"
[ "$(mode "$dir/m077.json")" = "-rw-------" ] || fail "mode under umask 077: $(mode "$dir/m077.json")"

# A legal 250-byte name works (the temporary beside it fits NAME_MAX).
name=$(long_name 250)
expect 0 plan --dump "$dir/$name" --layers 2 --weight-mib 1 --budget 8MiB
expect 0 plan --check "$dir/$name"
expect 1 plan --dump "$dir/${name}xxxxxx" --layers 2 --weight-mib 1 --budget 8MiB
ro=$(unwritable_dir)
if [ -n "$ro" ]; then
  expect 1 plan --dump "$ro/p.json" --layers 2 --weight-mib 1 --budget 8MiB
  contains "$err" "cannot create a temporary file next to"
fi

# Never overwrite.
cp "$dir/default.json" "$dir/before.json"
expect 1 plan --dump "$dir/default.json" --layers 2
cmp -s "$dir/default.json" "$dir/before.json" || fail "existing plan was modified"

# Sequential, double and many-buffered plans of a small chain (a budget of
# exactly N slots streams every layer).
for buffers in 1 2 3 7; do
  expect 0 plan --dump "$dir/b$buffers.json" \
    --layers 8 --weight-mib 1 --buffers "$buffers" --budget "${buffers}MiB"
  expect 0 plan --check "$dir/b$buffers.json"
done
expect 0 plan --dump - --layers 2 --weight-mib 1 --budget 8MiB
grep -q '"commands"' "$out" || fail "stdout dump has no commands"
grep -q 'valid, ' "$out" && fail "the summary of a dump to stdout went into the plan"
contains "$err" "plan: valid, "
ls "$dir" | grep -q '\.tmp\.' && fail "a temporary file was left behind: $(ls "$dir")"

# A full stdout fails the check and the dump (before the summary).
expect_full plan --check "$dir/b1.json"
expect_full plan --dump - --layers 2 --weight-mib 1 --budget 8MiB
grep -q "valid" "$err" && fail "a dump to a full stdout printed its summary"

# Broken files.
size=$(wc -c <"$dir/b3.json")
head -c $((size / 2)) "$dir/b3.json" >"$dir/truncated.json"
expect 1 plan --check "$dir/truncated.json"
expect 1 plan --check "$dir/missing.json"
# A FIFO (no writer) or a directory fails at once instead of blocking.
mkfifo "$dir/fifo.json"
expect_cmd 1 "plan --check on a FIFO" timeout 20 "$foundry" plan --check "$dir/fifo.json"
contains "$err" "not a regular file"
expect 1 plan --check "$dir"
contains "$err" "not a regular file"
# A NUL byte after a number is not JSON (jansson 2.14 would skip it).
expect 1 plan --check "$data/bad/plan-nul-after-number.json"
contains "$err" "NUL byte at line 3"
if [ -n "$python" ]; then
  "$python" - "$dir/b3.json" "$dir/no-release.json" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
commands = doc["sections"][-1]["commands"]
last = max(i for i, c in enumerate(commands) if c["kind"] == "release")
del commands[last]
json.dump(doc, open(sys.argv[2], "w"))
PY
  expect 1 plan --check "$dir/no-release.json"
  contains "$err" "invalid plan (plan_unreleased_end): command "
  [ "$(grep -o 'command [0-9][0-9]*' "$err" | wc -l)" -eq 1 ] ||
    fail "the command index is not given exactly once: $(cat "$err")"
  [ -s "$out" ] && fail "a failed check wrote to stdout: $(cat "$out")"
else
  echo "cli plan: no python3, skipping the checks of an edited plan"
fi

# The plan of a Llama checkpoint: everything resident by default, layers
# streamed through slots when the budget is small; both pass --check.
model=$data/llama3-micro/model
expect 0 plan --dump "$dir/llama.json" --model "$model" --context 64
contains "$out" "0 slots"
expect 0 plan --check "$dir/llama.json"
expect 0 plan --dump "$dir/llama-streamed.json" --model "$model" \
  --context 64 --budget 600KiB --buffers 1
contains "$out" "1 slots"
expect 0 plan --check "$dir/llama-streamed.json"
expect 1 plan --dump "$dir/llama-small.json" --model "$model" --budget 1KiB
[ -e "$dir/llama-small.json" ] && fail "a refused plan was written"
expect 2 plan --dump "$dir/x.json" --model "$model" --layers 2
expect 2 plan --dump "$dir/x.json" --context 64
expect 1 plan --dump "$dir/x.json" --model "$dir/nonexistent"

# Impossible budget and bad options.
expect 2 plan --dump "$dir/x.json" --layers 65537
contains "$err" "--layers"
expect 2 plan --dump "$dir/x.json" --layers 4294967295
expect 2 plan --dump "$dir/x.json" --buffers 4097
expect 1 plan --dump "$dir/small.json" --budget 1MiB
[ -e "$dir/small.json" ] && fail "a failed dump left a file"
expect 2 plan --dump "$dir/x.json" --buffers 0
expect 2 plan --dump "$dir/x.json" --layers 0
expect 2 plan --dump "$dir/x.json" --budget 12XB
expect 2 plan --dump "$dir/x.json" --alignment 3
expect 2 plan --dump "$dir/x.json" --weight-mib 0
contains "$err" "--weight-mib must be an integer from 1 to 4294967295, got '0'"
expect 2 plan --dump "$dir/x.json" --weight-mib 4294967296
contains "$err" "--weight-mib must be an integer from 1 to 4294967295, got '4294967296'"
expect 2 plan --dump "$dir/x.json" --weight-mib 99999999999999999999
contains "$err" "--weight-mib must be an integer from 1 to 4294967295, got '99999999999999999999'"
expect 2 plan --dump "$dir/x.json" --budget 0
contains "$err" "--budget must be positive"
expect 2 plan --dump "$dir/x.json" --budget 0GiB
contains "$err" "--budget must be positive"
expect 2 plan --dump "$dir/x.json" --budget 99999999999GiB
contains "$err" "--budget: byte size '99999999999GiB' does not fit 64 bits"
expect 2 plan --dump "$dir/x.json" --budget 9223372036854775808
contains "$err" "--budget: '9223372036854775808' is above the largest size"
expect 2 plan --dump "$dir/x.json" --budget 8388608TiB
[ -e "$dir/x.json" ] && fail "a rejected dump left a file"
expect 2 plan --dump "$dir/x.json" --check "$dir/b1.json"
expect 2 plan
expect 2 plan --frobnicate
expect 2 plan --dump
expect 2 plan --check "$dir/b1.json" --layers 3

finish "cli plan"
