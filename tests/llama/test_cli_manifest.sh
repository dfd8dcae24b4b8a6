#!/bin/sh
# End-to-end tests of checkpoint manifests: `foundry manifest DIR` lists
# every file with its size and the SHA-256 that sha256sum gives (names in
# byte order, hidden files and subdirectories left out, symbolic links
# followed), --out never overwrites; --manifest on generate, verify and
# infer-bench runs a matching checkpoint and refuses, before any work, a
# changed, missing or extra file (naming it and both hashes); malformed
# manifests are refused naming the field; every infer-bench report records
# the checkpoint's files, the hashing time and the manifest.
# usage: test_cli_manifest.sh FOUNDRY_BINARY TEST_DATA_DIR
set -u
foundry=$1
data=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
. "$(dirname "$0")/../cli_lib.sh"

model=$work/model
cp -r "$data/llama3-micro/model" "$model"
mkdir "$model/subdir"
: >"$model/.hidden"

# ---- the manifest --------------------------------------------------------

expect 0 manifest "$model"
cp "$out" "$work/stdout.json"
for f in config.json model.safetensors model.safetensors.index.json; do
  sum=$(sha256sum "$model/$f" | cut -d' ' -f1)
  bytes=$(wc -c <"$model/$f" | tr -d ' ')
  contains "$out" "\"name\": \"$f\""
  contains "$out" "\"sha256\": \"$sum\""
  contains "$out" "\"bytes\": $bytes"
done
contains "$out" '"format": "foundry.manifest"'
[ "$(grep -c '"name"' "$out")" -eq 3 ] || fail "hidden files or directories listed"
names=$(grep -o '"name": "[^"]*"' "$out" | tr '\n' ' ')
[ "$names" = '"name": "config.json" "name": "model.safetensors" "name": "model.safetensors.index.json" ' ] ||
  fail "names not in byte order: $names"
expect 0 manifest "$model" --out "$work/m.json"
cmp -s "$work/m.json" "$work/stdout.json" || fail "--out differs from stdout"
expect 1 manifest "$model" --out "$work/m.json"
contains "$err" "exists"
cmp -s "$work/m.json" "$work/stdout.json" || fail "--out overwrote the file"
linked=$work/linked
mkdir "$linked"
for f in config.json model.safetensors model.safetensors.index.json; do
  ln -s "$model/$f" "$linked/$f"
done
expect 0 manifest "$linked"
cmp -s "$out" "$work/stdout.json" || fail "symbolic links not followed"
expect 1 manifest "$work/missing"
contains "$err" "cannot open checkpoint directory"
mkdir "$work/empty"
expect 1 manifest "$work/empty"
contains "$err" "holds no files"
expect 2 manifest
expect 2 manifest "$model" "$model"
expect 2 manifest "$model" --out

# ---- pinned runs ---------------------------------------------------------

pinned="--manifest $work/m.json"
expect 0 generate --model "$model" --prompt-ids 1,2,3 --max-tokens 2 $pinned
expect 0 verify --model "$model" \
  --reference "$data/llama3-micro/expected.safetensors" $pinned
small="--prompt-tokens 8 --gen-tokens 3 --warmup 0 --iterations 1 --threads 2"
expect 0 infer-bench --model "$model" $small $pinned --report "$work/r.json"
contains "$work/r.json" "\"manifest\": \"$work/m.json\""
contains "$work/r.json" "\"hash_seconds\""
contains "$work/r.json" "$(sha256sum "$model/model.safetensors" | cut -d' ' -f1)"
expect 0 infer-bench --model "$model" $small --report "$work/unpinned.json"
contains "$work/unpinned.json" '"manifest": null'
contains "$work/unpinned.json" "$(sha256sum "$model/config.json" | cut -d' ' -f1)"

# a changed file, named with both hashes; nothing written
old=$(sha256sum "$model/config.json" | cut -d' ' -f1)
cp "$model/config.json" "$work/config.json"
printf ' ' >>"$model/config.json"
new=$(sha256sum "$model/config.json" | cut -d' ' -f1)
for command in "generate --prompt-ids 1,2,3 --max-tokens 2" \
  "verify --reference $data/llama3-micro/expected.safetensors" \
  "infer-bench $small --report $work/refused.json"; do
  # shellcheck disable=SC2086
  expect 1 $command --model "$model" $pinned
  contains "$err" "checkpoint file 'config.json' differs from the manifest"
  contains "$err" "$old"
  contains "$err" "$new"
done
[ ! -e "$work/refused.json" ] || fail "a refused infer-bench wrote its report"
cp "$work/config.json" "$model/config.json"

# an extra file, a missing one
: >"$model/notes.txt"
expect 1 generate --model "$model" --prompt-ids 1 --max-tokens 1 $pinned
contains "$err" "'notes.txt'"
contains "$err" "is not in the manifest"
rm "$model/notes.txt"
mv "$model/model.safetensors.index.json" "$work/index.json"
expect 1 generate --model "$model" --prompt-ids 1 --max-tokens 1 $pinned
contains "$err" "'model.safetensors.index.json' of the manifest is missing"
mv "$work/index.json" "$model/model.safetensors.index.json"
expect 0 generate --model "$model" --prompt-ids 1 --max-tokens 1 $pinned

# ---- malformed manifests -------------------------------------------------

bad() { # NAME TEXT EXPECTED-IN-MESSAGE
  printf '%s' "$2" >"$work/$1.json"
  expect 1 generate --model "$model" --prompt-ids 1 --max-tokens 1 \
    --manifest "$work/$1.json"
  contains "$err" "$3"
}
sum=$(sha256sum "$model/config.json" | cut -d' ' -f1)
bad format '{"format": "other", "version": 1, "files": []}' "format"
bad version '{"format": "foundry.manifest", "version": 2, "files": []}' "version"
bad empty '{"format": "foundry.manifest", "version": 1, "files": []}' "files"
bad sha "{\"format\": \"foundry.manifest\", \"version\": 1, \"files\": [{\"name\": \"config.json\", \"bytes\": 1, \"sha256\": \"ABC\"}]}" "sha256"
bad slash "{\"format\": \"foundry.manifest\", \"version\": 1, \"files\": [{\"name\": \"../config.json\", \"bytes\": 1, \"sha256\": \"$sum\"}]}" "name"
bad size "{\"format\": \"foundry.manifest\", \"version\": 1, \"files\": [{\"name\": \"config.json\", \"bytes\": -1, \"sha256\": \"$sum\"}]}" "bytes"
bad repeated "{\"format\": \"foundry.manifest\", \"version\": 1, \"files\": [{\"name\": \"a\", \"bytes\": 1, \"sha256\": \"$sum\"}, {\"name\": \"a\", \"bytes\": 1, \"sha256\": \"$sum\"}]}" "repeats"
bad truncated '{"format": "foundry.manifest", ' "not valid JSON"
expect 1 generate --model "$model" --prompt-ids 1 --max-tokens 1 \
  --manifest "$work/none.json"
contains "$err" "none.json"
expect 2 generate --model "$model" --prompt-ids 1 --max-tokens 1 $pinned $pinned
finish cli_manifest
