#!/usr/bin/env bash
# Every test: the workspace's tests, and the shared crate built for the browser target.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$HOME/.cargo/bin:$PATH"
cargo test --workspace --all-targets
cargo test --workspace --doc
if rustup target list --installed 2>/dev/null | grep -qx wasm32-unknown-unknown; then
  cargo build -p privatemail-shared --target wasm32-unknown-unknown
  echo "wasm32 build of shared: ok"
else
  echo "wasm32 target unavailable (no rustup): skipping the wasm build" >&2
  exit 1
fi
