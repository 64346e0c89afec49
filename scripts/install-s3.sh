#!/bin/sh
# Install the Debian packages behind the local S3 server (offload/local_s3.py):
# a one-node Ceph cluster (mon + OSD) with radosgw on loopback.  About 270 MB.
#
# Only root can install packages.  A non-root run prints a loud notice and
# exits 0, so `make install` keeps working; the S3 tests then skip and say why.
set -eu

PACKAGES="radosgw ceph-mon ceph-osd ceph-common"

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
  echo "# NOTICE: not root, so the local S3 server's packages are NOT installed:" >&2
  echo "#  $missing" >&2
  echo "# The S3 tests will be SKIPPED and 'make serve' runs without S3." >&2
  echo "# Fix: sudo apt-get install -y --no-install-recommends$missing" >&2
  echo "######################################################################" >&2
  exit 0
fi

echo "install-s3: installing$missing" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# shellcheck disable=SC2086  # word splitting of the package list is intended
apt-get install -y -qq --no-install-recommends $missing
