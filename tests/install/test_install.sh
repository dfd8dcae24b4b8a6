#!/bin/sh
# `cmake --install` into a temporary prefix (issue #31), then what a user
# outside the project does with it: every public header compiles on its
# own, and a C program (consumer.c) is built through pkg-config against
# the installed libfoundry, shared and static, and gives the same greedy
# ids on the CPU backend as the installed `foundry generate`.
# usage: test_install.sh CMAKE BUILD_DIR CC TEST_DATA_DIR [CFLAGS]
#   (CFLAGS: extra compile and link flags, e.g. the sanitizer the build
#   uses)
set -u
cmake=$1 build=$2 cc=$3 data=$4 extra=${5:-}
here=$(cd "$(dirname "$0")" && pwd)
fail() { echo "test_install: $*" >&2; exit 1; }
command -v pkg-config >/dev/null 2>&1 || fail "pkg-config is not installed"
tmp=$(mktemp -d) || fail "mktemp"
trap 'rm -rf "$tmp"' EXIT
prefix="$tmp/prefix"
model="$data/llama3-micro/model"

"$cmake" --install "$build" --prefix "$prefix" >"$tmp/install.log" 2>&1 ||
  fail "cmake --install failed: $(cat "$tmp/install.log")"
pc=$(find "$prefix" -name foundry.pc)
[ -n "$pc" ] || fail "no foundry.pc installed"
libdir=$(dirname "$(dirname "$pc")")
for f in "$prefix/bin/foundry" "$libdir/libfoundry.a" "$libdir/libfoundry.so" \
  "$prefix/include/foundry/core.h" "$prefix/include/foundry/llama_session.h"; do
  [ -e "$f" ] || fail "not installed: $f"
done

PKG_CONFIG_PATH=$(dirname "$pc")
export PKG_CONFIG_PATH
[ "$(pkg-config --modversion foundry)" = "$("$prefix/bin/foundry" --version |
  head -n 1 | sed 's/^foundry //; s/ .*//')" ] ||
  fail "foundry.pc's version is not the command's: $(pkg-config --modversion foundry)"
cflags=$(pkg-config --cflags foundry) || fail "pkg-config --cflags foundry"
libs=$(pkg-config --libs foundry) || fail "pkg-config --libs foundry"
static_libs=$(pkg-config --static --libs foundry) || fail "pkg-config --static"

# Every public header on its own, strictly.
for h in "$prefix"/include/foundry/*.h; do
  name=$(basename "$h")
  printf '#include <foundry/%s>\nint main(void) { return 0; }\n' "$name" >"$tmp/h.c"
  # shellcheck disable=SC2086
  "$cc" -std=c11 -Wall -Wextra -Werror -pedantic $cflags -c "$tmp/h.c" -o "$tmp/h.o" 2>"$tmp/h.log" ||
    fail "include/foundry/$name does not compile on its own: $(cat "$tmp/h.log")"
done

# The shared library (found at run time through the rpath given here).
# shellcheck disable=SC2086
"$cc" -std=c11 -Wall -Wextra -Werror $extra $cflags "$here/consumer.c" -o "$tmp/consumer-shared" \
  $libs -Wl,-rpath,"$libdir" 2>"$tmp/cc.log" ||
  fail "building against libfoundry.so failed: $(cat "$tmp/cc.log")"
# The static library, with foundry.pc's private dependencies.
# shellcheck disable=SC2086
"$cc" -std=c11 -Wall -Wextra -Werror $extra $cflags "$here/consumer.c" -o "$tmp/consumer-static" \
  "$libdir/libfoundry.a" $(echo "$static_libs" | sed 's/-lfoundry//') \
  2>"$tmp/cc.log" ||
  fail "building against libfoundry.a failed: $(cat "$tmp/cc.log")"
if command -v ldd >/dev/null 2>&1; then
  ldd "$tmp/consumer-shared" | grep -q "$libdir/libfoundry.so" ||
    fail "consumer-shared does not load the installed libfoundry.so: $(ldd "$tmp/consumer-shared")"
  ! ldd "$tmp/consumer-static" | grep -q libfoundry ||
    fail "consumer-static loads a libfoundry.so"
fi

"$prefix/bin/foundry" generate --model "$model" --prompt-ids 1,2,3 \
  --max-tokens 4 --ignore-eos --backend cpu >"$tmp/cli.out" 2>"$tmp/cli.err" ||
  fail "installed foundry generate failed: $(cat "$tmp/cli.err")"
want=$(grep -o 'ids: [0-9,]*' "$tmp/cli.out")
[ -n "$want" ] || fail "no ids from foundry generate: $(cat "$tmp/cli.out")"
for kind in shared static; do
  "$tmp/consumer-$kind" "$model" 1,2,3 4 >"$tmp/$kind.out" 2>"$tmp/$kind.err" ||
    fail "consumer-$kind failed: $(cat "$tmp/$kind.err")"
  grep -qx "libfoundry $(pkg-config --modversion foundry)" "$tmp/$kind.out" ||
    fail "consumer-$kind: $(cat "$tmp/$kind.out")"
  got=$(grep -o 'ids: [0-9,]*' "$tmp/$kind.out")
  [ "$got" = "$want" ] ||
    fail "consumer-$kind printed '$got', foundry generate '$want'"
done
echo "test_install: installed, built against it shared and static: $want"
