#!/bin/sh
# End-to-end tests of `foundry tokenize`, `foundry detokenize` and
# `foundry generate --prompt`: the README vector, every corpus file against
# tiktoken's ids and back byte for byte, invalid UTF-8, special-token
# spellings as text, a model directory's tokenizer, SentencePiece-style
# tokenizer.json files, usage errors (exit 2),
# failures (exit 1, naming the file and line), write errors on stdout, and
# (with python3) a tokenizer.json written from the ranks giving the same ids.
# usage: test_cli.sh FOUNDRY_BINARY [PYTHON3]
set -u
foundry=$1
python=${2:-}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
. "$(dirname "$0")/../cli_lib.sh"
data=$FOUNDRY_TEST_DATA/tokenizer
ranks=$data/llama3-tokenizer.model
micro=$FOUNDRY_TEST_DATA/llama3-micro-untied-g32/model

# the README test vector (BOS here; EOS is 128001)
expect 0 tokenize --tokenizer "$ranks" --text "This is a test sentence." --bos
contains "$out" "128000,2028,374,264,1296,11914,13"
expect 0 tokenize --tokenizer "$ranks" --text "This is a test sentence." --json
contains "$out" '{"ids": [2028, 374, 264, 1296, 11914, 13]}'
expect 0 detokenize --tokenizer "$ranks" --ids 128000,2028,374,264,1296,11914,13,128001
printf '<|begin_of_text|>This is a test sentence.<|end_of_text|>\n' >"$work/want"
cmp -s "$out" "$work/want" || fail "detokenize of the README vector"
# the output ends with a newline (issue #31), unless --no-newline
expect 0 detokenize --tokenizer "$ranks" --ids 2028,374 --no-newline
[ "$(od -An -c "$out" | tr -d ' ')" = "Thisis" ] ||
  fail "detokenize --no-newline: $(od -An -c "$out")"

# every corpus file: tiktoken's ids, and back to the same bytes
for file in "$data"/corpus/*; do
  name=$(basename "$file")
  ids=$data/expected/${name%.*}.ids
  expect 0 tokenize --tokenizer "$ranks" --file "$file"
  cmp -s "$out" "$ids" || fail "tokenize $name differs from tiktoken's ids"
  expect 0 detokenize --tokenizer "$ranks" --file "$ids" --no-newline
  cmp -s "$out" "$file" || fail "detokenize $name is not the original"
done

# invalid UTF-8 round-trips byte for byte
printf 'ok\377\376 \344\270 end\200' >"$work/bad.txt"
expect 0 tokenize --tokenizer "$ranks" --file "$work/bad.txt"
cp "$out" "$work/bad.ids"
expect 0 detokenize --tokenizer "$ranks" --file "$work/bad.ids" --no-newline
cmp -s "$out" "$work/bad.txt" || fail "invalid UTF-8 did not round-trip"

# special-token spellings in user text stay text
expect 0 tokenize --tokenizer "$ranks" --text "<|eot_id|>"
grep -q '128009' "$out" && fail "tokenize turned <|eot_id|> text into the special id"
# empty text: no ids
expect 0 tokenize --tokenizer "$ranks" --text ""
[ "$(cat "$out")" = "" ] || fail "empty text gave ids"
expect 0 detokenize --tokenizer "$ranks" --ids ""
[ "$(od -An -c "$out" | tr -d ' ')" = '\n' ] || fail "no ids gave more than the newline"
expect 0 detokenize --tokenizer "$ranks" --ids "" --no-newline
[ -s "$out" ] && fail "no ids gave bytes"

# a model directory's tokenizer.model
mkdir "$work/model"
cp "$data/tiny.tiktoken" "$work/model/tokenizer.model"
expect 0 tokenize --model "$work/model" --text " thing"
contains "$out" "32,256,261"
expect 0 tokenize --model "$data/tiny" --text " thing" --bos
contains "$out" "263,32,256,261"
# a tokenizer.json behind a UTF-8 byte-order mark is JSON, not a tiktoken
# file (issue #31: "missing rank"), given as a file or in a directory
mkdir "$work/bom"
printf '\357\273\277' >"$work/bom/tokenizer.json"
cat "$data/tiny/tokenizer.json" >>"$work/bom/tokenizer.json"
expect 0 tokenize --tokenizer "$work/bom/tokenizer.json" --text " thing"
contains "$out" "32,256,261"
expect 0 tokenize --model "$work/bom" --text " thing"
contains "$out" "32,256,261"

# SentencePiece-style tokenizer.json files (issue #30): the ids Hugging
# Face gives (tests/data/tokenizer/hf), the BOS of tokenizer_config.json,
# byte fallback both ways, and a component Foundry lacks refused by name
expect 0 tokenize --model "$data/hf/llama2" --text "hello world" --bos
contains "$out" "1,731,455,316,356,324,456,313,305"
mistral=$data/hf/mistral/tokenizer.json
printf 'a \360\237\216\211' >"$work/emoji.txt"
expect 0 tokenize --tokenizer "$mistral" --file "$work/emoji.txt"
contains "$out" "925,356,243,162,145,140"
expect 0 detokenize --tokenizer "$mistral" --ids 925,356,243,162,145,140 \
  --no-newline
cmp -s "$out" "$work/emoji.txt" || fail "detokenize of byte fallback ids"
sed 's/"Prepend"/"Lowercase"/' "$data/hf/llama2/tokenizer.json" \
  >"$work/lower.json"
expect 1 tokenize --tokenizer "$work/lower.json" --text hi
contains "$err" "lower.json: entry 'normalizer.normalizers[0]' is 'Lowercase'"

# usage errors
expect 2 tokenize --text hi
expect 2 tokenize --model "$work/model" --tokenizer "$ranks" --text hi
expect 2 tokenize --tokenizer "$ranks" --text hi --file "$work/bad.txt"
expect 2 tokenize --tokenizer "$ranks"
expect 2 tokenize --tokenizer "$ranks" --text hi --frobnicate
expect 2 tokenize --tokenizer "$ranks" --text hi --bench 0
expect 2 tokenize --tokenizer "$ranks" --text hi extra
expect 2 detokenize --tokenizer "$ranks" --ids 1,x
expect 2 detokenize --tokenizer "$ranks"
contains "$err" "foundry help detokenize"

# failures name the file (and the line)
expect 1 tokenize --tokenizer "$work/missing.model" --text hi
contains "$err" "foundry: error:"
contains "$err" "missing.model"
expect 1 tokenize --tokenizer "$ranks" --file "$work/missing.txt"
contains "$err" "missing.txt"
head -c 1000 "$data/tiny.tiktoken" >"$work/cut.model"
printf 'QUJD' >>"$work/cut.model"
expect 1 tokenize --tokenizer "$work/cut.model" --text hi
contains "$err" "cut.model:"
head -c 5000 "$data/tiny/tokenizer.json" >"$work/tokenizer.json"
expect 1 tokenize --tokenizer "$work/tokenizer.json" --text hi
contains "$err" "tokenizer.json: not valid JSON"
expect 1 tokenize --model "$work" --text hi
contains "$err" "tokenizer.json"
mkdir "$work/empty"
expect 1 tokenize --model "$work/empty" --text hi
contains "$err" "neither tokenizer.json nor tokenizer.model"
# a FIFO given as the tokenizer, or as the tokenizer.json it names, fails
# at once instead of blocking
mkfifo "$work/fifo.model"
expect_cmd 1 "tokenize with a FIFO as --tokenizer" timeout 20 "$foundry" \
  tokenize --tokenizer "$work/fifo.model" --text hi
contains "$err" "fifo.model' is not a regular file"
mkdir "$work/fifo"
mkfifo "$work/fifo/tokenizer.json"
expect_cmd 1 "tokenize with a FIFO as tokenizer.json" timeout 20 \
  "$foundry" tokenize --model "$work/fifo" --text hi
contains "$err" "tokenizer.json' is not a regular file"
expect 1 detokenize --tokenizer "$ranks" --ids 128256
contains "$err" "128256"
printf '1,2,x\n' >"$work/x.ids"
expect 1 detokenize --tokenizer "$ranks" --file "$work/x.ids"
contains "$err" "x.ids"
# a NUL byte inside the id list (issue #31: it ended the list, printing IJ)
printf '40,41\0,42' >"$work/nul.ids"
expect 1 detokenize --tokenizer "$ranks" --file "$work/nul.ids"
contains "$err" "foundry: error: $work/nul.ids: NUL byte at byte offset 5"
[ -s "$out" ] && fail "detokenize printed text of a file with a NUL byte"
printf '\0' >"$work/nul1.ids"
expect 1 detokenize --tokenizer "$ranks" --file "$work/nul1.ids"
contains "$err" "NUL byte at byte offset 0"
# input files are read to end of file: a /proc file, whose size reads as
# 0, is not empty (issue #31)
if [ -r /proc/self/status ]; then
  expect 0 tokenize --tokenizer "$ranks" --file /proc/self/status
  [ -s "$out" ] || fail "tokenize --file /proc/self/status gave no ids"
fi
# prompt, prompt-list, text and id files hold at most 64 MiB
# (FDY_CLI_MAX_INPUT_BYTES): one byte more is refused at once, naming the
# file and the limit, instead of exhausting memory (a sparse file of NULs)
big=$work/big
truncate -s 67108865 "$big"
expect 1 tokenize --tokenizer "$ranks" --file "$big"
contains "$err" "foundry: error: text file '$big' is larger than the limit of 64 MiB"
expect 1 detokenize --tokenizer "$ranks" --file "$big"
contains "$err" "id file '$big' is larger than the limit of 64 MiB"
expect 1 generate --model "$micro" --tokenizer "$data/bytes.tiktoken" \
  --prompt-file "$big" --max-tokens 1
contains "$err" "prompt file '$big' is larger than the limit of 64 MiB"
expect 1 generate --model "$micro" --prompts-file "$big" --max-tokens 1
contains "$err" "prompts file '$big' is larger than the limit of 64 MiB"
expect 1 infer-bench --model "$micro" --prompt-file "$big" \
  --report "$work/big.json"
contains "$err" "id file '$big' is larger than the limit of 64 MiB"
[ -e "$work/big.json" ] && fail "infer-bench wrote a report for a too large file"
truncate -s 67108864 "$big"
expect 1 detokenize --tokenizer "$ranks" --file "$big"
contains "$err" "NUL byte at byte offset 0"
rm -f "$big"
if [ -w /dev/full ]; then
  "$foundry" tokenize --tokenizer "$ranks" --text hi >/dev/full 2>"$err"
  [ $? -eq 1 ] || fail "tokenize to /dev/full did not exit 1"
  contains "$err" "writing to standard output failed"
  "$foundry" detokenize --tokenizer "$ranks" --ids 1,2 >/dev/full 2>"$err"
  [ $? -eq 1 ] || fail "detokenize to /dev/full did not exit 1"
fi

# the benchmark mode prints its throughput
expect 0 tokenize --tokenizer "$ranks" --file "$data/corpus/english.txt" --bench 3
contains "$out" '"mb_per_second"'

# generate from a text prompt (a bytes-only tokenizer: 512 ids, as micro)
expect 0 generate --model "$micro" --tokenizer "$data/bytes.tiktoken" \
  --prompt "Hello" --max-tokens 4 --ignore-eos
contains "$err" "prefill: 6 tokens"
grep -q 'prefill:' "$out" && fail "generate --prompt printed its speeds on stdout"
grep -q '^ids:' "$out" && fail "generate --prompt printed ids instead of text"
printf 'Hello' >"$work/prompt.txt"
expect 0 generate --model "$micro" --tokenizer "$data/bytes.tiktoken" \
  --prompt-file "$work/prompt.txt" --max-tokens 4 --ignore-eos --json
contains "$out" '"prompt_tokens":6'
expect 0 generate --model "$micro" --prompt-ids 256,72 --max-tokens 2
contains "$out" "ids:"
expect 2 generate --model "$micro" --prompt hi --prompt-ids 1 --max-tokens 2
contains "$err" "--prompt-ids and --prompt exclude each other"
expect 1 generate --model "$micro" --prompt hi --max-tokens 2
contains "$err" "no tokenizer"
# a tokenizer larger than the model's vocabulary: refused before any work,
# naming both sizes (issue #31)
expect 1 generate --model "$micro" --tokenizer "$ranks" --prompt hi \
  --max-tokens 2
contains "$err" "128256 ids"
contains "$err" "has 512"
[ -s "$out" ] && fail "generate printed before refusing the tokenizer"

expect 0 help tokenize
contains "$out" "--bos"
expect 0 help detokenize
contains "$out" "--ids"

# a tokenizer.json written from the ranks gives tiktoken's ids too
if [ -n "$python" ]; then
  src=$FOUNDRY_SOURCE_DIR/scripts
  expect_cmd 0 "make_tokenizer_json.py" "$python" "$src/make_tokenizer_json.py" \
    "$ranks" "$work/hf"
  expect_cmd 0 "tokenizer_crosscheck.py with tokenizer.json" "$python" \
    "$src/tokenizer_crosscheck.py" --no-tiktoken --foundry "$foundry" \
    --tokenizer "$work/hf/tokenizer.json"
  contains "$out" "13 passed, 0 failed"
  expect 0 tokenize --model "$work/hf" --text "This is a test sentence." --bos
  contains "$out" "128000,2028,374,264,1296,11914,13"
fi

finish cli_tokenizer
