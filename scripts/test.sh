#!/bin/sh
# Installs missing packages, builds Foundry with warnings as errors and runs
# every test, as many at once as there are CPUs (GPU tests skip without a
# device). Pass --sanitize for the AddressSanitizer + UndefinedBehavior-
# Sanitizer build instead, or --tsan for the ThreadSanitizer build.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup-deps.sh"
preset=ci
case "${1:-}" in
--sanitize) preset=asan ;;
--tsan) preset=tsan ;;
"") ;;
*)
  echo "usage: scripts/test.sh [--sanitize | --tsan]" >&2
  exit 2
  ;;
esac
cd "$root"
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset" -j "$(nproc)"
ctest --preset "$preset" --parallel "$(nproc)"
