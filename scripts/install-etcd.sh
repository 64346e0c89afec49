#!/bin/sh
# Install etcd (Debian etcd-server, about 20 MB) for cluster mode's metadata store:
# tests, the cluster quick start and benchmarks start it on loopback through
# tools/local_etcd.py.  Without root: a loud notice; the etcd tests then FAIL.
set -eu
exec "$(dirname "$0")/apt-install.sh" "etcd (cluster mode's metadata store)" \
  "The cluster tests will FAIL (they never skip)." \
  etcd-server
