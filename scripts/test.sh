#!/bin/sh
# Installs missing packages, builds Foundry with warnings as errors and runs
# every test (GPU tests skip without a device). Pass --sanitize for the
# AddressSanitizer + UndefinedBehaviorSanitizer build instead.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup-deps.sh"
preset=ci
if [ "${1:-}" = "--sanitize" ]; then
  preset=asan
fi
cd "$root"
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset" -j "$(nproc)"
ctest --preset "$preset"
