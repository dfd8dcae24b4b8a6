#!/bin/sh
# Installs missing packages, builds Foundry with warnings as errors and runs
# every test, as many at once as there are CPUs (GPU tests skip without a
# device). Pass --sanitize for the AddressSanitizer + UndefinedBehavior-
# Sanitizer build instead, or --tsan for the ThreadSanitizer build. Prints
# one line saying whether the CUDA backend is built, and why not.
set -eu
usage="usage: scripts/test.sh [--sanitize | --tsan]"
preset=ci
case "${1:-}" in
--sanitize) preset=asan ;;
--tsan) preset=tsan ;;
-h | --help)
  echo "$usage"
  echo "Installs missing Debian packages (scripts/setup-deps.sh) and the"
  echo "Python test packages (scripts/setup-python.sh), builds in"
  echo "build-ci/ (build-asan/, build-tsan/) and runs every test."
  exit 0
  ;;
"") ;;
*)
  echo "$usage" >&2
  exit 2
  ;;
esac
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup-deps.sh"
"$root/scripts/setup-python.sh" ||
  echo "test.sh: the Python test packages could not be installed: the tests that need them skip"
cd "$root"
cmake --preset "$preset" >/dev/null
echo "test.sh: CUDA backend $(sed -n 's/^FOUNDRY_CUDA_STATUS:INTERNAL=//p' \
  "$root/build-$preset/CMakeCache.txt")"
cmake --build --preset "$preset" -j "$(nproc)"
ctest --preset "$preset" --parallel "$(nproc)"
