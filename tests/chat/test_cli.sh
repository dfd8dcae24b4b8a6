#!/bin/sh
# End-to-end tests of `foundry generate --chat` on a make-model
# micro-llama3-vocab checkpoint (the real 128,256-id vocabulary, random
# weights) with the shared Llama 3 tokenizer: the exact ids of a system +
# user turn, the context it needs and refused chat templates.
# usage: test_cli.sh FOUNDRY_BINARY [PYTHON3]
set -u
foundry=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
. "$(dirname "$0")/../cli_lib.sh"
data=$FOUNDRY_TEST_DATA/tokenizer
ranks=$data/llama3-tokenizer.model
model=$work/model

expect 0 make-model --preset micro-llama3-vocab --seed 1 --out "$model"
# the model directory's tokenizer is found by itself
cp "$ranks" "$model/tokenizer.model"

# ---- generate --chat -------------------------------------------------------

# the template's ids: BOS, the system message, the user message, the
# assistant header ("\n\nAnswer briefly." is 271,16533,27851,13 and
# "\n\nHello" 271,9906)
turn=128000,128006,9125,128007,271,16533,27851,13,128009
turn=$turn,128006,882,128007,271,9906,128009,128006,78191,128007,271
expect 0 generate --model "$model" --chat --system "Answer briefly." \
  --prompt Hello --max-tokens 1 --json
contains "$out" "\"prompt_ids\":[$turn]"
contains "$out" '"prompt_tokens":19'
# the same from a file, stripped of whitespace as the template does, and
# through an explicit tokenizer
printf '  Hello\n\n' >"$work/hello.txt"
expect 0 generate --model "$model" --tokenizer "$ranks" --chat \
  --system "Answer briefly." --prompt-file "$work/hello.txt" --max-tokens 1 \
  --json
contains "$out" "\"prompt_ids\":[$turn]"
# no template without --chat
expect 0 generate --model "$model" --prompt Hello --max-tokens 1 --json
contains "$out" '"prompt_ids":[128000,9906]'

# text, then the speeds
expect 0 generate --model "$model" --chat --system "Answer briefly." \
  --prompt Hello --max-tokens 6
head -n 1 "$out" >"$work/generated.txt"
contains "$out" "generated 6 ids"
contains "$out" "tokens/s"

# the positions used are the prompt's 19 + max-tokens - 1
expect 0 generate --model "$model" --chat --system "Answer briefly." \
  --prompt Hello --max-tokens 1 --context 19
expect 1 generate --model "$model" --chat --system "Answer briefly." \
  --prompt Hello --max-tokens 1 --context 18
contains "$err" "context holds 18"
expect 1 generate --model "$model" --chat --system "Answer briefly." \
  --prompt Hello --max-tokens 2 --context 19
contains "$err" "context holds 19"

# usage errors
expect 2 generate --model "$model" --chat --prompt-ids 1,2 --max-tokens 1
expect 2 generate --model "$model" --system hi --prompt Hello --max-tokens 1
contains "$err" "--system needs --chat"
expect 2 generate --model "$model" --chat --max-tokens 1

# a tokenizer whose chat template is not Llama 3's (the tiny vocabulary of
# 519 ids): refused with --chat, used without it (--json: the ids, which
# this vocabulary cannot decode)
mkdir "$work/chatml"
cp "$data/tiny/tokenizer.json" "$work/chatml/"
printf '%s\n' '{"bos_token": "<|begin_of_text|>",' \
  '"chat_template": "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>{% endfor %}"}' \
  >"$work/chatml/tokenizer_config.json"
expect 1 generate --model "$model" --tokenizer "$work/chatml/tokenizer.json" \
  --chat --prompt Hello --max-tokens 1
contains "$err" "ChatML"
contains "$err" "Llama 3"
expect 0 generate --model "$model" --tokenizer "$work/chatml/tokenizer.json" \
  --prompt Hello --max-tokens 1 --json

finish cli_chat
