#!/bin/sh
# Install what the benchmarks' native load generators and peer need, so that no
# figure measures a Python client (bench/peer_bench.py):
# - Debian packages: redis-server (the peer, started by the benchmark itself on
#   loopback with appendonly yes + appendfsync always, in a temp dir on the
#   scratch file system), redis-tools (redis-benchmark, its load generator) and
#   wrk (the HTTP load generator, POST bodies from a Lua script);
# - bench/node: the append-stream load generator, Node.js with the `ws` package
#   from npm, installed exactly as locked in bench/node/package-lock.json.
# Called by `make bench` only, never by `make test`.  Without root: a loud
# notice; the rows that need a missing tool are then left out and the report
# says why.
set -eu
here=$(dirname "$0")
"$here/apt-install.sh" "the benchmarks' peer and load generators" \
  "The Redis and native-client comparisons will be SKIPPED in docs/benchmarks.md." \
  redis-server redis-tools wrk

node_dir="$here/../bench/node"
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "######################################################################" >&2
  echo "# NOTICE: node/npm not found: the append-stream load generator" >&2
  echo "# (bench/node) is not installed; stream rows will be SKIPPED." >&2
  echo "# Fix: install Node.js >= 18 with npm, then rerun this script." >&2
  echo "######################################################################" >&2
  exit 0
fi
if [ ! -d "$node_dir/node_modules/ws" ] || \
   [ "$node_dir/package-lock.json" -nt "$node_dir/node_modules/.package-lock.json" ]; then
  npm ci --prefix "$node_dir" --no-audit --no-fund --loglevel=error
fi
