#!/bin/sh
# The main job: installs missing packages, builds Foundry (CUDA backend when
# nvcc is found) and runs `foundry bench` with its defaults: the CUDA backend
# when a GPU is present, else the CPU backend. Extra arguments go to bench.
# The report and trace land in build/reports/ under a fresh timestamped name.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup-deps.sh"
cmake -S "$root" -B "$root/build" -DCMAKE_BUILD_TYPE=Release -DFOUNDRY_TESTS=OFF >/dev/null
cmake --build "$root/build" -j "$(nproc)"
mkdir -p "$root/build/reports"
stamp=$(date -u +%Y%m%dT%H%M%SZ)
exec "$root/build/foundry" bench \
  --report "$root/build/reports/bench-$stamp.json" \
  --trace "$root/build/reports/bench-$stamp.trace.json" "$@"
