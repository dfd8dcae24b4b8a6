#!/bin/sh
# A load test of `foundry serve` (CPU backend, micro model, loopback) with
# scripts/serve_load.py: 32 concurrent clients x 8 streamed requests each
# (8 distinct prompts of 16 ids, 8 ids generated) on 16 slots, in rounds.
# Every request completes, and each gets exactly the greedy ids of its own
# prompt from `foundry generate --prompts-file` (no request gets another's
# tokens); /metrics counts them all; the server's resident memory is flat
# from the second round to the last (growth under 1 MiB). Sanitizer builds
# run one round of shorter requests (fewer per client under TSan) and do
# not check memory, which their allocators hold; ASan finds leaks at the
# server's exit instead. SIGTERM exits 0.
# usage: test_serve_load.sh FOUNDRY_BINARY TEST_DATA_DIR
set -u
foundry=$1
data=$2
model=$data/llama3-micro/model
work=$(mktemp -d)
. "$(dirname "$0")/../cli_lib.sh"
. "$(dirname "$0")/serve_lib.sh"
load=$(dirname "$0")/../../scripts/serve_load.py

for tool in curl python3; do
  command -v "$tool" >/dev/null 2>&1 || {
    echo "$tool is missing: skipped"
    exit 77
  }
done

# sanitizer builds (ASan's ctest preset sets ASAN_OPTIONS, TSan's
# FOUNDRY_TSAN) run the model many times slower: one round of shorter
# requests, and under TSan 2 requests per client
rounds=6
requests=8
shape="--prompt-tokens 16 --max-tokens 8 --distinct 8"
sanitized=${ASAN_OPTIONS:-}${FOUNDRY_TSAN:-}
if [ -n "$sanitized" ]; then
  rounds=1
  shape="--prompt-tokens 8 --max-tokens 4 --distinct 8"
fi
[ -n "${FOUNDRY_TSAN:-}" ] && requests=2
total=$((32 * requests))

# shellcheck disable=SC2086 # $shape is a list of flags
expect_cmd 0 "serve_load.py --write-prompts" python3 "$load" $shape \
  --write-prompts "$work/prompts.jsonl"
expect 0 generate --model "$model" --prompts-file "$work/prompts.jsonl" \
  --threads 2
cp "$out" "$work/expected.jsonl"
[ "$(wc -l <"$work/expected.jsonl")" -eq 8 ] ||
  fail "generate gave $(wc -l <"$work/expected.jsonl") answers for 8 prompts"

start --model "$model" --max-sequences 16 --max-queue 64
# shellcheck disable=SC2086
expect_cmd 0 "serve_load.py: 32 clients x $requests requests, $rounds rounds" \
  python3 "$load" --url "$url" $shape --clients 32 --requests "$requests" \
  --rounds "$rounds" --expect "$work/expected.jsonl" --pid "$pid"
cp "$out" "$work/report.jsonl"
cat "$work/report.jsonl"
[ "$(grep -c "\"completed\": $total, \"failed\": 0, \"wrong_ids\": 0" \
  "$work/report.jsonl")" -eq "$rounds" ] ||
  fail "not every round completed its $total requests with their own ids"

# /metrics: every request ended by its length or a stop id
curl -s "$url/metrics" >"$work/metrics"
ended=$(awk '/^foundry_requests_total\{outcome="(stop|length)"\}/ { n += $2 }
  END { print n + 0 }' "$work/metrics")
[ "$ended" -eq $((rounds * total)) ] ||
  fail "/metrics counts $ended requests ended, expected $((rounds * total))"

if [ -z "$sanitized" ]; then
  second=$(sed -n '2s/.*"server_rss_bytes": \([0-9]*\).*/\1/p' \
    "$work/report.jsonl")
  last=$(sed -n '$s/.*"server_rss_bytes": \([0-9]*\).*/\1/p' \
    "$work/report.jsonl")
  [ "$last" -lt $((second + 1048576)) ] ||
    fail "the server's memory grew from $second to $last bytes over the rounds"
fi
stop

finish serve_load
