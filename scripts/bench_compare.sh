#!/usr/bin/env bash
# Before/after benchmark: builds the release binary of BASE (a git revision, default the parent
# of HEAD) in a worktree under .bench-base/ and the current tree's, then runs both side by side
# (scripts/bench_compare.py: ingest alternating, 3 rounds; search over 10M spans each).
# Usage: make bench-compare [BASE=<rev>]; extra arguments go to bench_compare.py.
set -euo pipefail
cd "$(dirname "$0")/.."
base="${BASE:-HEAD~1}"
rev="$(git rev-parse --short "$base")"
dir=".bench-base/$rev"
if [ ! -d "$dir" ]; then
    git worktree add --detach "$dir" "$rev"
fi
(cd "$dir" && bash scripts/build_ui.sh >/dev/null && CARGO_TARGET_DIR="$PWD/../target-$rev" cargo build --release -p weft-server)
bash scripts/build_ui.sh >/dev/null
cargo build --release -p weft-server
bash scripts/test-deps.sh >/dev/null
mkdir -p bench-out
python3 scripts/bench_compare.py --old ".bench-base/target-$rev/release/weft" --new target/release/weft \
    --out bench-out/compare.json "$@"
