#!/bin/sh
# Builds the libFuzzer targets of fuzz/ with clang (installed when missing)
# in build-fuzz/ and runs each from its seed corpus (fuzz/corpus/<target>)
# for a fixed time: 10 s by default, or SECONDS_EACH given as the first
# argument. Inputs the fuzzer finds go to build-fuzz/corpus/<target>, never
# into the tree. Any crash, leak, sanitizer report or broken invariant
# fails the run (libFuzzer writes the input as build-fuzz/crash-*).
# usage: scripts/fuzz.sh [SECONDS_EACH [TARGET...]]
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
# libclang-rt-dev holds the libFuzzer and sanitizer runtimes (only
# recommended by clang, and setup-deps.sh installs no recommendations).
"$root/scripts/setup-deps.sh" clang libclang-rt-dev
seconds=${1:-10}
[ $# -gt 0 ] && shift
build="$root/build-fuzz"
cmake -S "$root/fuzz" -B "$build" -DCMAKE_C_COMPILER=clang >/dev/null
cmake --build "$build" -j "$(nproc)" >/dev/null
# The targets write every input to a file; on tmpfs that costs no disk
# syncs (the safetensors writer fsyncs).
if [ -d /dev/shm ] && [ -w /dev/shm ]; then
  export TMPDIR=/dev/shm
fi
targets=${*:-"plan_json tokenizer chat_template safetensors config index reference serve_request"}
for target in $targets; do
  found="$build/corpus/$target"
  mkdir -p "$found"
  log="$build/fuzz_$target.log"
  if ! (cd "$build" && "./fuzz_$target" -max_total_time="$seconds" \
    -print_final_stats=1 "$found" "$root/fuzz/corpus/$target") >"$log" 2>&1; then
    tail -n 60 "$log" >&2
    echo "fuzz: fuzz_$target failed (log: $log)" >&2
    exit 1
  fi
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  echo "fuzz: fuzz_$target: $runs inputs in ${seconds} s, no finding"
done
