#!/bin/sh
# Top-level CLI behaviour: usage errors exit 2, help and version exit 0, and
# the help a usage error points to (`foundry help help`) exists.
# usage: test_main.sh FOUNDRY
set -u
foundry=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
failures=0

fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

expect() { # expect CODE DESCRIPTION COMMAND...: stdout/stderr in $dir/out, err
  want=$1; what=$2; shift 2
  "$@" >"$dir/out" 2>"$dir/err"
  got=$?
  [ "$got" -eq "$want" ] || fail "$what: exit $got, want $want"
}

has() { # has FILE TEXT: FILE contains TEXT (fixed string)
  grep -qF -- "$2" "$1" || fail "expected '$2' in: $(cat "$1")"
}

expect 2 "no command" "$foundry"
expect 2 "unknown command" "$foundry" frobnicate
has "$dir/err" "unknown command 'frobnicate'"
expect 0 "--help" "$foundry" --help
has "$dir/out" "bench"
expect 0 "--version" "$foundry" --version
grep -q '^foundry [0-9]' "$dir/out" || fail "--version does not print the version"
expect 2 "help for an unknown command" "$foundry" help frobnicate
has "$dir/err" "unknown command 'frobnicate'"
for command in plan bench inspect generate verify make-model; do
  expect 0 "help $command" "$foundry" help "$command"
  has "$dir/out" "usage: foundry $command"
  expect 0 "$command --help" "$foundry" "$command" --help
  has "$dir/out" "usage: foundry $command"
done

# `foundry help` alone lists the commands on stdout.
expect 0 "help without a command" "$foundry" help
has "$dir/out" "usage: foundry COMMAND"
has "$dir/out" "make-model"
# A usage error of `help` suggests `foundry help help`, which must work.
expect 2 "help with two commands" "$foundry" help plan bench
has "$dir/err" "Try 'foundry help help'."
expect 0 "help help" "$foundry" help help
has "$dir/out" "usage: foundry help [COMMAND]"
[ -s "$dir/err" ] && fail "help help wrote to stderr: $(cat "$dir/err")"
expect 0 "help --help" "$foundry" help --help
has "$dir/out" "usage: foundry help [COMMAND]"

[ "$failures" -eq 0 ] || exit 1
echo "cli main: all checks passed"
