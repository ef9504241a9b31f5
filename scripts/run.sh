#!/usr/bin/env bash
# The main job: the gallery server with the Fashion-MNIST demo gallery, serving the page's
# release bundle (web/dist/) at
# http://127.0.0.1:8080 (its arguments go to the server: `bash scripts/run.sh --help`).
set -euo pipefail
cd "$(dirname "$0")/.."
PM_SETUP_WASM=1 bash scripts/setup.sh
export PATH="$HOME/.cargo/bin:$PATH"
bash scripts/build-web.sh
exec cargo run --release -p privatemail-server --bin server -- "$@"
