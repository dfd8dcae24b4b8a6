#!/bin/sh
# Installs the Debian packages Foundry needs to build and test, when missing,
# plus any package named as an argument (CI adds clang-format).
# Uses apt-get directly as root, or through sudo when available. Prints one
# line per set of packages installed, not apt-get's and dpkg's progress;
# when installing fails, it prints their captured output and fails.
# usage: setup-deps.sh [EXTRA_PACKAGE...]
set -eu

packages="build-essential cmake pkg-config libjansson-dev libcmocka-dev libpcre2-dev libicu-dev libssl-dev libmicrohttpd-dev curl python3-venv python3 $*"
missing=""
for package in $packages; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "ok installed"; then
    missing="$missing $package"
  fi
done
[ -z "$missing" ] && exit 0

if [ "$(id -u)" -eq 0 ]; then
  apt_get="apt-get"
elif command -v sudo >/dev/null 2>&1; then
  apt_get="sudo apt-get"
else
  echo "foundry setup: missing packages:$missing; run as root or install them" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
log=$(mktemp "${TMPDIR:-/tmp}/foundry-setup.XXXXXX")
trap 'rm -f "$log"' EXIT
printf 'foundry setup: installing%s ... ' "$missing" >&2
# shellcheck disable=SC2086
if $apt_get update -qq >"$log" 2>&1 &&
  $apt_get install -y -qq --no-install-recommends $missing >>"$log" 2>&1; then
  echo "done" >&2
else
  code=$?
  echo "failed; apt-get said:" >&2
  cat "$log" >&2
  exit "$code"
fi
