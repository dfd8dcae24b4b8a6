#!/bin/sh
# scripts/setup-deps.sh with dpkg-query, apt-get and sudo stubbed on PATH
# (nothing is installed): one line per set of packages instead of apt-get's
# and dpkg's progress, and on a failure apt-get's whole output and its exit
# status; and --help of scripts/main.sh and scripts/test.sh answers at
# once, installing nothing.
# usage: test_setup_deps.sh SETUP_DEPS_SH
set -u
script=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
. "$(dirname "$0")/../cli_lib.sh"

mkdir "$work/bin"
cat >"$work/bin/dpkg-query" <<'STUB'
#!/bin/sh
exit 1
STUB
cat >"$work/bin/apt-get" <<'STUB'
#!/bin/sh
echo "apt-get $*" >>"$STUB_CALLS"
if [ "$1" = install ]; then
  i=0
  while [ "$i" -lt 400 ]; do
    echo "Unpacking package $i ..."
    i=$((i + 1))
  done
  if [ -n "${STUB_FAIL:-}" ]; then
    echo "E: Unable to locate package nope" >&2
    exit 100
  fi
fi
exit 0
STUB
cat >"$work/bin/sudo" <<'STUB'
#!/bin/sh
exec "$@"
STUB
chmod +x "$work/bin/dpkg-query" "$work/bin/apt-get" "$work/bin/sudo"
export STUB_CALLS="$work/calls"

expect_cmd 0 "setup-deps.sh with every package missing" \
  env PATH="$work/bin:$PATH" sh "$script" clang-format
[ -s "$out" ] && fail "setup-deps.sh wrote to stdout: $(cat "$out")"
[ "$(wc -l <"$err")" -eq 1 ] || fail "setup-deps.sh printed more than one line:"
contains "$err" "foundry setup: installing build-essential cmake"
contains "$err" "python3 clang-format ... done"
contains "$work/calls" "apt-get install -y -qq --no-install-recommends build-essential"

expect_cmd 100 "setup-deps.sh whose apt-get install fails" \
  env STUB_FAIL=1 PATH="$work/bin:$PATH" sh "$script"
contains "$err" "... failed; apt-get said:"
contains "$err" "Unpacking package 399 ..."
contains "$err" "E: Unable to locate package nope"

# --help of the README's two commands: usage at once, nothing installed
# (apt-get, stubbed, would record a call)
for sh_script in main.sh test.sh; do
  : >"$work/calls"
  expect_cmd 0 "$sh_script --help" \
    env PATH="$work/bin:$PATH" sh "$(dirname "$script")/$sh_script" --help
  contains "$out" "usage: scripts/$sh_script"
  [ -s "$work/calls" ] && fail "$sh_script --help ran apt-get"
done

finish setup_deps
