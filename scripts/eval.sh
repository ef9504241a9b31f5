#!/usr/bin/env bash
# The evaluation table (PrivateMail vs non-private baselines on Fashion-MNIST).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$HOME/.cargo/bin:$PATH"
exec cargo run --release -p privatemail-server --bin eval -- "$@"
