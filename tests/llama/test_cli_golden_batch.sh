#!/bin/sh
# The make-model llama-3.2-1b golden prompt (seed 1, ids
# 128000,9906,1070,11,1268,527,499,30) decoded in a batch among prompts of
# other lengths: its first 16 greedy ids are the recorded ones
# (docs/models.md, "Same numbers as before the engine") when it is fed in
# chunks beside another sequence's decode rows (2 sequences at once, the
# third prompt waiting for a slot); and every prompt's ids equal `generate --prompt-ids` alone. Skipped under ThreadSanitizer (a 1B model
# on two cores is minutes there); runs in the plain and ASan builds.
# usage: test_cli_golden_batch.sh FOUNDRY_BINARY
set -u
foundry=$1
if [ -n "${FOUNDRY_TSAN:-}" ]; then
  echo "ThreadSanitizer build: the 1B golden batch is skipped"
  exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
. "$(dirname "$0")/../cli_lib.sh"

model=$work/llama-3.2-1b
expect 0 make-model --preset llama-3.2-1b --seed 1 --out "$model"
golden=9880,28084,118270,121823,118270,121823,121823,120256,124499,27471,26489,58823,9880,109922,109922,109922

# the golden prompt second, so that it is fed beside the first prompt's
# decode rows; a long third prompt that takes several steps
prompts=$work/prompts.jsonl
cat >"$prompts" <<'JSON'
{"ids": [128000,40,1093,279,3363], "max_tokens": 6}
{"ids": [128000,9906,1070,11,1268,527,499,30], "max_tokens": 16}
{"ids": [128000,791,6864,315,9822,374,12366,13,578,1176,1403,315,279,1917,596,1888,374], "max_tokens": 4}
JSON
alone() { # IDS MAX_TOKENS: the ids of the prompt generated alone
  "$foundry" generate --model "$model" --prompt-ids "$1" --max-tokens "$2" \
    --context 64 --threads 2 2>/dev/null | sed -n 's/^ids: //p'
}
first=$(alone 128000,40,1093,279,3363 6)
second=$(alone 128000,9906,1070,11,1268,527,499,30 16)
third=$(alone 128000,791,6864,315,9822,374,12366,13,578,1176,1403,315,279,1917,596,1888,374 4)
[ "$second" = "$golden" ] || fail "the golden prompt alone gave $second"

expect 0 generate --model "$model" --prompts-file "$prompts" \
  --max-sequences 2 --context 64 --threads 2
got=$(grep -o '"ids":\[[^]]*\]' "$out" | sed 's/"ids":\[//; s/\]//')
expected=$(printf '%s\n%s\n%s' "$first" "$second" "$third")
[ "$got" = "$expected" ] || fail "batched ids $got, expected $expected"
contains "$err" "in chunks beside decode rows"
if grep -q '(0 in chunks' "$err"; then
  fail "no prompt was fed in chunks beside decode rows"
fi
finish cli_golden_batch
