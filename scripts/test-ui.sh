#!/usr/bin/env bash
# End-to-end tests of the web UI: installs Debian's Chromium (never a downloaded browser) and the
# pinned npm packages of tests/ui, then runs tests/ui/e2e.test.mjs against $WEFT_BIN, which
# must have been built after scripts/build_ui.sh. Screenshots land in tests/ui/artifacts/.
# `scripts/test-ui.sh --prepare` only installs Chromium and the npm packages.
set -euo pipefail
cd "$(dirname "$0")/.."
prepare=0
[[ "${1:-}" == "--prepare" ]] && { prepare=1; shift; }
[[ "$prepare" == 1 ]] || : "${WEFT_BIN:?WEFT_BIN must name a weft binary built with the UI}"
if [[ ! -x /usr/bin/chromium ]]; then
    echo "[test-ui] installing Debian's chromium" >&2
    SUDO=""; [[ "$(id -u)" != 0 ]] && SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends chromium >/dev/null
fi
cd tests/ui
stamp=node_modules/.weft-package-lock.json
if [[ ! -f "$stamp" ]] || ! cmp -s package-lock.json "$stamp"; then
    npm ci --no-audit --no-fund --loglevel=error
    cp package-lock.json "$stamp"
fi
[[ "$prepare" == 1 ]] && exit 0
# Every test file unless some are named (options such as --test-name-pattern may be given).
files=0
for a in "$@"; do [[ "$a" == *.mjs ]] && files=1; done
[[ "$files" == 1 ]] || set -- "$@" *.test.mjs
node --test --test-concurrency=1 "$@"
