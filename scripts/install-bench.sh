#!/bin/sh
# Install the Debian package behind the benchmarks' peer (bench/redis_bench.py):
# redis-server, started by the benchmark itself on loopback with
# appendonly yes + appendfsync always, in a temp dir on the scratch file system.
#
# Only root can install packages.  A non-root run prints a loud notice and
# exits 0, so `make bench` still runs; the Redis rows are then left out and the
# report says why.  Called by `make bench` only, never by `make test`.
set -eu

PACKAGES="redis-server"

missing=""
for pkg in $PACKAGES; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing="$missing $pkg"
  fi
done

if [ -z "$missing" ]; then
  exit 0
fi

if [ "$(id -u)" != 0 ]; then
  echo "######################################################################" >&2
  echo "# NOTICE: not root, so the benchmark peer's packages are NOT installed:" >&2
  echo "#  $missing" >&2
  echo "# The Redis comparison will be SKIPPED in docs/benchmarks.md." >&2
  echo "# Fix: sudo apt-get install -y --no-install-recommends$missing" >&2
  echo "######################################################################" >&2
  exit 0
fi

echo "install-bench: installing$missing" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# shellcheck disable=SC2086  # word splitting of the package list is intended
apt-get install -y -qq --no-install-recommends $missing
