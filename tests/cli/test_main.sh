#!/bin/sh
# Top-level CLI behaviour: usage errors exit 2, help and version exit 0.
# usage: test_main.sh FOUNDRY
set -u
foundry=$1
failures=0

expect() { # expect CODE DESCRIPTION COMMAND...
  want=$1; what=$2; shift 2
  "$@" >/dev/null 2>&1
  got=$?
  if [ "$got" -ne "$want" ]; then
    echo "FAIL: $what: exit $got, want $want" >&2
    failures=$((failures + 1))
  fi
}

expect 2 "no command" "$foundry"
expect 2 "unknown command" "$foundry" frobnicate
expect 0 "--help" "$foundry" --help
expect 0 "--version" "$foundry" --version
expect 2 "help for an unknown command" "$foundry" help frobnicate
for command in plan bench inspect generate verify make-model; do
  expect 0 "help $command" "$foundry" help "$command"
  expect 0 "$command --help" "$foundry" "$command" --help
done
"$foundry" --version | grep -q '^foundry [0-9]' ||
  { echo "FAIL: --version does not print the version" >&2; failures=$((failures + 1)); }
"$foundry" --help | grep -q 'bench' ||
  { echo "FAIL: --help does not list commands" >&2; failures=$((failures + 1)); }

[ "$failures" -eq 0 ] || exit 1
echo "cli main: all checks passed"
