#!/bin/sh
# End-to-end tests of `foundry make-model` and `foundry inspect`: a written
# checkpoint loads, inspects and generates; make-model is deterministic and
# never overwrites; bad checkpoints and bad usage fail with the right exit
# code (0 ok, 1 failure, 2 usage) and a message naming the file.
# usage: test_cli.sh FOUNDRY_BINARY
set -u
foundry=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
. "$(dirname "$0")/../cli_lib.sh"

# make-model output loads, inspects and generates
expect 0 make-model --preset tiny --seed 3 --out "$work/a"
expect 0 inspect "$work/a"
contains "$out" "layers 2, hidden 768"
contains "$out" "tensors 50"
contains "$out" "quantization 4-bit, group size 64, dtype F16, 0 modules with their own"
expect 0 generate --model "$work/a" --prompt-ids 1,2,3 --max-tokens 5 \
  --ignore-eos --json
contains "$out" '"ids":['
# each family's micro preset: model_type and its shapes, generated from
for family in mistral qwen2 qwen3; do
  expect 0 make-model --preset "micro-$family" --out "$work/$family"
  expect 0 inspect "$work/$family"
  contains "$out" "  $family, layers 2, hidden 256"
  expect 0 inspect --json "$work/$family"
  contains "$out" "\"model_type\": \"$family\""
  expect 0 generate --model "$work/$family" --prompt-ids 1,2,3 --max-tokens 3 \
    --ignore-eos --json
  contains "$out" '"ids":['
done
expect 0 make-model --preset micro-untied --seed 1 --out "$work/u"
expect 0 inspect "$work/u"
expect 0 generate --model "$work/u" --prompt-ids 5,6 --max-tokens 3 \
  --ignore-eos

# --prefill-rows above the context runs as the context: the activations of
# --prefill-rows 65536 --context 64 are those of --prefill-rows 64
# (issue #31: 65,536 rows were allocated), and infer-bench records the cap
activations() {
  sed -n 's/.*"activations":\([0-9]*\).*/\1/p' "$out"
}
expect 0 generate --model "$work/a" --prompt-ids 1,2,3 --max-tokens 2 \
  --context 64 --prefill-rows 64 --json
want=$(activations)
expect 0 generate --model "$work/a" --prompt-ids 1,2,3 --max-tokens 2 \
  --context 64 --prefill-rows 65536 --json
if [ -z "$want" ] || [ "$(activations)" != "$want" ]; then
  fail "--prefill-rows 65536 --context 64: activations $(activations), not $want"
fi
expect 0 infer-bench --model "$work/a" --prompt-tokens 4 --gen-tokens 2 \
  --warmup 0 --iterations 1 --prefill-rows 65536 --report "$work/capped.json"
grep -q '"prefill_rows": 6[,}]' "$work/capped.json" ||
  fail "infer-bench --prefill-rows 65536 with a context of 6: $(grep -o '"prefill_rows": [0-9]*' "$work/capped.json")"
# on the cpu backend the budget is host memory, not "the device's memory"
contains "$out" "(budget "
contains "$out" ": host memory (cpu backend),"
contains "$out" "host memory of the cpu backend: weights"
grep -q "device's memory\|^device memory" "$out" &&
  fail "infer-bench --backend cpu calls host memory the device's: $(grep device "$out")"

# deterministic for a seed, different for another
expect 0 make-model --preset tiny --seed 3 --out "$work/b"
for f in config.json model.safetensors model.safetensors.index.json; do
  cmp -s "$work/a/$f" "$work/b/$f" || fail "make-model seed 3 differs in $f"
done
expect 0 make-model --preset tiny --seed 4 --out "$work/c"
if cmp -s "$work/a/model.safetensors" "$work/c/model.safetensors"; then
  fail "make-model seeds 3 and 4 wrote the same weights"
fi

# --seed defaults to 0; an unknown preset is refused with the list
expect 0 make-model --preset tiny --out "$work/default-seed"
expect 0 make-model --preset tiny --seed 0 --out "$work/seed0"
cmp -s "$work/default-seed/model.safetensors" "$work/seed0/model.safetensors" ||
  fail "make-model without --seed differs from --seed 0"
expect 2 make-model --preset nope --out "$work/nope"
contains "$err" "unknown preset 'nope' (presets: llama-3.2-1b,"
contains "$err" "micro-llama3-vocab, "
[ -e "$work/nope" ] && fail "make-model with an unknown preset wrote $work/nope"
expect 2 make-model --preset tiny
contains "$err" "--preset and --out are required"

# never overwrites: an existing directory is refused and left untouched
cp "$work/a/model.safetensors" "$work/before"
expect 1 make-model --preset tiny --seed 9 --out "$work/a"
contains "$err" "already exists"
cmp -s "$work/before" "$work/a/model.safetensors" ||
  fail "make-model touched an existing checkpoint"

# the directory follows the umask like the files in it; a 250-byte name
# works and an unwritable parent fails before any work
(umask 077 && "$foundry" make-model --preset micro --seed 1 \
  --out "$work/private") 2>/dev/null || fail "make-model under umask 077"
[ "$(ls -ld "$work/private" | cut -c1-10)" = "drwx------" ] ||
  fail "directory mode under umask 077: $(ls -ld "$work/private")"
[ "$(ls -l "$work/private/config.json" | cut -c1-10)" = "-rw-------" ] ||
  fail "file mode under umask 077: $(ls -l "$work/private/config.json")"
(umask 022 && "$foundry" make-model --preset micro --seed 1 \
  --out "$work/shared") 2>/dev/null || fail "make-model under umask 022"
[ "$(ls -ld "$work/shared" | cut -c1-10)" = "drwxr-xr-x" ] ||
  fail "directory mode under umask 022: $(ls -ld "$work/shared")"
name=$(long_name 250)
expect 0 make-model --preset micro --seed 1 --out "$work/$name"
expect 0 inspect "$work/$name"
ro=$(unwritable_dir)
if [ -n "$ro" ]; then
  expect 1 make-model --preset micro --seed 1 --out "$ro/m"
  contains "$err" "cannot create a temporary directory next to"
fi
ls "$work" | grep -q '\.tmp\.' && fail "make-model left a temporary: $(ls "$work")"
# a file size limit (ulimit -f, 512-byte blocks in sh) below the weights:
# an error naming the failed write, nothing left behind
expect_cmd 1 "make-model under ulimit -f 16" \
  sh -c 'ulimit -f 16 && exec "$0" "$@"' "$foundry" make-model --preset tiny \
  --seed 1 --out "$work/limited"
contains "$err" "File too large"
[ -e "$work/limited" ] && fail "make-model wrote $work/limited past the limit"
ls "$work" | grep -q '\.tmp\.' &&
  fail "make-model left a temporary past the file size limit: $(ls "$work")"

# the quantization variants: 8-bit, unquantized F32, mixed; each loads,
# inspects and generates
expect 0 make-model --preset micro --bits 8 --group-size 32 --seed 1 \
  --out "$work/q8"
expect 0 inspect "$work/q8"
contains "$out" "quantization 8-bit, group size 32, dtype F16, 0 modules"
expect 0 generate --model "$work/q8" --prompt-ids 1,2,3 --max-tokens 3 \
  --ignore-eos
expect 0 make-model --preset micro-untied --unquantized --dtype float32 \
  --out "$work/f32"
expect 0 inspect "$work/f32"
contains "$out" "quantization none, dtype F32"
expect 0 generate --model "$work/f32" --prompt-ids 1,2,3 --max-tokens 3 \
  --ignore-eos
expect 0 make-model --preset micro-untied --mixed --out "$work/mixed"
expect 0 inspect --json "$work/mixed"
contains "$out" '"overrides": 4'
expect 0 inspect "$work/mixed"
contains "$out" "quantization 4-bit, group size 64, dtype BF16, 4 modules"
grep -Eq 'tensors [0-9]+, [0-9.]+ KiB to [0-9.]+ KiB per layer' "$out" ||
  fail "inspect of a mixed checkpoint gives no range of layer bytes: $(cat "$out")"
expect 0 generate --model "$work/mixed" --prompt-ids 1,2,3 --max-tokens 3 \
  --ignore-eos
# what is not a variant: a usage error naming the flag, or (float32
# scales) an error; nothing written
expect 2 make-model --preset micro --bits 3 --out "$work/v"
contains "$err" "--bits 3: 4 or 8"
expect 2 make-model --preset micro --bits 6 --out "$work/v"
expect 2 make-model --preset micro --group-size 48 --out "$work/v"
contains "$err" "--group-size 48"
expect 2 make-model --preset micro --dtype float64 --out "$work/v"
contains "$err" "--dtype float64"
expect 2 make-model --preset micro --unquantized --mixed --out "$work/v"
expect 2 make-model --preset micro --unquantized --bits 8 --out "$work/v"
expect 1 make-model --preset micro --dtype float32 --out "$work/v"
contains "$err" "float32 weights only unquantized"
[ -e "$work/v" ] && fail "make-model wrote $work/v for a bad variant"

# usage errors
expect 2 make-model --preset nope --seed 1 --out "$work/x"
expect 2 make-model --seed 1 --out "$work/x"
expect 2 make-model --preset tiny --seed -1 --out "$work/x"
expect 1 make-model --preset tiny --seed 1 --out "$work/missing/x"
[ -e "$work/x" ] && fail "make-model created $work/x after a usage error"
expect 2 inspect
expect 2 inspect "$work/a" "$work/b"

# bad checkpoints: one clear error naming the file
expect 1 inspect "$work/nonexistent"
contains "$err" "config.json"
head -c 1000 "$work/a/model.safetensors" >"$work/b/model.safetensors"
expect 1 inspect "$work/b"
contains "$err" "model.safetensors"
printf '{"model_type": "llama",' >"$work/c/config.json"
expect 1 inspect "$work/c"
contains "$err" "config.json"
mkdir "$work/q"
cp "$work/a/model.safetensors" "$work/a/model.safetensors.index.json" \
  "$work/q/"
sed 's/"bits": 4/"bits": 3/' "$work/a/config.json" >"$work/q/config.json"
expect 1 inspect "$work/q"
contains "$err" "unsupported quantization"
contains "$err" "quantization.bits"
sed 's/"bits": 4/"bits": 4, "mode": "mxfp4"/' "$work/a/config.json" \
  >"$work/q/config.json"
expect 1 inspect "$work/q"
contains "$err" "quantization.mode"
contains "$err" "mxfp4"

# a full stdout fails inspect, text and JSON
expect_full inspect "$work/a"
expect_full inspect --json "$work/a"

# a directory whose name is not UTF-8: the JSON outputs replace the bad byte
# by U+FFFD instead of failing
bad=$(printf '%s/m\377x' "$work")
replacement=$(printf 'm\357\277\275x')
cp -r "$work/a" "$bad"
expect 0 inspect --json "$bad"
contains "$out" "\"model\": \"$work/$replacement\""
expect 0 generate --model "$bad" --prompt-ids 1,2 --max-tokens 2 --json
contains "$out" "\"model\":\"$work/$replacement\""
expect 0 inspect "$bad"
rm -rf "$bad"

# a shard name from the index with a newline and an escape sequence is
# escaped in the error, which stays one line (issue #31)
rm -rf "$work/evil"
cp -r "$work/a" "$work/evil"
sed 's/"model.safetensors"/"evil\\nfoundry: ok\\u001b[31m.safetensors"/' \
  "$work/a/model.safetensors.index.json" >"$work/evil/model.safetensors.index.json"
expect 1 inspect "$work/evil"
contains "$err" "evil\\nfoundry: ok\\x1b[31m.safetensors': No such file"
[ "$(wc -l <"$err")" -eq 1 ] || fail "the shard name's newline split the error: $(cat "$err")"

# a FIFO given as config.json, the index or the shard fails at once
for f in config.json model.safetensors.index.json model.safetensors; do
  rm -rf "$work/fifo"
  mkdir "$work/fifo"
  cp "$work/a/config.json" "$work/a/model.safetensors" \
    "$work/a/model.safetensors.index.json" "$work/fifo/"
  rm "$work/fifo/$f"
  mkfifo "$work/fifo/$f"
  expect_cmd 1 "inspect with a FIFO as $f" timeout 20 "$foundry" inspect \
    "$work/fifo"
  contains "$err" "$f' is not a regular file"
done

expect 0 help make-model
contains "$out" "--preset"
expect 0 help inspect

finish cli_llama
