#!/bin/sh
# Installs the Debian packages Foundry needs to build and test, when missing,
# plus any package named as an argument (CI adds clang-format).
# Uses apt-get directly as root, or through sudo when available.
# usage: setup-deps.sh [EXTRA_PACKAGE...]
set -eu

packages="build-essential cmake pkg-config libjansson-dev libcmocka-dev libpcre2-dev python3 $*"
missing=""
for package in $packages; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "ok installed"; then
    missing="$missing $package"
  fi
done
[ -z "$missing" ] && exit 0

echo "foundry setup: installing$missing" >&2
if [ "$(id -u)" -eq 0 ]; then
  apt_get="apt-get"
elif command -v sudo >/dev/null 2>&1; then
  apt_get="sudo apt-get"
else
  echo "foundry setup: missing packages:$missing; run as root or install them" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
$apt_get update -qq
# shellcheck disable=SC2086
$apt_get install -y -qq --no-install-recommends $missing
