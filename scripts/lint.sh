#!/usr/bin/env bash
# rustfmt and clippy over the workspace; any warning fails.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
bash scripts/sdk-rust.sh lint
