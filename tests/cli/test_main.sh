#!/bin/sh
# Top-level CLI behaviour: usage errors exit 2, help and version exit 0, and
# the help a usage error points to (`foundry help help`) exists.
# usage: test_main.sh FOUNDRY
set -u
foundry=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
work=$dir
. "$(dirname "$0")/../cli_lib.sh"

expect 2
expect 2 frobnicate
contains "$err" "unknown command 'frobnicate'"
expect 0 --help
contains "$out" "bench"
expect 0 --version
grep -q '^foundry [0-9]' "$out" || fail "--version does not print the version"
grep -q '^tokenizer NFC normalizer \(ON (ICU)\|OFF (built without ICU)\)$' \
  "$out" || fail "--version does not say whether NFC is built: $(cat "$out")"
expect 2 help frobnicate
contains "$err" "unknown command 'frobnicate'"
for command in plan bench inspect generate chat verify make-model; do
  expect 0 help "$command"
  contains "$out" "usage: foundry $command"
  expect 0 "$command" --help
  contains "$out" "usage: foundry $command"
done

# `foundry help` alone lists the commands on stdout.
expect 0 help
contains "$out" "usage: foundry COMMAND"
contains "$out" "make-model"
# A usage error of `help` suggests `foundry help help`, which must work.
expect 2 help plan bench
contains "$err" "Try 'foundry help help'."
expect 0 help help
contains "$out" "usage: foundry help [COMMAND]"
[ -s "$err" ] && fail "help help wrote to stderr: $(cat "$err")"
expect 0 help --help
contains "$out" "usage: foundry help [COMMAND]"

# Output that cannot be written (stdout on /dev/full) fails every command.
expect_full --help
expect_full --version
expect_full help
expect_full help plan
expect_full plan --help

# An empty argument, a path above all, is a usage error of every command
# (it would otherwise open "/config.json" or write "/.tmp..."), also as
# --flag=.
cd "$dir" || exit 1
expect 2 inspect ""
contains "$err" "argument 1 is empty"
expect 2 inspect --json ""
expect 2 generate --model "" --prompt-ids 1 --max-tokens 1
contains "$err" "--model needs a non-empty value"
expect 2 generate --model= --prompt-ids 1 --max-tokens 1
contains "$err" "--model needs a non-empty value"
expect 2 verify --model "" --reference x.safetensors
expect 2 verify --model m --reference ""
contains "$err" "--reference needs a non-empty value"
expect 2 make-model --preset tiny --seed 1 --out ""
expect 2 make-model --preset tiny --seed 1 --out=
expect 2 plan --dump ""
expect 2 plan --check ""
expect 2 bench --backend cpu --report ""
contains "$err" "foundry bench: error: --report needs a non-empty value"
expect 2 bench --backend cpu --report r.json --trace ""
[ -z "$(ls -A "$dir" | grep -v '^std')" ] ||
  fail "an empty-path usage error wrote something: $(ls -A "$dir")"

# A flag given twice is a usage error of every command naming the flag,
# however it is spelled (issue #31: the last value won silently)
expect 2 plan --dump p.json --layers 2 --layers=3
contains "$err" "foundry plan: error: --layers is given twice; give it once"
expect 2 generate --model a --mod b --prompt-ids 1
contains "$err" "--model is given twice"
expect 2 generate --model a --prompt-ids 1 --json --json
contains "$err" "--json is given twice"
expect 2 bench --backend cpu --backend cpu
contains "$err" "--backend is given twice"
expect 2 bench --overhead --ops 1 --ops 2
contains "$err" "--ops is given twice"
expect 2 tokenize --text a --text b
contains "$err" "foundry tokenize: error: --text is given twice"
expect 2 detokenize --ids 1 --ids 2
contains "$err" "foundry detokenize: error: --ids is given twice"
for command in chat verify infer-bench inspect make-model; do
  expect 2 "$command" --model a --model b
  case $command in
  inspect | make-model) contains "$err" "unknown option '--model'" ;;
  *) contains "$err" "foundry $command: error: --model is given twice" ;;
  esac
done
expect 2 inspect --json --json m
contains "$err" "--json is given twice"
expect 2 make-model --preset tiny --preset tiny --out m
contains "$err" "--preset is given twice"
[ -z "$(ls -A "$dir" | grep -v '^std')" ] ||
  fail "a repeated flag wrote something: $(ls -A "$dir")"

# --backend cuda says whether this build lacks the CUDA backend (and how to
# get it) or only a device (issue #31)
expect 0 --version
if grep -q "CUDA backend OFF" "$out"; then
  grep -q "CUDA backend OFF (configured with FOUNDRY_CUDA=OFF: configure with nvcc on PATH\|CUDA backend OFF (no CUDA compiler found at configure time: put nvcc on PATH" "$out" ||
    fail "--version does not say why the CUDA backend is not built: $(cat "$out")"
  expect 0 make-model --preset micro --out "$dir/m"
  expect 1 generate --model "$dir/m" --prompt-ids 1 --max-tokens 1 --backend cuda
  contains "$err" "--backend cuda: this foundry was built without the CUDA backend ("
  contains "$err" "nvcc on PATH"
else
  contains "$out" "CUDA backend ON (nvcc "
fi

finish "cli main"
