#!/bin/sh
# Install and build the operator console (console/, served at /console, see
# docs/console.md): npm ci of preact, htm, uplot, vite and axe-core exactly as
# console/package-lock.json pins them, then `vite build` into console/dist when
# the sources changed since the last build.  Also Debian's chromium (as root) for
# the browser tests, tests/console.  Needs Node >= 20.19 with npm; without them a
# loud notice: /console answers 409 and tests/console FAILS (never skips).
set -eu
here="$(dirname "$0")"
"$here/apt-install.sh" "the browser tests' Chromium" \
  "The console's browser tests (tests/console) will FAIL." chromium
cd "$here/../console"

notice() {
  echo "######################################################################" >&2
  echo "# NOTICE: $1" >&2
  echo "# The console (/console) is not built; tests/console will FAIL." >&2
  echo "######################################################################" >&2
  exit 0
}

command -v node >/dev/null 2>&1 || notice "node is not installed (Node >= 20.19 with npm)"
command -v npm >/dev/null 2>&1 || notice "npm is not installed (it comes with Node >= 20.19)"
node -e 'const [a, b] = process.versions.node.split(".").map(Number);
         process.exit(a > 20 || (a === 20 && b >= 19) ? 0 : 1)' ||
  notice "node $(node --version) is older than 20.19 (vite 7 needs it)"

# A copy of the lockfile npm ci installed from marks node_modules as current.
stamp=node_modules/.ledgerd-installed-lock.json
if ! cmp -s package-lock.json "$stamp" 2>/dev/null; then
  echo "install-console: npm ci in console" >&2
  npm ci --no-audit --no-fund --loglevel=error
  cp package-lock.json "$stamp"
fi

# The build's inputs, hashed: dist/ is rebuilt when any of them changed.
sources=$(find index.html vite.config.js package-lock.json src -type f | LC_ALL=C sort |
  xargs sha256sum | sha256sum | cut -d' ' -f1)
if [ "$(cat dist/.ledgerd-sources 2>/dev/null || true)" != "$sources" ]; then
  echo "install-console: vite build in console" >&2
  npx --no-install vite build --logLevel warn
  echo "$sources" > dist/.ledgerd-sources
fi
