#!/usr/bin/env bash
# Every test: the workspace's tests, and the wasm tests in headless Chromium (wasm-pack, Debian's chromium +
# chromium-driver), whose build compiles every layer beneath the wasm client for the browser target.
set -euo pipefail
cd "$(dirname "$0")/.."
PM_SETUP_BROWSER=1 bash scripts/setup.sh
export PATH="$HOME/.cargo/bin:$PATH"
# A fresh clone gains nothing from incremental state, and it costs gigabytes of disk.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
# Test stores, block stores and browser profiles go here, not the system temp directory, and
# are removed when the tests pass (the size is printed so the disk they take stays visible).
export TMPDIR="$PWD/target/test-tmp"
rm -rf "$TMPDIR" && mkdir -p "$TMPDIR"
bash scripts/build-web.sh # the page the browser end-to-end test drives
cargo test --workspace --all-targets
cargo test --workspace --doc
CHROME_BIN=/usr/bin/chromium wasm-pack test --headless --chrome --chromedriver /usr/bin/chromedriver \
  --mode no-install client-wasm
echo "disk used by the tests' files: $(du -sh "$TMPDIR" 2>/dev/null | cut -f1)"
rm -rf "$TMPDIR"
echo "disk used by target/: $(du -sh target 2>/dev/null | cut -f1)"
