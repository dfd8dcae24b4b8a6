#!/bin/sh
# End-to-end tests of the sampling flags of `foundry generate` (issue #29)
# on the llama3-micro fixture and of text prompts' BOS (issue #30) on a
# make-model checkpoint with a small Hugging Face tokenizer: temperature 0
# is today's greedy output; a seeded run is reproducible, and a prompt
# draws the same ids alone and in a --prompts-file batch; --top-k 1 is
# greedy at any temperature; bad values are usage errors naming the flag;
# --prompt puts the BOS first only when the tokenizer adds one.
# usage: test_cli_sampling.sh FOUNDRY_BINARY TEST_DATA_DIR
set -u
foundry=$1
data=$2
model=$data/llama3-micro/model
prompt=968,278,546,257,75,219,762,27,789,45,726,929,738,414,736,919,415,361,60,743,121,154,487,342
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
. "$(dirname "$0")/../cli_lib.sh"

ids() {
  grep -o '"ids":\[[^]]*\]' "$1"
}

# ---- greedy ------------------------------------------------------------------

greedy="ids: 850,433,850,274,699,204,631,724"
expect 0 generate --model "$model" --prompt-ids "$prompt" --max-tokens 8
[ "$(cat "$out")" = "$greedy" ] || fail "greedy: $(cat "$out")"
grep -q "sampling:" "$err" && fail "greedy generate printed a sampling line"
for flags in "--temperature 0" "--temperature 0 --seed 9 --top-k 5" \
  "--temperature 0.0 --top-p 0.5 --min-p 0.2" \
  "--temperature 1 --top-k 1 --seed 3" "--temperature 5 --top-k 1"; do
  # shellcheck disable=SC2086
  expect 0 generate --model "$model" --prompt-ids "$prompt" --max-tokens 8 \
    $flags
  [ "$(cat "$out")" = "$greedy" ] || fail "$flags: $(cat "$out")"
done
expect 0 generate --model "$model" --prompt-ids "$prompt" --max-tokens 8 \
  --json
contains "$out" '"sampling":{"temperature":0.0,'

# ---- seeded ------------------------------------------------------------------

sample() {
  expect 0 generate --model "$model" --prompt-ids "$prompt" --max-tokens 16 \
    --ignore-eos --threads 2 "$@"
  cp "$out" "$work/$1$2$3$4"
}
sample --temperature 1 --seed 7
first=$(cat "$out")
contains "$err" "sampling: temperature 1, top-k 0, top-p 1, min-p 0, seed 7"
grep -q "random" "$err" && fail "a given seed was called random"
expect 0 generate --model "$model" --prompt-ids "$prompt" --max-tokens 16 \
  --ignore-eos --threads 1 --temperature 1 --seed 7
[ "$(cat "$out")" = "$first" ] || fail "seed 7 again (1 thread): $(cat "$out")"
[ "$first" = "$greedy" ] && fail "temperature 1 gave the greedy ids"
sample --temperature 1 --seed 8
[ "$(cat "$out")" = "$first" ] && fail "seeds 7 and 8 drew the same ids"
# filters change the draws but stay reproducible
expect 0 generate --model "$model" --prompt-ids "$prompt" --max-tokens 16 \
  --ignore-eos --temperature 1.5 --top-k 20 --top-p 0.9 --min-p 0.05 \
  --seed 7 --json
ids "$out" >"$work/filtered.1"
contains "$out" '"seed":7'
contains "$out" '"top_k":20'
expect 0 generate --model "$model" --prompt-ids "$prompt" --max-tokens 16 \
  --ignore-eos --temperature 1.5 --top-k 20 --top-p 0.9 --min-p 0.05 \
  --seed 7 --json
ids "$out" | cmp -s - "$work/filtered.1" || fail "filtered seed 7 differs"
# no --seed: a random one, printed so that the run can be repeated
expect 0 generate --model "$model" --prompt-ids "$prompt" --max-tokens 16 \
  --ignore-eos --temperature 1 --json
ids "$out" >"$work/random.1"
seed=$(grep -o '"seed":[0-9]*' "$out" | cut -d: -f2)
[ -n "$seed" ] || fail "no seed in the JSON of an unseeded run"
expect 0 generate --model "$model" --prompt-ids "$prompt" --max-tokens 16 \
  --ignore-eos --temperature 1 --seed "$seed" --json
ids "$out" | cmp -s - "$work/random.1" || fail "--seed $seed did not repeat"
expect 0 generate --model "$model" --prompt-ids "$prompt" --max-tokens 4 \
  --temperature 1
contains "$err" "(random: --seed "

# ---- --prompts-file ----------------------------------------------------------

cat >"$work/prompts.jsonl" <<'EOF'
{"ids": [968,278,546,257,75,219,762,27,789]}
{"ids": [5], "max_tokens": 12}
{"ids": [17,3,250,64,1,900,12,400,33,8,71,600,2,19,88,1000,7,42], "max_tokens": 3}
EOF
expect 0 generate --model "$model" --prompts-file "$work/prompts.jsonl" \
  --max-tokens 10 --max-sequences 2 --temperature 0.8 --top-k 50 --seed 11
cp "$out" "$work/batch.out"
contains "$err" "seed 11"
i=1
for p in 968,278,546,257,75,219,762,27,789:10 5:12 \
  17,3,250,64,1,900,12,400,33,8,71,600,2,19,88,1000,7,42:3; do
  expect 0 generate --model "$model" --prompt-ids "${p%:*}" \
    --max-tokens "${p#*:}" --temperature 0.8 --top-k 50 --seed 11 --json
  alone=$(ids "$out")
  sed -n "${i}p" "$work/batch.out" | grep -qF "$alone" ||
    fail "prompt $i in a batch differs from alone: $(sed -n "${i}p" \
      "$work/batch.out") against $alone"
  i=$((i + 1))
done
# temperature 0 in a batch is the greedy batch
expect 0 generate --model "$model" --prompts-file "$work/prompts.jsonl" \
  --max-tokens 10
cp "$out" "$work/greedy.batch"
expect 0 generate --model "$model" --prompts-file "$work/prompts.jsonl" \
  --max-tokens 10 --temperature 0
cmp -s "$out" "$work/greedy.batch" || fail "--temperature 0 batch differs"

# ---- bad values: usage errors naming the flag --------------------------------

for bad in "--temperature -1" "--temperature abc" "--temperature nan" \
  "--temperature inf" "--temperature 1e9" "--temperature 0.5x" \
  "--top-k -1" "--top-k 1.5" "--top-k 4294967296" "--top-p 1.5" \
  "--top-p -0.1" "--min-p 2" "--min-p nan" "--seed -1" \
  "--seed 9223372036854775808" "--seed 1e3"; do
  # shellcheck disable=SC2086
  expect 2 generate --model "$model" --prompt-ids 1,2 --max-tokens 2 $bad
  contains "$err" "${bad%% *}"
  grep -q "unknown option" "$err" && fail "$bad: unknown option"
done
expect 2 generate --model "$model" --prompt-ids 1,2 --max-tokens 2 \
  --seed 1 --seed 2
contains "$err" "given twice"
expect 0 help generate
for flag in --temperature --top-k --top-p --min-p --seed; do
  contains "$out" "$flag"
done

# ---- --prompt and the BOS (add_bos_token) ------------------------------------

# a checkpoint of 1024 ids with the small SmolLM-style tokenizer (804 ids,
# no BOS added: "hello world" is 326,368,81,223,89,369,78,70 alone)
hf=$work/hf
expect 0 make-model --preset micro --seed 1 --out "$hf"
if "$foundry" --version | grep -q "NFC normalizer ON"; then
  cp "$data/tokenizer/hf/smollm/tokenizer.json" "$hf/"
  hello=326,368,81,223,89,369,78,70
  expect 0 generate --model "$hf" --prompt "hello world" --max-tokens 1 --json
  contains "$out" "\"prompt_ids\":[$hello]"
  printf '{"bos_token": "<|im_start|>", "add_bos_token": true}\n' \
    >"$hf/tokenizer_config.json"
  expect 0 generate --model "$hf" --prompt "hello world" --max-tokens 1 --json
  contains "$out" "\"prompt_ids\":[1,$hello]"
  printf '{"bos_token": "<|im_start|>", "add_bos_token": false}\n' \
    >"$hf/tokenizer_config.json"
  expect 0 generate --model "$hf" --prompt "hello world" --max-tokens 1 --json
  contains "$out" "\"prompt_ids\":[$hello]"
  # the same for a --prompts-file line
  printf '{"prompt": "hello world", "max_tokens": 1}\n' >"$work/text.jsonl"
  expect 0 generate --model "$hf" --prompts-file "$work/text.jsonl"
  expect 0 generate --model "$hf" --prompt "hello world" --max-tokens 1 --json
  # an empty prompt without a BOS has nothing to start from
  expect 1 generate --model "$hf" --prompt "" --max-tokens 1
  contains "$err" "empty"
else
  echo "cli_sampling: skipped the SmolLM tokenizer's BOS checks: it normalizes NFC, which this build lacks (no ICU)"
fi

# the Llama 3 tokenizer still starts with <|begin_of_text|>
expect 0 generate --model "$hf" --tokenizer \
  "$data/tokenizer/tiny/tokenizer.json" --prompt "hello" --max-tokens 1 --json
contains "$out" '"prompt_ids":[263,'

finish cli_sampling
