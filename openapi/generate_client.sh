#!/usr/bin/env bash
# Regenerate the Python client in openapi/client/ledgerd_client from openapi/openapi.json.
#
#   openapi/generate_client.sh           # regenerate (commit the result)
#   openapi/generate_client.sh --check   # exit 1 if the checked-in client is stale
#
# Uses the venv's openapi-python-client and ruff (post-hook formatting), so the
# output depends only on openapi.json, client-config.yaml and those versions.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BIN=$(cd "${BIN:-$ROOT/.venv/bin}" && pwd)
export PATH="$BIN:$PATH"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && openapi-python-client generate \
    --path "$ROOT/openapi/openapi.json" \
    --config "$ROOT/openapi/client-config.yaml" \
    --meta none --fail-on-warning \
    --output-path "$tmp/ledgerd_client" >"$tmp/log" 2>&1) || { cat "$tmp/log" >&2; exit 1; }

if [[ "${1:-}" == "--check" ]]; then
    if ! diff -ru "$ROOT/openapi/client/ledgerd_client" "$tmp/ledgerd_client" >"$tmp/diff"; then
        head -n 200 "$tmp/diff" >&2
        echo "openapi/client is out of date with openapi/openapi.json:" \
             "run `make openapi` (export.py, then this script) and commit the result" >&2
        exit 1
    fi
    echo "openapi/client is up to date"
    exit 0
fi

rm -rf "$ROOT/openapi/client/ledgerd_client"
mkdir -p "$ROOT/openapi/client"
cp -r "$tmp/ledgerd_client" "$ROOT/openapi/client/ledgerd_client"
echo "wrote openapi/client/ledgerd_client"
