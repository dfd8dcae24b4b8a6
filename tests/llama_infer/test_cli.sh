#!/bin/sh
# End-to-end tests of `foundry generate` and `foundry verify` on the
# llama3-micro fixture, and `foundry verify` on llama3-tiny and the three
# generated variants (tests/data/README.md): exit codes (0 ok, 1 failure,
# 2 usage) and the key facts of the output (generated ids, agreement, the
# same results with weights streamed through any budget and buffer count,
# the minimum an impossible budget needs), never message wording.
# usage: test_cli.sh FOUNDRY_BINARY TEST_DATA_DIR
set -u
foundry=$1
data=$2
model=$data/llama3-micro/model
reference=$data/llama3-micro/expected.safetensors
prompt=968,278,546,257,75,219,762,27,789,45,726,929,738,414,736,919,415,361,60,743,121,154,487,342
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
. "$(dirname "$0")/../cli_lib.sh"

# generate: the reference's greedy ids, speeds, JSON
expect 0 generate --model "$model" --prompt-ids "$prompt" --max-tokens 4 \
  --threads 2
contains "$out" "ids: 850,433,850,274"
# the statistics go to stderr, as chat's do: stdout is only the ids
contains "$err" "tokens/s"
contains "$err" "generated 4 ids"
contains "$err" "device memory:"
[ "$(cat "$out")" = "ids: 850,433,850,274" ] ||
  fail "generate printed more than the ids on stdout: $(cat "$out")"
expect 0 generate --model "$model" --prompt-ids "$prompt" --max-tokens 4 \
  --json --ignore-eos
contains "$out" '"ids":[850,433,850,274]'
contains "$out" '"decode_tokens_per_second"'

# a full stdout fails generate (text and JSON) and verify
expect_full generate --model "$model" --prompt-ids 1,2 --max-tokens 2
expect_full generate --model "$model" --prompt-ids 1,2 --max-tokens 2 --json
expect_full verify --model "$model" --reference "$reference"

# generate: bad input, clear errors before any work
expect 1 generate --model "$model" --prompt-ids 1,1024,2 --max-tokens 4
contains "$err" "foundry: error:"
expect 2 generate --model "$model" --prompt-ids "" --max-tokens 4
expect 2 generate --model "$model" --prompt-ids 1,,2 --max-tokens 4
expect 2 generate --model "$model" --prompt-ids 1,-2 --max-tokens 4
# one parser, one message naming the item and the list; an item's length
# does not matter (15, 16 or 30 characters with leading zeros)
expect 2 generate --model "$model" --prompt-ids "1, 2" --max-tokens 4
contains "$err" "item 2 (' 2') of '1, 2'"
expect 2 generate --model "$model" --prompt-ids 1,2147483648 --max-tokens 4
contains "$err" "item 2 ('2147483648') of '1,2147483648'"
expect 0 generate --model "$model" --max-tokens 1 \
  --prompt-ids 000000000000001,0000000000000001,000000000000000000000000000001
expect 1 generate --model "$model" --prompt-ids 1,2,3 --max-tokens 4095
contains "$err" "context"
# the positions used are prompt + max-tokens - 1: with context 10 and a
# prompt of 3, 8 new ids fit exactly and 9 do not
expect 0 generate --model "$model" --prompt-ids 1,2,3 --max-tokens 8 \
  --context 10 --ignore-eos --json
contains "$out" '"context":10'
expect 1 generate --model "$model" --prompt-ids 1,2,3 --max-tokens 9 \
  --context 10
contains "$err" "context"
expect 2 generate --model "$model" --prompt-ids 1,2 --max-tokens 0
expect 2 generate --model "$model" --prompt-ids 1,2
expect 2 generate --model "$model" --prompt-ids 1,2 --max-tokens 2 \
  --backend metal
expect 2 generate --model "$model" --prompt-ids 1,2 --max-tokens 2 --bogus
# two prompt flags exclude each other: the message names both (and not
# a missing flag)
printf 'a' >"$work/a.txt"
expect 2 generate --model "$model" --prompt a --prompt-file "$work/a.txt" \
  --max-tokens 2
contains "$err" "--prompt and --prompt-file exclude each other"
grep -q "required" "$err" && fail "generate called exclusive flags missing"
expect 2 generate --model "$model" --prompt-ids 1 --prompt-file \
  "$work/a.txt" --max-tokens 2
contains "$err" "--prompt-ids and --prompt-file exclude each other"
expect 2 generate --model "$model" --prompt-ids 1 --prompt a --prompt-file \
  "$work/a.txt" --max-tokens 2
contains "$err" "--prompt-ids, --prompt and --prompt-file exclude each other"
expect 1 generate --model /nonexistent --prompt-ids 1,2 --max-tokens 2

# verify: passes within the CPU tolerance, fails outside it
expect 0 verify --model "$model" --reference "$reference"
contains "$out" "greedy agreement: 16/16"
contains "$out" "verify: passed"
expect 0 verify --model "$model" --reference "$reference" --backend cpu \
  --tolerance 1e-4 --threads 1
expect 1 verify --model "$model" --reference "$reference" --tolerance 0
contains "$out" "verify: FAILED"
expect 1 verify --model "$model" --reference "$reference" --context 16
expect 2 verify --model "$model" --reference "$reference" --tolerance -1
expect 2 verify --model "$model" --reference "$reference" --tolerance abc
expect 2 verify --model "$model"
expect 2 verify --model "$model" --reference "$reference" --backend metal
if [ ! -e /dev/nvidia0 ]; then
  # without a GPU, cuda is a clear failure, not a usage error
  expect 1 verify --model "$model" --reference "$reference" --backend cuda
  contains "$err" "cuda"
fi
expect 1 verify --model "$model" --reference /nonexistent.safetensors
# a reference without greedy ids is refused, not "0/0" passed
expect 1 verify --model "$model" \
  --reference "$data/bad/reference-no-greedy.safetensors"
contains "$err" "greedy_ids"
[ -s "$out" ] && fail "a refused reference printed results: $(cat "$out")"
mkfifo "$work/fifo.safetensors"
expect_cmd 1 "verify with a FIFO as the reference" timeout 20 "$foundry" \
  verify --model "$model" --reference "$work/fifo.safetensors"
contains "$err" "not a regular file"

# the tiny fixture and the generated variants (untied, plain rope, BF16,
# group 32; one kv head per head, group 128; expected outputs from MLX;
# 8-bit, unquantized BF16 and F32, mixed precision) and the families'
# fixtures, each against its reference
for fixture in llama3-tiny:24 llama3-micro-untied-g32:8 \
  llama3-micro-mha-g128:8 llama3-micro-mlx:8 llama3-micro-q8-g32:8 \
  llama3-micro-bf16:8 llama3-micro-f32:8 llama3-micro-mixed:8 \
  mistral-micro:8 qwen2-micro:8 qwen3-micro:8; do
  name=${fixture%:*}
  expect 0 verify --model "$data/$name/model" \
    --reference "$data/$name/expected.safetensors" --tolerance 1e-4
  contains "$out" "greedy agreement: ${fixture#*:}/${fixture#*:}"
  contains "$out" "verify: passed"
done

# without --context the default (4096) is clamped to the model's
# max_position_embeddings (512 for the mha fixture); above it is an error
mha=$data/llama3-micro-mha-g128/model
expect 0 generate --model "$mha" --prompt-ids 1,2,3 --max-tokens 2 --json
contains "$out" '"context":512'
expect 0 generate --model "$mha" --prompt-ids 1,2,3 --max-tokens 2 \
  --context 512
expect 1 generate --model "$mha" --prompt-ids 1,2,3 --max-tokens 2 \
  --context 513
contains "$err" "max_position_embeddings"
expect 1 verify --model "$mha" \
  --reference "$data/llama3-micro-mha-g128/expected.safetensors" --context 513

# weights streamed through a budget (llama3-micro: 776,704 bytes of
# weights; a layer 314,368, the embedding 147,456, the head 512): 700,000
# bytes keep the embedding and the head resident and stream both layers
# through one slot, or stream the embedding too through two. Same ids, same
# errors against the reference as everything resident, and the same for
# any --prefill-rows or --pack-streamed (bitwise on the CPU backend).
ids() { grep '^ids:' "$out"; }
verdict() { grep -E '^(logits|greedy)' "$out"; }
expect 0 generate --model "$model" --prompt-ids "$prompt" --max-tokens 6 \
  --ignore-eos
ids >"$work/ids.resident"
expect 0 verify --model "$model" --reference "$reference"
verdict >"$work/verify.resident"
[ -s "$work/ids.resident" ] && [ -s "$work/verify.resident" ] ||
  fail "no ids or verify results to compare"
for flags in "--weight-budget 700000 --buffers 1" \
  "--weight-budget 700000 --buffers 2" "--weight-budget 1GiB --buffers 3" \
  "--prefill-rows 1" "--prefill-rows 5 --weight-budget 700000 --buffers 1" \
  "--weight-budget 700000 --buffers 1 --pack-streamed off"; do
  # shellcheck disable=SC2086
  expect 0 generate --model "$model" --prompt-ids "$prompt" --max-tokens 6 \
    --ignore-eos $flags
  ids | cmp -s - "$work/ids.resident" || fail "generate $flags: other ids"
  case $flags in
  *700000*) contains "$err" "of slots for the streamed ones" ;;
  esac
  # shellcheck disable=SC2086
  expect 0 verify --model "$model" --reference "$reference" $flags
  verdict | cmp -s - "$work/verify.resident" ||
    fail "verify $flags: other results"
done
expect 0 generate --model "$model" --prompt-ids "$prompt" --max-tokens 2 \
  --weight-budget 700000 --buffers 2 --json
contains "$out" '"weights_slots":628736'
expect 0 verify --model "$model" --against cpu --prompt-tokens 8 --steps 3 \
  --weight-budget 700000 --buffers 1
contains "$out" "logits relative error: 0.000e+00"
# an impossible budget: exit 1 naming the minimum (two slots of a layer;
# with three buffers every weight resident, 776,704 bytes, is cheaper than
# any split), before any work
expect 1 generate --model "$model" --prompt-ids 1,2 --max-tokens 2 \
  --weight-budget 100KiB
contains "$err" "at least 628736 bytes"
contains "$err" "--weight-budget 100 KiB is too small for --buffers 2: at least 614 KiB"
expect 1 verify --model "$model" --reference "$reference" \
  --weight-budget 700000 --buffers 3
contains "$err" "at least 776704 bytes are needed (every weight resident)"
contains "$err" "--buffers 3: at least 758.50 KiB"
expect 1 verify --model "$model" --against cpu --weight-budget 1KiB
contains "$err" "at least"
# bad values are usage errors
expect 2 generate --model "$model" --prompt-ids 1,2 --max-tokens 2 \
  --weight-budget 0
expect 2 generate --model "$model" --prompt-ids 1,2 --max-tokens 2 \
  --weight-budget 1.5GiB
expect 2 generate --model "$model" --prompt-ids 1,2 --max-tokens 2 \
  --buffers 0
expect 2 verify --model "$model" --reference "$reference" --buffers 65
expect 2 verify --model "$model" --reference "$reference" --prefill-rows 0
expect 2 generate --model "$model" --prompt-ids 1,2 --max-tokens 2 \
  --pack-streamed no
expect 2 generate --model "$model" --prompt-ids 1,2 --max-tokens 2 \
  --dependent-launch maybe
contains "$err" "--dependent-launch must be on or off"
# a cuda-only setting, accepted (and without effect) on the cpu backend
expect 0 generate --model "$model" --prompt-ids 1,2 --max-tokens 2 \
  --dependent-launch off

expect 0 help generate
contains "$out" "--prompt-ids"
contains "$out" "--weight-budget"
expect 0 help verify
contains "$out" "--reference"

finish cli_llama_infer
