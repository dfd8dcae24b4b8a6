#!/bin/sh
# The main job: installs missing packages, builds Foundry (CUDA backend when
# nvcc is found; one line says whether it is built, and why not) and runs
# `foundry bench` with its defaults: the CUDA backend when a GPU is present,
# else the CPU backend. Extra arguments go to bench (all but --report and
# --trace, which this script gives). The report and trace land in
# build/reports/ under a fresh timestamped name; the last lines say where.
set -eu
case "${1:-}" in
-h | --help)
  echo "usage: scripts/main.sh [BENCH_OPTION...]"
  echo "Installs missing Debian packages (scripts/setup-deps.sh), builds in"
  echo "build/ and runs \`foundry bench\` with its defaults; the options go to"
  echo "bench (\`build/foundry help bench\` lists them once built). The report"
  echo "and trace land in build/reports/."
  exit 0
  ;;
esac
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup-deps.sh"
cmake -S "$root" -B "$root/build" -DCMAKE_BUILD_TYPE=Release -DFOUNDRY_TESTS=OFF >/dev/null
echo "main.sh: CUDA backend $(sed -n 's/^FOUNDRY_CUDA_STATUS:INTERNAL=//p' \
  "$root/build/CMakeCache.txt")"
cmake --build "$root/build" -j "$(nproc)"
mkdir -p "$root/build/reports"
stamp=$(date -u +%Y%m%dT%H%M%SZ)
report=$root/build/reports/bench-$stamp.json
trace=$root/build/reports/bench-$stamp.trace.json
code=0
"$root/build/foundry" bench --report "$report" --trace "$trace" "$@" || code=$?
if [ -e "$report" ]; then
  echo "main.sh: report: $report"
fi
if [ -e "$trace" ]; then
  echo "main.sh: trace: $trace"
fi
exit "$code"
