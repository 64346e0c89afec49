#!/bin/sh
# apt-install.sh WHAT CONSEQUENCE PACKAGE...: install the Debian packages that
# are missing.  Only root can; a non-root run prints a loud notice naming WHAT
# is not installed and CONSEQUENCE, and exits 0 so the caller's make target
# keeps working.
set -eu

what=$1
consequence=$2
shift 2

missing=""
for pkg in "$@"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing="$missing $pkg"
  fi
done

if [ -z "$missing" ]; then
  exit 0
fi

if [ "$(id -u)" != 0 ]; then
  echo "######################################################################" >&2
  echo "# NOTICE: not root, so $what are NOT installed:" >&2
  echo "#  $missing" >&2
  echo "# $consequence" >&2
  echo "# Fix: sudo apt-get install -y --no-install-recommends$missing" >&2
  echo "######################################################################" >&2
  exit 0
fi

echo "apt-install: installing$missing" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# shellcheck disable=SC2086  # word splitting of the package list is intended
apt-get install -y -qq --no-install-recommends $missing
