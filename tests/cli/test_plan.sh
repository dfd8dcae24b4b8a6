#!/bin/sh
# `foundry plan`: dump then check the default plan, refuse to overwrite,
# reject a plan with one release removed and a truncated file, and reject bad
# options with exit 2.
# usage: test_plan.sh FOUNDRY [PYTHON3]
set -u
foundry=$1
python=${2:-}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
failures=0

fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

expect() { # expect CODE DESCRIPTION COMMAND...
  want=$1; what=$2; shift 2
  "$@" >"$dir/out" 2>"$dir/err"
  got=$?
  if [ "$got" -ne "$want" ]; then
    fail "$what: exit $got, want $want"
    cat "$dir/err" >&2
  fi
}

# The default plan: 48 x 450 MiB (21 GiB) through 3 slots in a 4 GiB budget.
expect 0 "dump the default plan" "$foundry" plan --dump "$dir/default.json"
expect 0 "check the default plan" "$foundry" plan --check "$dir/default.json"
grep -q "valid, .* 48 ops, 3 slots" "$dir/err" || fail "summary of the default plan: $(cat "$dir/err")"

# Never overwrite.
cp "$dir/default.json" "$dir/before.json"
expect 1 "dump onto an existing file" "$foundry" plan --dump "$dir/default.json" --layers 2
cmp -s "$dir/default.json" "$dir/before.json" || fail "existing plan was modified"

# Sequential, double and many-buffered plans of a small chain.
for buffers in 1 2 3 7; do
  expect 0 "dump $buffers buffers" "$foundry" plan --dump "$dir/b$buffers.json" \
    --layers 5 --weight-mib 1 --buffers "$buffers" --budget 64MiB
  expect 0 "check $buffers buffers" "$foundry" plan --check "$dir/b$buffers.json"
done
expect 0 "dump to stdout" "$foundry" plan --dump - --layers 2 --weight-mib 1 --budget 8MiB
grep -q '"commands"' "$dir/out" || fail "stdout dump has no commands"

# Broken files.
size=$(wc -c <"$dir/b3.json")
head -c $((size / 2)) "$dir/b3.json" >"$dir/truncated.json"
expect 1 "check a truncated plan" "$foundry" plan --check "$dir/truncated.json"
expect 1 "check a missing file" "$foundry" plan --check "$dir/missing.json"
if [ -n "$python" ]; then
  "$python" - "$dir/b3.json" "$dir/no-release.json" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
commands = doc["commands"]
last = max(i for i, c in enumerate(commands) if c["kind"] == "release")
del commands[last]
json.dump(doc, open(sys.argv[2], "w"))
PY
  expect 1 "check a plan with one release removed" "$foundry" plan --check "$dir/no-release.json"
  grep -q "at command" "$dir/err" || fail "no command index in: $(cat "$dir/err")"
fi

# Impossible budget and bad options.
expect 1 "budget below the slots" "$foundry" plan --dump "$dir/small.json" --budget 1MiB
[ -e "$dir/small.json" ] && fail "a failed dump left a file"
expect 2 "zero buffers" "$foundry" plan --dump "$dir/x.json" --buffers 0
expect 2 "zero layers" "$foundry" plan --dump "$dir/x.json" --layers 0
expect 2 "bad budget unit" "$foundry" plan --dump "$dir/x.json" --budget 12XB
expect 2 "alignment not a power of two" "$foundry" plan --dump "$dir/x.json" --alignment 3
expect 2 "both dump and check" "$foundry" plan --dump "$dir/x.json" --check "$dir/b1.json"
expect 2 "neither dump nor check" "$foundry" plan
expect 2 "unknown option" "$foundry" plan --frobnicate
expect 2 "missing value" "$foundry" plan --dump
expect 2 "planner options with check" "$foundry" plan --check "$dir/b1.json" --layers 3

[ "$failures" -eq 0 ] || exit 1
echo "cli plan: all checks passed"
