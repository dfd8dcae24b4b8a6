#!/bin/sh
# MLX for CUDA on a GPU machine that reaches no package registry, carried
# in two parts no larger than one device call takes (issue #35):
#
#   scripts/mlx_wheels.sh pack DIR [PART_MIB]
#       here, with PyPI: downloads mlx, mlx-cuda-13 and mlx-lm (the pinned
#       versions below, for python 3.12 on manylinux_2_35 x86_64) into
#       DIR/wheels; strips the debug symbols of mlx-cuda-13's libmlx.so
#       (the bulk of the wheel), xz-compresses it and splits it into
#       DIR/part1/ and DIR/part2/ (PART_MIB MiB each at most, default 40);
#       the wheel without libmlx.so and its C++ headers goes in part1.
#   scripts/mlx_wheels.sh unpack PART1_DIR PART2_DIR TARGET
#       there: reassembles libmlx.so (checking its SHA-256), installs the
#       three wheels into TARGET with pip --no-deps --target (their
#       dependencies, numpy, transformers, the nvidia CUDA 13 libraries,
#       are the machine's PyTorch's), puts libmlx.so back and prints the
#       PYTHONPATH to use. A missing or corrupt part fails, naming it.
#
# The parts travel in two consecutive device calls while the machine stays
# warm (files under /tmp survive between calls on the same machine):
# docs/infer-bench.md says how. Exit 0 on success, 1 on failure, 2 for
# usage.
set -eu
MLX_VERSION=0.32.4
MLX_LM_VERSION=0.32.2
usage() {
  echo "usage: scripts/mlx_wheels.sh pack DIR [PART_MIB]" >&2
  echo "       scripts/mlx_wheels.sh unpack PART1_DIR PART2_DIR TARGET" >&2
  exit 2
}
fail() {
  echo "mlx_wheels: $*" >&2
  exit 1
}
lib=mlx/lib/libmlx.so
cuda_wheel=mlx_cuda_13-$MLX_VERSION-py3-none-manylinux_2_35_x86_64.whl

pack() {
  dir=$1
  part_mib=$2
  mkdir -p "$dir/wheels" "$dir/part1" "$dir/part2" "$dir/work"
  python3 -m pip download --quiet --no-deps --only-binary=:all: \
    --python-version 3.12 --platform manylinux_2_35_x86_64 \
    "mlx==$MLX_VERSION" "mlx-cuda-13==$MLX_VERSION" \
    "mlx-lm==$MLX_LM_VERSION" -d "$dir/wheels" ||
    fail "pip download failed"
  [ -f "$dir/wheels/$cuda_wheel" ] || fail "no $cuda_wheel downloaded"
  (cd "$dir/work" && rm -rf mlx && unzip -q -o "../wheels/$cuda_wheel" "$lib")
  strip --strip-debug "$dir/work/$lib"
  sha256sum "$dir/work/$lib" | cut -d' ' -f1 >"$dir/part1/libmlx.so.sha256"
  echo "mlx_wheels: compressing libmlx.so ($(du -m "$dir/work/$lib" |
    cut -f1) MiB; minutes)" >&2
  xz -T0 -6 -c "$dir/work/$lib" >"$dir/work/libmlx.so.xz"
  split -b "${part_mib}M" -d -a 1 "$dir/work/libmlx.so.xz" \
    "$dir/work/libmlx.so.xz."
  n=$(find "$dir/work" -name 'libmlx.so.xz.[0-9]' | wc -l)
  [ "$n" -eq 2 ] || fail "libmlx.so.xz makes $n parts of $part_mib MiB, not 2"
  mv "$dir/work/libmlx.so.xz.0" "$dir/part1/"
  mv "$dir/work/libmlx.so.xz.1" "$dir/part2/"
  cp "$dir/wheels/$cuda_wheel" "$dir/part1/"
  zip -q -d "$dir/part1/$cuda_wheel" "$lib" 'mlx/include/*'
  cp "$dir/wheels/mlx-$MLX_VERSION-"*.whl \
    "$dir/wheels/mlx_lm-$MLX_LM_VERSION-"*.whl "$dir/part1/"
  rm -rf "$dir/work"
  du -sh "$dir/part1" "$dir/part2"
}

unpack() {
  p1=$1
  p2=$2
  target=$3
  for f in "$p1/libmlx.so.xz.0" "$p1/libmlx.so.sha256" "$p1/$cuda_wheel" \
    "$p2/libmlx.so.xz.1"; do
    [ -f "$f" ] || fail "missing part: $f"
  done
  mkdir -p "$target"
  cat "$p1/libmlx.so.xz.0" "$p2/libmlx.so.xz.1" | xz -d >"$target/libmlx.so" ||
    fail "the parts do not decompress: corrupt or from different packs"
  [ "$(sha256sum "$target/libmlx.so" | cut -d' ' -f1)" = \
    "$(cat "$p1/libmlx.so.sha256")" ] || fail "libmlx.so: SHA-256 differs"
  python3 -m pip install --quiet --no-deps --no-index --target "$target" \
    "$p1"/*.whl || fail "pip install failed"
  mkdir -p "$target/$(dirname "$lib")"
  mv "$target/libmlx.so" "$target/$lib"
  echo "PYTHONPATH=$target"
}

[ $# -ge 1 ] || usage
case $1 in
pack)
  [ $# -eq 2 ] || [ $# -eq 3 ] || usage
  pack "$2" "${3:-40}"
  ;;
unpack)
  [ $# -eq 4 ] || usage
  unpack "$2" "$3" "$4"
  ;;
-h | --help)
  sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'
  ;;
*) usage ;;
esac
