#!/bin/sh
# End-to-end tests of `foundry serve` on loopback with curl (CPU backend):
# /health and /v1/models; greedy /v1/completions over token ids equal to
# `generate --prompt-ids`, alone and 8 at once with different prompts;
# streaming (SSE chunks, the same ids, [DONE]); chat through the Llama 3
# template (a make-model checkpoint with the Llama 3 tokenizer), streamed
# and not; stop strings (serve_checks.py stop); --api-key (401 without the
# bearer key, /health open); /metrics and client disconnects
# (serve_checks.py metrics, disconnect); bad requests (malformed JSON 400,
# wrong types 400, context overflow 400 naming both numbers, unknown model
# 404, oversized body 413, unknown path 404, and the corpus of
# serve_checks.py bad); --host ::1 (IPv6, where the machine has it) and a
# --host that is no address; a full queue 429; SIGTERM exits 0 after the
# accepted requests finish, or cancels them after --grace.
# usage: test_serve.sh FOUNDRY_BINARY TEST_DATA_DIR
set -u
foundry=$1
data=$2
model=$data/llama3-micro/model
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

# POSTs $2 to path $1; the body in $work/body, the status printed
post() {
  curl -s -o "$work/body" -w '%{http_code}' -H 'Content-Type: application/json' \
    --data-binary "$2" "$url$1"
}

# waits until the stream in file $1 has its first chunk (60 s at most:
# a loaded CI machine), else fails naming it
first_chunk() {
  i=0
  while [ "$i" -lt 600 ] && ! grep -q '^data: {' "$1" 2>/dev/null; do
    sleep 0.1
    i=$((i + 1))
  done
  grep -q '^data: {' "$1" || fail "no chunk of $1 within 60 s"
}

# waits until /metrics shows queue depth $1 (60 s at most), else fails
queue_depth_is() {
  i=0
  while [ "$i" -lt 600 ] &&
    ! curl -s "$url/metrics" | grep -q "^foundry_queue_depth $1\$"; do
    sleep 0.1
    i=$((i + 1))
  done
  curl -s "$url/metrics" | grep -q "^foundry_queue_depth $1\$" ||
    fail "the queue depth never reached $1"
}

status_is() {
  [ "$1" = "$2" ] || fail "$3: status $1, expected $2: $(cat "$work/body")"
}

start --model "$model" --model-id micro --max-sequences 4

status=$(curl -s -o "$work/body" -w '%{http_code}' "$url/health")
status_is "$status" 200 /health
contains "$work/body" '"status":"ok"'
status=$(curl -s -o "$work/body" -w '%{http_code}' "$url/v1/models")
status_is "$status" 200 /v1/models
contains "$work/body" '"id":"micro"'

# greedy completions equal generate --prompt-ids, alone then 8 at once
set -- 968,278,546,257,75,219,762,27,789:7 5:12 \
  17,3,250,64,1,900,12,400,33,8,71,600,2,19,88,1000,7,42:3 300,301:1 \
  9,99,999,90,909:9 1,2,3,4,5,6:5 700:6 44,45,46,47:8
i=0
for prompt in "$@"; do
  expect 0 generate --model "$model" --prompt-ids "${prompt%:*}" \
    --max-tokens "${prompt#*:}" --threads 2
  sed -n 's/^ids: //p' "$out" >"$work/expected.$i"
  i=$((i + 1))
done
status=$(post /v1/completions \
  '{"model":"micro","prompt":[968,278,546,257,75,219,762,27,789],
    "max_tokens":7,"temperature":0}')
status_is "$status" 200 "one completion"
contains "$work/body" '"object":"text_completion"'
contains "$work/body" '"finish_reason":"length"'
contains "$work/body" '"completion_tokens":7'
[ "$(ids_of "$work/body")" = "$(cat "$work/expected.0")" ] ||
  fail "completion: $(cat "$work/body"), generate: $(cat "$work/expected.0")"

concurrent_same completions "$@"

# streaming: one chunk per id, the same ids, usage, then [DONE]
status=$(post /v1/completions '{"prompt":[5],"max_tokens":12,
  "temperature":0,"stream":true}')
status_is "$status" 200 "streamed completion"
[ "$(grep -c '^data: {' "$work/body")" -eq 12 ] ||
  fail "expected 12 chunks: $(cat "$work/body")"
[ "$(ids_of "$work/body")" = "$(cat "$work/expected.1")" ] ||
  fail "stream: $(cat "$work/body"), generate: $(cat "$work/expected.1")"
[ "$(tail -n 2 "$work/body" | head -n 1)" = "data: [DONE]" ] ||
  fail "no [DONE] last: $(cat "$work/body")"
contains "$work/body" '"usage":'

# a seeded sample is repeatable
status=$(post /v1/completions '{"prompt":[5,6,7],"max_tokens":8,
  "temperature":0.9,"top_k":40,"top_p":0.9,"min_p":0.01,"seed":7}')
status_is "$status" 200 "seeded sample"
ids_of "$work/body" >"$work/seeded"
status=$(post /v1/completions '{"prompt":[5,6,7],"max_tokens":8,
  "temperature":0.9,"top_k":40,"top_p":0.9,"min_p":0.01,"seed":7}')
[ "$(ids_of "$work/body")" = "$(cat "$work/seeded")" ] ||
  fail "seeded samples differ: $(cat "$work/body"), $(cat "$work/seeded")"

# bad requests
status=$(post /v1/completions '{"prompt":[5,6')
status_is "$status" 400 "malformed JSON"
contains "$work/body" '"type":"invalid_request_error"'
status=$(post /v1/completions '[1,2]')
status_is "$status" 400 "not an object"
status=$(post /v1/completions '{"prompt":[5],"max_tokens":"7"}')
status_is "$status" 400 "max_tokens a string"
contains "$work/body" '"param":"max_tokens"'
status=$(post /v1/completions '{"prompt":[5],"temperature":-1}')
status_is "$status" 400 "negative temperature"
contains "$work/body" '"param":"temperature"'
status=$(post /v1/completions '{"prompt":[5,99999]}')
status_is "$status" 400 "id outside the vocabulary"
status=$(post /v1/completions '{"prompt":[5]}' >/dev/null)
status=$(post /v1/completions '{"prompt":"text"}')
status_is "$status" 400 "text without a tokenizer"
status=$(post /v1/completions '{"prompt":[5,6],"max_tokens":5000}')
status_is "$status" 400 "context overflow"
contains "$work/body" 5001
contains "$work/body" 4096
status=$(post /v1/completions '{"model":"other","prompt":[5]}')
status_is "$status" 404 "unknown model"
contains "$work/body" '"code":"model_not_found"'
head -c 2000000 /dev/zero | tr '\0' ' ' >"$work/big"
status=$(curl -s -o "$work/body" -w '%{http_code}' \
  --data-binary @"$work/big" "$url/v1/completions")
status_is "$status" 413 "oversized body"
status=$(curl -s -o "$work/body" -w '%{http_code}' "$url/v1/nothing")
status_is "$status" 404 "unknown path"
status=$(curl -s -o "$work/body" -w '%{http_code}' "$url/health")
status_is "$status" 200 "/health after the bad requests"

# the corpus of bad requests (serve_checks.py BAD)
expect_cmd 0 "serve_checks.py bad" python3 "$checks" "$url" bad

# /metrics counters move; clients that go away free their sequences
expect_cmd 0 "serve_checks.py metrics" python3 "$checks" "$url" metrics
expect_cmd 0 "serve_checks.py disconnect" python3 "$checks" "$url" disconnect

stop

# chat through the Llama 3 template on a checkpoint of the Llama 3
# vocabulary: the ids of generate --chat, streamed and not
chat=$work/chat
expect 0 make-model --preset micro-llama3-vocab --seed 1 --out "$chat"
cp "$data/tokenizer/llama3-tokenizer.model" "$chat/tokenizer.model"
expect 0 generate --model "$chat" --prompt Hello --chat --system Be \
  --max-tokens 6 --threads 2 --json
grep -o '"ids":\[[^]]*\]' "$out" | sed 's/.*\[//; s/\]//' >"$work/chat.ids"
start --model "$chat"
contains "$work/server.log" "'chat'"
status=$(post /v1/chat/completions '{"model":"chat","messages":[
  {"role":"system","content":"Be"},{"role":"user","content":"Hello"}],
  "max_tokens":6,"temperature":0}')
status_is "$status" 200 "chat"
contains "$work/body" '"object":"chat.completion"'
contains "$work/body" '"role":"assistant"'
[ "$(ids_of "$work/body")" = "$(cat "$work/chat.ids")" ] ||
  fail "chat: $(cat "$work/body"), generate: $(cat "$work/chat.ids")"
status=$(post /v1/chat/completions '{"messages":[
  {"role":"system","content":"Be"},{"role":"user","content":"Hello"}],
  "max_tokens":6,"temperature":0,"stream":true}')
status_is "$status" 200 "streamed chat"
contains "$work/body" '"object":"chat.completion.chunk"'
contains "$work/body" 'data: [DONE]'
[ "$(ids_of "$work/body")" = "$(cat "$work/chat.ids")" ] ||
  fail "streamed chat: $(cat "$work/body"), generate: $(cat "$work/chat.ids")"
# a conversation so far: the earlier exchange goes through the template
# before the last message, 12 ids more than that message alone (the
# answer "Hello" and <|eot_id|>, then the user turn and the header again)
prompt_tokens() { grep -o '"prompt_tokens":[0-9]*' "$work/body" | cut -d: -f2; }
status=$(post /v1/chat/completions '{"messages":[
  {"role":"system","content":"Be"},{"role":"user","content":"Hello"}],
  "max_tokens":1,"temperature":0}')
status_is "$status" 200 "one turn"
one=$(prompt_tokens)
status=$(post /v1/chat/completions '{"messages":[
  {"role":"system","content":"Be"},{"role":"user","content":"Hello"},
  {"role":"assistant","content":"Hello"},{"role":"user","content":"Hello"}],
  "max_tokens":1,"temperature":0}')
status_is "$status" 200 "a conversation"
[ "$(prompt_tokens)" -eq $((one + 12)) ] ||
  fail "a conversation: $(prompt_tokens) prompt ids, one turn $one"
status=$(post /v1/chat/completions '{"messages":[
  {"role":"user","content":"Hello"},{"role":"user","content":"Hi"},
  {"role":"assistant","content":"Hello"}]}')
status_is "$status" 400 "messages out of turn"
contains "$work/body" '"param":"messages"'
status=$(post /v1/chat/completions '{"messages":"Hello"}')
status_is "$status" 400 "messages a string"
contains "$work/body" '"param":"messages"'
status=$(post /v1/completions '{"prompt":"Hello","max_tokens":2,
  "temperature":0}')
status_is "$status" 200 "text completion"
contains "$work/body" '"text":'
# stop strings spanning tokens, plain and streamed (serve_checks.py)
expect_cmd 0 "serve_checks.py stop" python3 "$checks" "$url" stop
status=$(post /v1/completions '{"prompt":[5],"stop":["a","b","c","d","e"]}')
status_is "$status" 400 "five stop strings"
contains "$work/body" '"param":"stop"'
stop

# --host: an IPv6 address binds it (the URL in brackets) where the machine
# has IPv6 loopback; neither address is a usage error
expect 2 serve --model "$model" --host localhost
contains "$err" "--host must be an IPv4 or IPv6 address, got 'localhost'"
if python3 -c 'import socket; socket.socket(socket.AF_INET6).bind(("::1", 0))' \
  2>/dev/null; then
  start --model "$model" --max-sequences 1 --host ::1
  case $url in http://\[::1\]:*) ;; *) fail "IPv6 URL '$url'" ;; esac
  status=$(curl -sg -o "$work/body" -w '%{http_code}' \
    -H 'Content-Type: application/json' \
    --data-binary '{"prompt":[5],"max_tokens":2}' "$url/v1/completions")
  status_is "$status" 200 "a completion over IPv6"
  contains "$work/body" '"completion_tokens":2'
  stop
else
  echo "no IPv6 loopback: the --host ::1 check skipped"
fi

# --api-key: /health stays open; anything else needs the bearer key (401
# with OpenAI's error object otherwise)
start --model "$model" --max-sequences 1 --api-key 's3cret key'
status=$(curl -s -o "$work/body" -w '%{http_code}' "$url/health")
status_is "$status" 200 "/health without a key"
status=$(curl -s -o "$work/body" -w '%{http_code}' "$url/v1/models")
status_is "$status" 401 "/v1/models without a key"
contains "$work/body" '"code":"invalid_api_key"'
contains "$work/body" '"type":"invalid_request_error"'
for header in 'Authorization: Bearer s3cret' 'Authorization: Bearer s3cret keyx' \
  'Authorization: Basic s3cret key' 'Authorization: Bearer '; do
  status=$(curl -s -o "$work/body" -w '%{http_code}' -H "$header" \
    --data-binary '{"prompt":[5],"max_tokens":2}' "$url/v1/completions")
  status_is "$status" 401 "completion with '$header'"
done
status=$(curl -s -o "$work/body" -w '%{http_code}' \
  -H 'Authorization: Bearer s3cret key' -H 'Content-Type: application/json' \
  --data-binary '{"prompt":[5],"max_tokens":2}' "$url/v1/completions")
status_is "$status" 200 "completion with the key"
contains "$work/body" '"completion_tokens":2'
stop
# the key from FOUNDRY_API_KEY, out of the process list
export FOUNDRY_API_KEY=envkey
start --model "$model" --max-sequences 1
unset FOUNDRY_API_KEY
status=$(curl -s -o "$work/body" -w '%{http_code}' "$url/v1/models")
status_is "$status" 401 "/v1/models without FOUNDRY_API_KEY's key"
status=$(curl -s -o "$work/body" -w '%{http_code}' \
  -H 'Authorization: Bearer envkey' "$url/v1/models")
status_is "$status" 200 "/v1/models with FOUNDRY_API_KEY's key"
stop

# one slot and no queue: a second request gets 429 while the first runs;
# SIGTERM lets the first finish within --grace (its stream ends with [DONE])
start --model "$model" --max-sequences 1 --max-queue 0 --grace 600
curl -s -N -o "$work/long" -H 'Content-Type: application/json' \
  --data-binary '{"prompt":[5],"max_tokens":800,"temperature":0,
  "stream":true}' "$url/v1/completions" &
long=$!
first_chunk "$work/long"
status=$(curl -s -D "$work/headers" -o "$work/body" -w '%{http_code}' \
  -H 'Content-Type: application/json' \
  --data-binary '{"prompt":[6],"max_tokens":2}' "$url/v1/completions")
status_is "$status" 429 "a full queue"
grep -qi '^Retry-After:' "$work/headers" ||
  fail "429 without Retry-After: $(cat "$work/headers")"
stop
wait "$long"
[ "$(tail -n 2 "$work/long" | head -n 1)" = "data: [DONE]" ] ||
  fail "the running stream did not finish: $(tail -c 300 "$work/long")"
[ "$(grep -c '^data: {' "$work/long")" -eq 800 ] ||
  fail "the running stream has $(grep -c '^data: {' "$work/long") chunks"

# --grace 1: SIGTERM cancels what still runs after a second (a streamed
# request of 4000 ids gets an error event and [DONE], a queued one 503),
# and the server exits 0
start --model "$model" --max-sequences 1 --grace 1
curl -s -N -o "$work/cut" -H 'Content-Type: application/json' \
  --data-binary '{"prompt":[5],"max_tokens":4000,"temperature":0,"stream":true}' \
  "$url/v1/completions" &
streamed=$!
first_chunk "$work/cut"
curl -s -o "$work/queued" -w '%{http_code}' -H 'Content-Type: application/json' \
  --data-binary '{"prompt":[5],"max_tokens":4000,"temperature":0}' \
  "$url/v1/completions" \
  >"$work/queued.status" &
queued=$!
queue_depth_is 1
stop
wait "$streamed" "$queued"
contains "$work/cut" 'the server stopped before the request finished'
[ "$(tail -n 2 "$work/cut" | head -n 1)" = "data: [DONE]" ] ||
  fail "the cut stream does not end with [DONE]: $(tail -c 300 "$work/cut")"
[ "$(cat "$work/queued.status")" = 503 ] ||
  fail "the queued request got $(cat "$work/queued.status"): $(cat "$work/queued")"
contains "$work/server.log" "cancelled"

finish serve
