#!/usr/bin/env bash
# Hostile clients against the release server at 10,000 images (the README's figures): starts
# the server on a temporary store, runs `hostilebench` against it (which ends with SIGTERM).
# Usage: bash scripts/hostilebench.sh [gallery size]   (default 10000)
set -euo pipefail
cd "$(dirname "$0")/.."
PM_SETUP_WASM=0 bash scripts/setup.sh
export PATH="$HOME/.cargo/bin:$PATH"
cargo build --release -q -p privatemail-server --bin server -p privatemail-bench --bin hostilebench
n=${1:-10000}
dir=$(mktemp -d)
port=$((19000 + RANDOM % 1000))
target/release/server --bind "127.0.0.1:$port" --gallery-size "$n" --store "$dir/gallery.redb" \
  > "$dir/server.log" 2>&1 &
pid=$!
trap 'kill "$pid" 2>/dev/null || true; rm -rf "$dir"' EXIT
echo "hostilebench: starting the $n-image server (log: $dir/server.log)…"
until grep -q "listening on" "$dir/server.log"; do
  kill -0 "$pid" || { cat "$dir/server.log"; exit 1; }
  sleep 5; tail -n 1 "$dir/server.log" | cut -c1-160
done
target/release/hostilebench --base "http://127.0.0.1:$port" --pid "$pid"
wait "$pid" && echo "hostilebench: the server exited 0" || echo "hostilebench: the server exited $?"
grep -E "store closed|shutdown grace" "$dir/server.log" || true
echo "server log lines: $(wc -l < "$dir/server.log") ($(du -h "$dir/server.log" | cut -f1))"
