#!/bin/sh
# End-to-end tests of `foundry generate --draft-model` (speculative
# decoding, issue #32) on the CPU backend: for every pair of the fixtures
# that share a vocabulary of 512 ids (each drafting for itself and for the
# other), fixed and adaptive K, the ids are exactly those of plain
# `generate --prompt-ids`; stderr reports the acceptance rate, the ids per
# target pass and both models' time per id; --json has a "speculative"
# section; sampling with a draft is reproducible by seed; a draft of another vocabulary is refused before any work naming
# both sizes (exit 1); usage errors (exit 2).
# usage: test_cli_speculative.sh FOUNDRY_BINARY TEST_DATA_DIR
set -u
foundry=$1
data=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
. "$(dirname "$0")/../cli_lib.sh"

prompt=68,278,46,257,75,219,62,27,89,45,26,29,38,414,36,19,415,361,60,43
a=$data/llama3-micro-untied-g32/model
b=$data/llama3-micro-mha-g128/model

for target in "$a" "$b"; do
  for max in 1 7 24; do
    expect 0 generate --model "$target" --prompt-ids "$prompt" \
      --max-tokens "$max" --ignore-eos --threads 2
    cp "$out" "$work/plain"
    for draft in "$a" "$b"; do
      for k in "" "--draft-tokens 1" "--draft-tokens 3 --draft-fixed" \
        "--draft-fixed" "--draft-tokens 32"; do
        # shellcheck disable=SC2086
        expect 0 generate --model "$target" --draft-model "$draft" $k \
          --prompt-ids "$prompt" --max-tokens "$max" --ignore-eos --threads 2
        cmp -s "$out" "$work/plain" ||
          fail "$target drafted by $draft ($k, $max ids): $(cat "$out")" \
            "against $(cat "$work/plain")"
        contains "$err" "proposed ids accepted"
        contains "$err" "ids per target pass"
        contains "$err" "per id: draft "
      done
    done
  done
done
# a model drafting for itself accepts every proposal
expect 0 generate --model "$a" --draft-model "$a" --prompt-ids "$prompt" \
  --max-tokens 24 --ignore-eos
contains "$err" "speculative: K 4 adaptive, 100.0% of"
expect 0 generate --model "$a" --draft-model "$a" --draft-tokens 3 \
  --draft-fixed --prompt-ids "$prompt" --max-tokens 24 --ignore-eos
contains "$err" "speculative: K 3 fixed, 100.0% of"
# stops as plain generate (no --ignore-eos) and JSON
expect 0 generate --model "$b" --prompt-ids "$prompt" --max-tokens 40 --json
ids=$(grep -o '"ids":\[[^]]*\]' "$out")
expect 0 generate --model "$b" --draft-model "$a" --prompt-ids "$prompt" \
  --max-tokens 40 --json
contains "$out" "$ids"
contains "$out" '"speculative":{"draft_model":'
contains "$out" '"acceptance_rate":'
contains "$out" '"ids_per_target_pass":'
contains "$out" '"target_seconds_per_id":'
expect 0 generate --model "$b" --prompt-ids "$prompt" --max-tokens 4 --json
grep -q '"speculative"' "$out" && fail "plain generate has a speculative part"

# another vocabulary: exit 1 before any work, naming both sizes
expect 1 generate --model "$data/llama3-micro/model" --draft-model "$a" \
  --prompt-ids 1,2 --max-tokens 3
contains "$err" "512"
contains "$err" "1024"
[ -s "$out" ] && fail "a refused draft printed: $(cat "$out")"
grep -q "tokens/s" "$err" && fail "a refused draft ran"
expect 1 generate --model "$a" --draft-model "$work/missing" \
  --prompt-ids 1,2 --max-tokens 3
contains "$err" "--draft-model"

# usage errors
expect 2 generate --model "$a" --draft-model "$a" --prompts-file \
  "$work/p.jsonl" --max-tokens 3
contains "$err" "--prompts-file"
expect 2 generate --model "$a" --draft-tokens 3 --prompt-ids 1 --max-tokens 3
contains "$err" "--draft-tokens needs --draft-model"
expect 2 generate --model "$a" --draft-fixed --prompt-ids 1 --max-tokens 3
contains "$err" "--draft-fixed needs --draft-model"
for bad in 0 65 x -1; do
  expect 2 generate --model "$a" --draft-model "$a" --draft-tokens "$bad" \
    --prompt-ids 1 --max-tokens 3
  contains "$err" "--draft-tokens"
done
# sampling with a draft (the rejection rule): a seed gives the same ids
# twice; a model drafting for itself accepts every proposal
expect 0 generate --model "$a" --draft-model "$b" --temperature 0.9 \
  --top-k 40 --seed 11 --prompt-ids "$prompt" --max-tokens 12 --ignore-eos
cp "$out" "$work/sampled"
[ "$(tr ',' '\n' <"$out" | grep -c .)" -eq 12 ] ||
  fail "sampled with a draft: not 12 ids: $(cat "$out")"
expect 0 generate --model "$a" --draft-model "$b" --temperature 0.9 \
  --top-k 40 --seed 11 --prompt-ids "$prompt" --max-tokens 12 --ignore-eos
cmp -s "$out" "$work/sampled" ||
  fail "seed 11 with a draft: $(cat "$out") then $(cat "$work/sampled")"
expect 0 generate --model "$a" --draft-model "$a" --temperature 0.9 \
  --seed 3 --prompt-ids "$prompt" --max-tokens 24 --ignore-eos
contains "$err" "speculative: K 4 adaptive, 100.0% of"
# temperature 0 is greedy, so it may go with a draft
expect 0 generate --model "$a" --draft-model "$b" --temperature 0 \
  --prompt-ids "$prompt" --max-tokens 7 --ignore-eos
expect 0 help generate
contains "$out" "--draft-model"
contains "$out" "--draft-tokens"
contains "$out" "--draft-fixed"

finish cli_speculative
