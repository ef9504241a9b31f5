#!/usr/bin/env bash
# Builds the page's WebAssembly client into web/pkg/ (release wasm + wasm-bindgen's ES module)
# and copies the model weights (the query model, the class model and the familiarity model)
# next to it, then the page's release bundle into web/dist/ (crates/pagebundle: every file named by its hash and
# loaded with Subresource Integrity, manifest.json), which the gallery serves (scripts/run.sh)
# and the CLI builds into itself (`privatemail page`; build the CLI after this script).
# Offline: needs only cargo, the wasm32 target and wasm-bindgen-cli (scripts/setup.sh with
# PM_SETUP_WASM=1 installs them).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
cargo build --release -p privatemail-client-wasm --target wasm32-unknown-unknown
# The function-name section (about 40 KB of the first load gzipped) only names frames in a
# browser's stack traces; the page ships without it.
wasm-bindgen --target web --no-typescript --remove-name-section --remove-producers-section \
  --out-dir web/pkg target/wasm32-unknown-unknown/release/privatemail_client_wasm.wasm
cp server/assets/query.bin web/pkg/query.bin
cp server/assets/classifier.bin web/pkg/classifier.bin
# The familiarity model (embed::ood::FamiliarityModel), fetched with the first photo.
cp crates/embed/assets/familiarity.bin web/pkg/familiarity.bin
# The committed evaluation's table: the page states what the noisy-numbers searches' results
# are worth at the chosen ε from these figures (web/evaluation.js).
cp docs/eval/results.csv web/pkg/results.csv
echo "web/pkg: $(du -k web/pkg/privatemail_client_wasm_bg.wasm | cut -f1) KiB wasm," \
  "$(gzip -9c web/pkg/privatemail_client_wasm_bg.wasm | wc -c) bytes gzipped"
cargo run -q -p pagebundle --bin pagebundle -- web web/dist
