#!/bin/sh
# Install the Debian packages behind the local S3 server (tools/local_s3.py):
# a one-node Ceph cluster (mon + OSD) with radosgw on loopback.  About 270 MB.
# Without root: a loud notice; the S3 tests then skip and say why.
set -eu
exec "$(dirname "$0")/apt-install.sh" "the local S3 server's packages" \
  "The S3 tests will be SKIPPED and 'make serve' runs without S3." \
  radosgw ceph-mon ceph-osd ceph-common
