#!/bin/sh
# End-to-end tests of `foundry generate --prompts-file` (continuous
# batching) on the llama3-micro fixture and a make-model checkpoint with
# the Llama 3 tokenizer: every prompt's ids equal `generate --prompt-ids`
# alone with fewer sequences than prompts (slots refilled), one and the
# default; a line's max_tokens over --max-tokens; text prompts and "text";
# every malformed line refused before any work, naming its line, with
# nothing on stdout; flags that do not go with --prompts-file; a full
# stdout.
# usage: test_cli_batch.sh FOUNDRY_BINARY TEST_DATA_DIR
set -u
foundry=$1
data=$2
model=$data/llama3-micro/model
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
. "$(dirname "$0")/../cli_lib.sh"

# the generated ids of a JSON object on stdin
ids() {
  grep -o '"ids":\[[^]]*\]'
}

# five prompts of different lengths; lines 2 to 5 give their own
# max_tokens, line 1 takes --max-tokens
prompts=$work/prompts.jsonl
cat >"$prompts" <<'EOF'
{"ids": [968,278,546,257,75,219,762,27,789]}
{"ids": [5], "max_tokens": 12}
{"ids": [17,3,250,64,1,900,12,400,33,8,71,600,2,19,88,1000,7,42], "max_tokens": 3}
{"max_tokens": 1, "ids": [300,301]}
{"ids": [9,99,999,90,909], "max_tokens": 9}
EOF
set -- 968,278,546,257,75,219,762,27,789:7 5:12 \
  17,3,250,64,1,900,12,400,33,8,71,600,2,19,88,1000,7,42:3 300,301:1 \
  9,99,999,90,909:9
i=0
for prompt in "$@"; do
  expect 0 generate --model "$model" --prompt-ids "${prompt%:*}" \
    --max-tokens "${prompt#*:}" --threads 2 --json
  ids <"$out" >"$work/alone.$i"
  grep -o '"stopped_at_eos":[a-z]*' "$out" >>"$work/alone.$i"
  i=$((i + 1))
done

for sequences in 2 1 default; do
  flags="--max-sequences $sequences"
  [ "$sequences" = default ] && flags=
  # shellcheck disable=SC2086
  expect 0 generate --model "$model" --prompts-file "$prompts" \
    --max-tokens 7 --threads 2 $flags
  [ "$(wc -l <"$out")" -eq 5 ] || fail "$flags: not 5 lines: $(cat "$out")"
  contains "$err" "tokens/s"
  for i in 0 1 2 3 4; do
    line=$(sed -n "$((i + 1))p" "$out")
    case $line in
    "{\"index\":$i,"*) ;;
    *) fail "$flags: line $((i + 1)) is not index $i: $line" ;;
    esac
    {
      echo "$line" | ids
      echo "$line" | grep -o '"stopped_at_eos":[a-z]*'
    } | cmp -s - "$work/alone.$i" ||
      fail "$flags: prompt $i: $line, alone: $(cat "$work/alone.$i")"
  done
done
# by default every prompt at once (at most 16)
contains "$err" "5 prompts, 5 sequences"

# two sequences at once, refilled: up to 2 rows per decode step
expect 0 generate --model "$model" --prompts-file "$prompts" \
  --max-tokens 7 --max-sequences 2
contains "$err" "5 prompts, 2 sequences"
contains "$err" "up to 2 rows"

# a line's max_tokens wins over --max-tokens; without --max-tokens every
# line must give one
printf '{"ids":[1,2],"max_tokens":3}\n{"ids":[3]}\n{"ids":[4],"max_tokens":5}' \
  >"$work/max.jsonl"
expect 0 generate --model "$model" --prompts-file "$work/max.jsonl" \
  --max-tokens 2 --ignore-eos
for n in 1:3 2:2 3:5; do
  count=$(sed -n "${n%:*}p" "$out" | ids | tr -cd , | wc -c)
  [ $((count + 1)) -eq "${n#*:}" ] ||
    fail "line ${n%:*}: $((count + 1)) ids, expected ${n#*:}: $(cat "$out")"
done
expect 1 generate --model "$model" --prompts-file "$work/max.jsonl"
contains "$err" "max.jsonl line 2:"
contains "$err" "max_tokens"
[ -s "$out" ] && fail "a refused file printed: $(cat "$out")"
printf '{"ids":[1,2],"max_tokens":3}\n{"ids":[3],"max_tokens":1}\n' \
  >"$work/own.jsonl"
expect 0 generate --model "$model" --prompts-file "$work/own.jsonl"

# the context: the most positions a line needs by default; --context
# too small names the line
printf '{"ids":[1,2,3],"max_tokens":8}\n{"ids":[1],"max_tokens":9}\n' \
  >"$work/ctx.jsonl"
expect 0 generate --model "$model" --prompts-file "$work/ctx.jsonl" \
  --context 10
expect 1 generate --model "$model" --prompts-file "$work/ctx.jsonl" \
  --context 9
contains "$err" "ctx.jsonl line 1:"
contains "$err" "context"
[ -s "$out" ] && fail "a refused context printed: $(cat "$out")"
printf '{"ids":[1],"max_tokens":4000}\n' >"$work/long.jsonl"
expect 1 generate --model "$data/llama3-micro-mha-g128/model" \
  --prompts-file "$work/long.jsonl"
contains "$err" "long.jsonl line 1:"
contains "$err" "max_position_embeddings"

# every malformed line: exit 1, its line named, nothing on stdout
good='{"ids":[1,2]}'
for bad in '{"ids":[1,2]' '{"ids":[1],"top_k":3}' '{}' '{"max_tokens":2}' \
  '{"ids":[1],"prompt":"x"}' '{"ids":[1.5]}' '{"ids":["1"]}' '{"ids":[-1]}' \
  '{"ids":[]}' '{"ids":5}' '{"ids":[1024]}' '{"ids":[2147483648]}' \
  '{"ids":[1],"max_tokens":0}' '{"ids":[1],"max_tokens":-2}' \
  '{"ids":[1],"max_tokens":1.5}' '{"ids":[1],"max_tokens":"3"}' \
  '{"ids":[1],"max_tokens":4294967296}' '{"prompt":"hi"}' '[1,2]' \
  '{"ids":[1],"ids":[2]}' '' ' 	' 'null'; do
  printf '%s\n%s\n%s\n%s\n' "$good" "$good" "$bad" "$good" >"$work/bad.jsonl"
  expect 1 generate --model "$model" --prompts-file "$work/bad.jsonl" \
    --max-tokens 2
  contains "$err" "foundry: error: $work/bad.jsonl line 3:"
  [ -s "$out" ] && fail "line '$bad' printed: $(cat "$out")"
done
# an empty file, a missing one
: >"$work/empty.jsonl"
expect 1 generate --model "$model" --prompts-file "$work/empty.jsonl" \
  --max-tokens 2
contains "$err" "no prompts"
expect 1 generate --model "$model" --prompts-file "$work/missing.jsonl" \
  --max-tokens 2

# usage errors: one source of prompts; --chat, --max-sequences
for other in "--prompt-ids 1,2" "--prompt hi" "--prompt-file $prompts"; do
  # shellcheck disable=SC2086
  expect 2 generate --model "$model" --prompts-file "$prompts" $other \
    --max-tokens 2
  contains "$err" "--prompts-file"
done
expect 2 generate --model "$model" --prompts-file "$prompts" --chat \
  --max-tokens 2
expect 2 generate --model "$model" --prompt-ids 1,2 --max-tokens 2 \
  --max-sequences 2
expect 2 generate --model "$model" --prompts-file "$prompts" \
  --max-sequences 0
expect 2 generate --model "$model" --prompts-file "$prompts" \
  --max-sequences 1025
expect 2 generate --model "$model" --prompts-file "" --max-tokens 2
expect 2 generate --model "$model" --max-tokens 2

# a full stdout fails
expect_full generate --model "$model" --prompts-file "$prompts" \
  --max-tokens 2

# text prompts with the model directory's tokenizer (a make-model
# checkpoint with the Llama 3 vocabulary has its tokenizer.json): the ids
# of generate --prompt alone, and "text" on every line
text=$work/text
expect 0 make-model --preset micro-llama3-vocab --seed 1 --out "$text"
expect 0 generate --model "$text" --prompt Hello --max-tokens 4 --json
ids <"$out" >"$work/hello"
printf '{"prompt":"Hello"}\n{"ids":[128000,9906],"max_tokens":2}\n' \
  >"$work/text.jsonl"
expect 0 generate --model "$text" --prompts-file "$work/text.jsonl" \
  --max-tokens 4
sed -n 1p "$out" | ids | cmp -s - "$work/hello" ||
  fail "text prompt: $(cat "$out"), alone: $(cat "$work/hello")"
[ "$(grep -c '"text":"' "$out")" -eq 2 ] || fail "no text: $(cat "$out")"
# without the tokenizer, a text line is refused; an explicit one works
rm "$text/tokenizer.json" "$text/tokenizer_config.json"
expect 1 generate --model "$text" --prompts-file "$work/text.jsonl" \
  --max-tokens 4
contains "$err" "text.jsonl line 1:"
expect 0 generate --model "$text" --prompts-file "$work/text.jsonl" \
  --max-tokens 4 --tokenizer "$data/tokenizer/llama3-tokenizer.model"
sed -n 1p "$out" | ids | cmp -s - "$work/hello" ||
  fail "text prompt, --tokenizer: $(cat "$out")"
expect 1 generate --model "$text" --prompts-file "$work/text.jsonl" \
  --max-tokens 4 --tokenizer "$work/missing.model"

finish "generate --prompts-file"
