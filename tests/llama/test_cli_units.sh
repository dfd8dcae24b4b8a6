#!/bin/sh
# Byte units (issue #31): the CLI prints rates in GiB/s and sizes in binary
# units (B, KiB, MiB, GiB: powers of 2^10), as docs/benchmark.md defines
# them; never GB/s, MB or GB. bench and infer-bench on the cpu backend,
# and every format string under src/ (the streaming line of infer-bench
# prints only on a GPU).
# usage: test_cli_units.sh FOUNDRY_BINARY SOURCE_DIR
set -u
foundry=$1
src=$2/src
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
. "$(dirname "$0")/../cli_lib.sh"

decimal() {
  # a decimal unit after a number: "1.5 GB/s", "3 MB", "2 GB", "4 kB"
  grep -nE '[0-9%)]( |)(kB|KB|MB|GB|TB)(/s|\b)' "$1"
}

expect 0 make-model --preset micro --seed 1 --out "$work/model"
expect 0 infer-bench --model "$work/model" --backend cpu --prompt-tokens 8 \
  --gen-tokens 4 --warmup 0 --iterations 2 --report "$work/infer.json"
cat "$out" "$err" >"$work/infer.txt"
contains "$work/infer.txt" "GiB/s (device bandwidth not measured"
decimal "$work/infer.txt" && fail "infer-bench printed a decimal unit"

expect 0 bench --backend cpu --layers 4 --weight-mib 1 --iterations 2 \
  --report "$work/bench.json"
cat "$out" "$err" >"$work/bench.txt"
contains "$work/bench.txt" "GiB/s"
decimal "$work/bench.txt" && fail "bench printed a decimal unit"

# no format string in the sources prints a decimal unit
if grep -rnE '"[^"]*%[-0-9.]*[a-z]+ ?(kB|KB|MB|GB|TB)(/s|\b)' "$src" \
  --include='*.c' --include='*.cu' --include='*.h'; then
  fail "a format string above prints a decimal byte unit"
fi

finish test_cli_units
