#!/bin/sh
# Text out of the box (issue #31): make-model of the Llama 3 vocabulary
# writes tokenizer.json and tokenizer_config.json (the Llama 3 Instruct
# chat template) beside the weights, which give tiktoken's ids for every
# corpus file, and generate --prompt, generate --chat and chat work on the
# directory as it is; presets of other vocabularies get no tokenizer, and
# the error says --tokenizer FILE. A tokenizer with more ids than the
# model's vocab_size is refused before any work, naming both sizes and
# both files.
# usage: test_cli_text.sh FOUNDRY_BINARY TEST_DATA
set -u
foundry=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
. "$(dirname "$0")/../cli_lib.sh"
data=$2/tokenizer
ranks=$data/llama3-tokenizer.model
model=$work/model

expect 0 make-model --preset micro-llama3-vocab --seed 1 --out "$model"
contains "$err" "with the Llama 3 tokenizer"
for f in tokenizer.json tokenizer_config.json; do
  [ -s "$model/$f" ] || fail "make-model wrote no $f"
done
contains "$model/tokenizer_config.json" '<|start_header_id|>'
contains "$model/tokenizer_config.json" '"eos_token": "<|eot_id|>"'
# the same files for the same preset and seed
expect 0 make-model --preset micro-llama3-vocab --seed 1 --out "$work/again"
for f in tokenizer.json tokenizer_config.json; do
  cmp -s "$model/$f" "$work/again/$f" || fail "$f differs between two runs"
done

# the directory's tokenizer.json gives tiktoken's ids for every corpus file
for file in "$data"/corpus/*; do
  name=$(basename "$file")
  expect 0 tokenize --model "$model" --file "$file"
  cmp -s "$out" "$data/expected/${name%.*}.ids" ||
    fail "tokenize --model of $name differs from tiktoken's ids"
done
expect 0 tokenize --model "$model" --text "This is a test sentence." --bos
contains "$out" "128000,2028,374,264,1296,11914,13"

# text in, text out, with nothing else given (the weights are random, so
# is the text)
expect 0 generate --model "$model" --prompt "The capital of France is" \
  --max-tokens 4 --json
contains "$out" '"prompt_ids":[128000,791,6864,315,9822,374]'
expect 0 generate --model "$model" --prompt "Hello" --max-tokens 4
contains "$err" "generated"
# the chat template of tokenizer_config.json
turn=128000,128006,9125,128007,271,16533,27851,13,128009
turn=$turn,128006,882,128007,271,9906,128009,128006,78191,128007,271
expect 0 generate --model "$model" --chat --system "Answer briefly." \
  --prompt Hello --max-tokens 1 --json
contains "$out" "\"prompt_ids\":[$turn]"
printf 'Hello\n' >"$work/chat.in"
"$foundry" chat --model "$model" --max-tokens 4 <"$work/chat.in" \
  >"$out" 2>"$err" || fail "chat on make-model's directory: $(cat "$err")"

# a preset of another vocabulary has no tokenizer; the error says how to
# give one
expect 0 make-model --preset micro --seed 1 --out "$work/micro"
[ -e "$work/micro/tokenizer.json" ] && fail "micro got a Llama 3 tokenizer.json"
expect 1 generate --model "$work/micro" --prompt Hello --max-tokens 1
contains "$err" "neither tokenizer.json nor tokenizer.model"
contains "$err" "--tokenizer FILE"

# make-model does not overwrite a tokenizer.json... nor anything else:
# the directory must be new
expect 1 make-model --preset micro-llama3-vocab --seed 1 --out "$model"

# a tokenizer larger than the model's vocabulary is refused before any
# work: nothing on stdout, both sizes and both files named
for cmd in "generate --model $work/micro --prompt Hello --max-tokens 4" \
  "generate --model $work/micro --chat --prompt Hello --max-tokens 4"; do
  # shellcheck disable=SC2086
  expect 1 $cmd --tokenizer "$ranks"
  contains "$err" "128256 ids"
  contains "$err" "has 1024"
  contains "$err" "$ranks"
  contains "$err" "$work/micro/config.json"
  [ -s "$out" ] && fail "$cmd printed before the refusal: $(cat "$out")"
done
printf 'Hello\n' | "$foundry" chat --model "$work/micro" --tokenizer "$ranks" \
  >"$out" 2>"$err"
[ $? -eq 1 ] || fail "chat with a tokenizer larger than the model's vocabulary"
contains "$err" "128256 ids"
# the same in the model directory itself
cp "$ranks" "$work/micro/tokenizer.model"
expect 1 generate --model "$work/micro" --prompt Hello --max-tokens 4
contains "$err" "128256 ids"
contains "$err" "$work/micro/tokenizer.model"
[ -s "$out" ] && fail "generate printed before the refusal: $(cat "$out")"
# the same tokenizer fits the Llama 3 vocabulary
expect 0 generate --model "$model" --tokenizer "$ranks" --prompt Hello \
  --max-tokens 1

finish test_cli_text
