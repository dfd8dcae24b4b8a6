#!/bin/sh
# Fails when a tracked C, header or CUDA file differs from what clang-format
# (the repository's .clang-format) makes of it; installs clang-format first
# when it is missing. Run `git ls-files '*.c' '*.h' '*.cu' | xargs
# clang-format -i` to format everything.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup-deps.sh" clang-format git
cd "$root"
git ls-files -z '*.c' '*.h' '*.cu' | xargs -0 clang-format --dry-run --Werror
echo "check-format: all files formatted"
