#!/bin/sh
# Install the Debian package behind the benchmarks' peer (bench/redis_bench.py):
# redis-server, started by the benchmark itself on loopback with
# appendonly yes + appendfsync always, in a temp dir on the scratch file system.
# Called by `make bench` only, never by `make test`.  Without root: a loud
# notice; the Redis rows are then left out and the report says why.
set -eu
exec "$(dirname "$0")/apt-install.sh" "the benchmark peer's packages" \
  "The Redis comparison will be SKIPPED in docs/benchmarks.md." \
  redis-server
