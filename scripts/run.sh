#!/usr/bin/env bash
# The main job: the gallery server with the Fashion-MNIST demo gallery, serving the page's
# release bundle (web/dist/) at
# http://127.0.0.1:8080 (its arguments go to the server: `bash scripts/run.sh --help`).
set -euo pipefail
cd "$(dirname "$0")/.."
# Each step is announced with an estimate first: a fresh machine spends minutes on each.
step() { echo "run: step $1 of 3: $2 (about $3)…" >&2; }
step 1 "checking and installing the tools (apt packages, the wasm target, wasm-bindgen)" "nothing if present, up to 10 minutes on a fresh machine"
PM_SETUP_WASM=1 bash scripts/setup.sh
export PATH="$HOME/.cargo/bin:$PATH"
step 2 "compiling the page's WebAssembly client" "a few seconds if built, 3–6 minutes the first time"
bash scripts/build-web.sh
step 3 "compiling and starting the server" "a few seconds if built, 5–10 minutes the first time; it prints its address when ready"
exec cargo run --release -p privatemail-server --bin server -- "$@"
