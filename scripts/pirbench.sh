#!/usr/bin/env bash
# PIR, DP blocks and the whole gallery side by side (docs/eval/pir.csv): starts the release
# server at each gallery size on a temporary store, runs `pirbench` against it, stops it.
# Usage: bash scripts/pirbench.sh [size[:queries]…]   (default: 10000 70000 1000000:300)
# Each server's log is kept in /tmp/pirbench-logs/ with its peak RSS (VmHWM) at the end.
# PIRBENCH_THROUGHPUT_AT=n (e.g. 1000000): at that size, also the throughput of whole
# hintless searches with 1, 2, 4 and 8 concurrent clients (PIRBENCH_CLIENTS), 60 s each, into
# docs/eval/pir-throughput.txt (clients and server share this machine's cores).
# PIRBENCH_AHEAD=1: the throughput's clients prepare each search's photo-independent parts
# before the timed window (enough for 8 searches/s), as the page does before a photo is chosen;
# the window then holds only the photo-dependent client work besides the server's.
# PIRBENCH_PAGE_AT=n: at that size, also the page's PIR search in headless Chromium
# (`pagebench --protocol pir`, 11 searches) into docs/eval/pir-page.txt.
# PIRBENCH_EXTRAS_ONLY=1: only those two (pir.csv is left as it is).
set -euo pipefail
cd "$(dirname "$0")/.."
PM_SETUP_WASM=0 bash scripts/setup.sh
export PATH="$HOME/.cargo/bin:$PATH"
cargo build --release -q -p privatemail-server --bin server -p privatemail-bench --bin pirbench
if [ -n "${PIRBENCH_PAGE_AT:-}" ]; then
  PM_SETUP_BROWSER=1 bash scripts/setup.sh
  bash scripts/build-web.sh
  cargo build --release -q -p privatemail-bench --bin pagebench
fi
sizes=("$@"); [ ${#sizes[@]} -gt 0 ] || sizes=(10000 70000 1000000:300)
logs=/tmp/pirbench-logs; mkdir -p "$logs"
out=docs/eval/pir.csv
header=--header
: > "$out.tmp"
for spec in "${sizes[@]}"; do
  n=${spec%%:*}; queries=200; [ "$spec" = "$n" ] || queries=${spec#*:}
  dir=$(mktemp -d)
  port=$((18000 + RANDOM % 1000))
  target/release/server --bind "127.0.0.1:$port" --gallery-size "$n" --store "$dir/gallery.redb" \
    > "$dir/server.log" 2>&1 &
  pid=$!
  # A failed run (e.g. a full disk) must not leave the server or its store behind.
  trap 'kill "$pid" 2>/dev/null || true; rm -rf "$dir"' EXIT
  # Peak resident memory: VmHWM counts mapped block files (page cache the kernel can reclaim);
  # the process's own memory is RssAnon, sampled every 2 s for its peak.
  ( peak=0; while kill -0 "$pid" 2>/dev/null; do
      a=$(awk '/RssAnon/ {print $2}' "/proc/$pid/status" 2>/dev/null || echo 0)
      [ "${a:-0}" -gt "$peak" ] && peak=$a && echo "peak RssAnon: $peak kB" > "$logs/server-$n.mem.tmp" \
        && mv "$logs/server-$n.mem.tmp" "$logs/server-$n.anon"
      sleep 2
    done ) &
  echo "pirbench: building the $n-image server (log: $dir/server.log)…"
  until grep -q "listening on" "$dir/server.log"; do
    kill -0 "$pid" || { cat "$dir/server.log"; exit 1; }
    sleep 5; tail -n 1 "$dir/server.log" | cut -c1-160
  done
  if [ "${PIRBENCH_EXTRAS_ONLY:-0}" != 1 ]; then
    target/release/pirbench --base "http://127.0.0.1:$port" --queries "$queries" $header >> "$out.tmp"
    header=
  fi
  if [ "${PIRBENCH_THROUGHPUT_AT:-}" = "$n" ]; then
    tp=docs/eval/pir-throughput.txt
    echo "# $(date -u +%F), $(nproc) cores, clients (each its own loopback address) and server on the same machine" > "$tp.tmp"
    for c in ${PIRBENCH_CLIENTS:-1 2 4 8}; do
      echo "pirbench: throughput with $c clients (60 s)…"
      ahead=0; [ "${PIRBENCH_AHEAD:-0}" = 1 ] && ahead=$((8 * 60 / c + 4))
      # The server process's own CPU time over the run (user + system, from /proc), per search:
      # what two cores of server alone would divide, were the clients elsewhere.
      cpu0=$(awk '{print $14 + $15}' "/proc/$pid/stat")
      line=$(target/release/pirbench --base "http://127.0.0.1:$port" --throughput "$c" \
        --seconds 60 --ahead "$ahead")
      cpu1=$(awk '{print $14 + $15}' "/proc/$pid/stat")
      n_done=$(echo "$line" | grep -o ': [0-9]* searches' | grep -o '[0-9]*')
      echo "$line; server process CPU $(awk -v a="$cpu0" -v b="$cpu1" -v n="$n_done" \
        -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.0f", (b - a) / hz * 1000 / (n > 0 ? n : 1) }') ms per search" \
        >> "$tp.tmp"
    done
    mv "$tp.tmp" "$tp"
  fi
  if [ "${PIRBENCH_PAGE_AT:-}" = "$n" ]; then
    echo "pirbench: the page's PIR search in headless Chromium…"
    { echo "# $(date -u +%F), $(nproc) cores, $n images, page and server on the same machine"
      target/release/pagebench --base "http://127.0.0.1:$port" --gallery-size "$n" --protocol pir --budget 4194304 --searches 11; } \
      > docs/eval/pir-page.txt.tmp
    mv docs/eval/pir-page.txt.tmp docs/eval/pir-page.txt
  fi
  { grep -E "VmHWM|VmRSS|RssAnon|RssFile" "/proc/$pid/status"; cat "$logs/server-$n.anon"; du -sh "$dir"; } \
    > "$logs/server-$n.mem" || true
  kill "$pid"; wait "$pid" || true
  cp "$dir/server.log" "$logs/server-$n.log"
  rm -rf "$dir"
  trap - EXIT
done
if [ "${PIRBENCH_EXTRAS_ONLY:-0}" != 1 ]; then
  mv "$out.tmp" "$out"
  echo "pirbench: wrote $out"
else
  rm -f "$out.tmp"
fi
