#!/bin/sh
# Install the packages of the TypeScript client check (openapi/typescript:
# @hey-api/openapi-ts, typescript, @types/node) exactly as package-lock.json pins
# them, when node_modules does not match the lockfile.  Needs Node >= 20.19 with
# npm; without them a loud notice, and tests/app/test_typescript_client.py FAILS
# (it never skips, and never downloads anything itself).
set -eu
cd "$(dirname "$0")/../openapi/typescript"

notice() {
  echo "######################################################################" >&2
  echo "# NOTICE: $1" >&2
  echo "# The TypeScript client test (tests/app/test_typescript_client.py) will FAIL." >&2
  echo "######################################################################" >&2
  exit 0
}

command -v node >/dev/null 2>&1 || notice "node is not installed (Node >= 20.19 with npm)"
command -v npm >/dev/null 2>&1 || notice "npm is not installed (it comes with Node >= 20.19)"
node -e 'const [a, b] = process.versions.node.split(".").map(Number);
         process.exit(a > 20 || (a === 20 && b >= 19) ? 0 : 1)' ||
  notice "node $(node --version) is older than 20.19 (@hey-api/openapi-ts needs it)"

# A copy of the lockfile npm ci installed from marks node_modules as current.
stamp=node_modules/.ledgerd-installed-lock.json
if cmp -s package-lock.json "$stamp" 2>/dev/null; then
  exit 0
fi
echo "install-typescript: npm ci in openapi/typescript" >&2
npm ci --no-audit --no-fund --loglevel=error
cp package-lock.json "$stamp"
