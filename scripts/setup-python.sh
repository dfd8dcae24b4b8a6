#!/bin/sh
# Makes build-venv/, the Python environment of the tests that need packages
# from PyPI (scripts/requirements-test.txt: the openai client of
# tests/cli/test_serve_openai.py), when it is missing or its requirements
# changed. Needs python3 with venv (python3-venv, scripts/setup-deps.sh).
# Prints one line when it installs; pip's output only when it fails (exit
# 1; the tests that need the packages then skip, saying so).
# usage: setup-python.sh
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
venv="$root/build-venv"
requirements="$root/scripts/requirements-test.txt"
stamp="$venv/requirements-test.txt"
cmp -s "$requirements" "$stamp" 2>/dev/null && exit 0
log=$(mktemp "${TMPDIR:-/tmp}/foundry-python.XXXXXX")
trap 'rm -f "$log"' EXIT
printf 'foundry setup: installing the Python test packages into build-venv/ ... ' >&2
if python3 -m venv "$venv" >"$log" 2>&1 &&
  "$venv/bin/python3" -m pip install --disable-pip-version-check -q \
    -r "$requirements" >>"$log" 2>&1; then
  cp "$requirements" "$stamp"
  echo "done" >&2
else
  echo "failed; it said:" >&2
  cat "$log" >&2
  exit 1
fi
