#!/usr/bin/env bash
# The main job: for now the Fashion-MNIST evaluation (the server arrives with its issue).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$HOME/.cargo/bin:$PATH"
exec cargo run --release -p privatemail-server --bin eval -- "$@"
