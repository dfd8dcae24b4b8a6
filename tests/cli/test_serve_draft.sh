#!/bin/sh
# End-to-end tests of `foundry serve --draft-model` (speculative decoding
# for a request running alone, issue #32) on loopback with curl (CPU
# backend), on the fixtures of 512 ids: greedy completions equal
# `generate --prompt-ids` without a draft, one at a time (speculated) and
# 8 at once on 4 slots (batched, then speculated once alone), streamed
# (one chunk per id), with a mostly wrong draft and with the model drafting
# for itself (every proposal accepted: /metrics counts rounds, proposed
# and accepted ids), fixed K, one slot; seeded sampled requests are
# repeatable, valid and, 600 of them, distributed as the model's own
# sampling (serve_checks.py draws and compare: a two-sample chi-square
# test against a server without a draft, which tells the draft's own
# distribution apart); chat and stop strings through speculation
# (serve_checks.py stop); a draft of another vocabulary is refused before
# serving naming both sizes (exit 1); usage errors (exit 2). Sanitizer
# builds (ASan's ctest preset sets ASAN_OPTIONS, TSan's FOUNDRY_TSAN) run
# the model many times slower: 30 draws with each draft, checked for
# validity only, and no servers without a draft.
# usage: test_serve_draft.sh FOUNDRY_BINARY TEST_DATA_DIR
set -u
foundry=$1
data=$2
a=$data/llama3-micro-untied-g32/model
b=$data/llama3-micro-mha-g128/model
work=$(mktemp -d)
. "$(dirname "$0")/../cli_lib.sh"
. "$(dirname "$0")/serve_lib.sh"

for tool in curl python3; do
  command -v "$tool" >/dev/null 2>&1 || {
    echo "$tool is missing: skipped"
    exit 77
  }
done
checks=$(dirname "$0")/serve_checks.py
sanitized=${ASAN_OPTIONS:-}${FOUNDRY_TSAN:-}
draws=600
[ -n "$sanitized" ] && draws=30

# the value of metric $1 on /metrics
metric() {
  curl -s "$url/metrics" | sed -n "s/^$1 //p"
}

# prompts:max_tokens; greedy ids of generate without a draft in
# $work/expected.I
set -- 68,278,46,257,75,219,62,27,89,45,26,29,38,414,36,19,415,361,60,43:24 \
  5:12 17,3,250,64,1,90,12,400,33,8,71,60,2,19,88,100,7,42:3 300,301:1 \
  9,99,199,90,409:30 1,2,3,4,5,6:5 200:6 44,45,46,47:17
i=0
for prompt in "$@"; do
  expect 0 generate --model "$a" --prompt-ids "${prompt%:*}" \
    --max-tokens "${prompt#*:}" --threads 2
  sed -n 's/^ids: //p' "$out" >"$work/expected.$i"
  i=$((i + 1))
done

# greedy ids equal the model's own: one at a time, then 8 at once; $1 names
# the server
greedy_checks() {
  i=0
  for prompt in "$@"; do
    curl -s -o "$work/got.$i" -H 'Content-Type: application/json' \
      --data-binary "{\"prompt\":[${prompt%:*}],\"max_tokens\":${prompt#*:},\
\"temperature\":0}" "$url/v1/completions"
    [ "$(ids_of "$work/got.$i")" = "$(cat "$work/expected.$i")" ] ||
      fail "$name, prompt $i alone: $(cat "$work/got.$i"), \
generate: $(cat "$work/expected.$i")"
    i=$((i + 1))
  done
  concurrent_same "$name" "$@"
  # streamed: one chunk per id, the same ids
  curl -s -N -o "$work/stream" -H 'Content-Type: application/json' \
    --data-binary "{\"prompt\":[${1%:*}],\"max_tokens\":${1#*:},\
\"temperature\":0,\"stream\":true}" "$url/v1/completions"
  [ "$(grep -c '^data: {' "$work/stream")" -eq "${1#*:}" ] ||
    fail "$name: expected ${1#*:} chunks: $(cat "$work/stream")"
  [ "$(ids_of "$work/stream")" = "$(cat "$work/expected.0")" ] ||
    fail "$name, stream: $(cat "$work/stream"), \
generate: $(cat "$work/expected.0")"
  [ "$(tail -n 2 "$work/stream" | head -n 1)" = "data: [DONE]" ] ||
    fail "$name: no [DONE] last: $(cat "$work/stream")"
}

# a mostly wrong draft on 4 slots
name="a drafted by b"
start --model "$a" --draft-model "$b" --max-sequences 4
contains "$work/server.log" "proposing K 4 adaptive"
greedy_checks "$@"
rounds=$(metric foundry_draft_rounds_total)
proposed=$(metric foundry_draft_proposed_tokens_total)
accepted=$(metric foundry_draft_accepted_tokens_total)
[ "${rounds:-0}" -gt 0 ] || fail "$name: no speculative rounds: $rounds"
[ "${accepted:-1}" -le "${proposed:-0}" ] ||
  fail "$name: $accepted accepted of $proposed"
# a seeded sampled request is repeatable and valid
sampled='{"prompt":[5,6,7],"max_tokens":12,"temperature":0.9,"top_k":40,
  "top_p":0.9,"seed":7}'
curl -s -o "$work/s1" -H 'Content-Type: application/json' \
  --data-binary "$sampled" "$url/v1/completions"
curl -s -o "$work/s2" -H 'Content-Type: application/json' \
  --data-binary "$sampled" "$url/v1/completions"
[ -n "$(ids_of "$work/s1")" ] && [ "$(ids_of "$work/s1")" = "$(ids_of "$work/s2")" ] ||
  fail "$name: seeded samples differ: $(cat "$work/s1"), $(cat "$work/s2")"
for id in $(ids_of "$work/s1" | tr ',' ' '); do
  [ "$id" -ge 0 ] && [ "$id" -lt 512 ] || fail "$name: sampled id $id"
done
# 600 sampled requests, distributed as the model's own sampling
expect_cmd 0 "serve_checks.py draws (a drafted by b)" \
  python3 "$checks" "$url" draws 1 "$work/draws.spec" "$draws"
stop

# the model drafting for itself accepts every proposal, greedy and sampled
name="a drafted by a"
start --model "$a" --draft-model "$a" --max-sequences 4
greedy_checks "$@"
rounds=$(metric foundry_draft_rounds_total)
proposed=$(metric foundry_draft_proposed_tokens_total)
accepted=$(metric foundry_draft_accepted_tokens_total)
[ "${rounds:-0}" -gt 0 ] && [ "$accepted" = "$proposed" ] ||
  fail "$name: $rounds rounds, $accepted accepted of $proposed"
expect_cmd 0 "serve_checks.py draws (a drafted by a)" \
  python3 "$checks" "$url" draws 5001 "$work/draws.self" "$draws"
[ "$(metric foundry_draft_accepted_tokens_total)" = \
  "$(metric foundry_draft_proposed_tokens_total)" ] ||
  fail "$name: sampled proposals of the model itself rejected"
stop

# fixed K on one slot
name="a drafted by b, K 3 fixed, one slot"
start --model "$a" --draft-model "$b" --draft-tokens 3 --draft-fixed \
  --max-sequences 1
contains "$work/server.log" "proposing K 3 fixed"
greedy_checks "$@"
stop

# the model's own sampling, and the draft's (which the test tells apart)
if [ -z "$sanitized" ]; then
  start --model "$a" --max-sequences 4
  expect_cmd 0 "serve_checks.py draws (a)" \
    python3 "$checks" "$url" draws 1000001 "$work/draws.plain" "$draws"
  [ "$(metric foundry_draft_rounds_total)" = 0 ] ||
    fail "rounds without a draft"
  stop
  start --model "$b" --max-sequences 4
  expect_cmd 0 "serve_checks.py draws (b)" \
    python3 "$checks" "$url" draws 2000001 "$work/draws.draft" "$draws"
  stop
  expect_cmd 0 "compare: a drafted by b against a" \
    python3 "$checks" - compare "$work/draws.spec" "$work/draws.plain" same
  expect_cmd 0 "compare: a drafted by a against a" \
    python3 "$checks" - compare "$work/draws.self" "$work/draws.plain" same
  expect_cmd 0 "compare: b against a" \
    python3 "$checks" - compare "$work/draws.draft" "$work/draws.plain" differ
fi

# chat and stop strings through speculation: a checkpoint of the Llama 3
# vocabulary drafting for itself
chat=$work/chat
expect 0 make-model --preset micro-llama3-vocab --seed 1 --out "$chat"
cp "$data/tokenizer/llama3-tokenizer.model" "$chat/tokenizer.model"
expect 0 generate --model "$chat" --prompt Hello --chat --system Be \
  --max-tokens 6 --threads 2 --json
grep -o '"ids":\[[^]]*\]' "$out" | sed 's/.*\[//; s/\]//' >"$work/chat.ids"
start --model "$chat" --draft-model "$chat" --max-sequences 2
curl -s -o "$work/body" -H 'Content-Type: application/json' \
  --data-binary '{"messages":[{"role":"system","content":"Be"},
  {"role":"user","content":"Hello"}],"max_tokens":6,"temperature":0}' \
  "$url/v1/chat/completions"
[ "$(ids_of "$work/body")" = "$(cat "$work/chat.ids")" ] ||
  fail "chat: $(cat "$work/body"), generate: $(cat "$work/chat.ids")"
expect_cmd 0 "serve_checks.py stop (drafted)" python3 "$checks" "$url" stop
[ "$(metric foundry_draft_rounds_total)" -gt 0 ] ||
  fail "chat: no speculative rounds"
stop

# another vocabulary: refused before serving, naming both sizes
expect 1 serve --model "$a" --draft-model "$data/llama3-micro/model" --port 0
contains "$err" "512"
contains "$err" "1024"
grep -q "listening" "$err" && fail "a refused draft served: $(cat "$err")"
expect 1 serve --model "$a" --draft-model "$work/missing" --port 0
contains "$err" "--draft-model"
# usage errors
expect 2 serve --model "$a" --draft-tokens 3
contains "$err" "--draft-tokens needs --draft-model"
expect 2 serve --model "$a" --draft-fixed
contains "$err" "--draft-fixed needs --draft-model"
for bad in 0 65 x; do
  expect 2 serve --model "$a" --draft-model "$b" --draft-tokens "$bad"
  contains "$err" "--draft-tokens"
done
expect 0 help serve
contains "$out" "--draft-model"
contains "$out" "--draft-tokens"
contains "$out" "--draft-fixed"

finish serve_draft
