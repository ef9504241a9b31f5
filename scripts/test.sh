#!/usr/bin/env bash
# Every test: the workspace's tests, `shared` built for the browser target, and the wasm tests
# in headless Chromium (wasm-pack, Debian's chromium + chromium-driver).
set -euo pipefail
cd "$(dirname "$0")/.."
PM_SETUP_BROWSER=1 bash scripts/setup.sh
export PATH="$HOME/.cargo/bin:$PATH"
# A fresh clone gains nothing from incremental state, and it costs gigabytes of disk.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
bash scripts/build-web.sh # the page the browser end-to-end test drives
cargo test --workspace --all-targets
cargo test --workspace --doc
cargo build -p privatemail-shared --target wasm32-unknown-unknown
echo "wasm32 build of shared: ok"
CHROME_BIN=/usr/bin/chromium wasm-pack test --headless --chrome --chromedriver /usr/bin/chromedriver \
  --mode no-install client-wasm
echo "disk used by target/: $(du -sh target 2>/dev/null | cut -f1)"
