#!/usr/bin/env bash
# Builds the web UI (ui/ -> ui/dist) with the pinned npm packages of ui/package-lock.json.
# The weft binary embeds ui/dist when it is compiled (crates/weft-server/build.rs), so run this
# before `cargo build`. Needs Node.js 20 and the npm registry; nothing built is committed.
set -euo pipefail
cd "$(dirname "$0")/../ui"
if ! command -v npm >/dev/null 2>&1; then
    echo "build_ui: npm (Node.js 20) is needed to build the web UI" >&2
    exit 1
fi
# Reinstall only when the lockfile changed since the last install.
stamp=node_modules/.weft-package-lock.json
if [ ! -f "$stamp" ] || ! cmp -s package-lock.json "$stamp"; then
    npm ci --no-audit --no-fund --loglevel=error
    cp package-lock.json "$stamp"
fi
npm run --silent typecheck
npm run --silent build
