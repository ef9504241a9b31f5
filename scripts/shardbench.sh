#!/usr/bin/env bash
# Row shards against one process (issue #62 point 3): builds an n-image gallery once with the
# release server, then serves it from one process and from S row shards (`--shard-rows i/S`,
# each a copy of the built store) behind `server front` (with the one process as its
# `--public` whole replica), runs `pirbench` against both, and
# reports: the PIR searches' top 8 compared photo by photo (`--top-out`), bytes a search and
# server core-ms (summed over the shards) from pirbench's CSV, and each process's resident
# memory (VmRSS, RssAnon, RssFile) after its searches.
# Usage: bash scripts/shardbench.sh [n [S [queries]]]   (default: 100000 4 200)
# SHARDBENCH_PROFILE=dev: the `dev` profile's binaries (target/debug, optimized) instead of
# the release ones.
# Processes start one after another (each derives its PIR databases), so the machine holds
# one build at a time; the front's whole replica (`--public`) is the one store served again.
# SHARDBENCH_STORE=DIR: start from a copy of DIR (a store this script built before, its
# `one/`) instead of building the gallery. Output: /tmp/shardbench-$n/ (logs, CSVs, tops,
# memory) and a summary.
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-100000}; S=${2:-4}; queries=${3:-200}
export PATH="$HOME/.cargo/bin:$PATH"
profile=${SHARDBENCH_PROFILE:-release}
bin=target/release; [ "$profile" = release ] || bin=target/debug
if [ "$profile" = release ]; then
  # The two binaries only: no test tree to reuse. (At 1,000,000 images the dev profile's
  # debug assertions made the gallery's features about 7× slower.)
  cargo build --release -q -p privatemail-server --bin server -p privatemail-bench --bin pirbench
else
  # With the packages `cargo test --workspace` selects, so that a tree built by the tests is
  # reused (`-p` alone resolves other features and compiles most of the graph again).
  cargo build --profile "$profile" -q --workspace --tests --bin server --bin pirbench
fi
out=/tmp/shardbench-$n; rm -rf "$out"; mkdir -p "$out"
pids=()
# copy_store SRC DST: a copy of a built store whose block objects are hard links (they are
# immutable, written once under their names; at 1,000,000 images they are 23 GB a copy);
# everything else, the gallery database included, is copied.
copy_store() {
  mkdir -p "$2"
  for f in "$1"/* "$1"/.[!.]*; do
    [ -e "$f" ] || continue
    if [ "$(basename "$f")" = gallery.blocks ]; then cp -al "$f" "$2/"; else cp -a "$f" "$2/"; fi
  done
}
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done' EXIT

# start NAME ARGS…: a server in the background, its log in $out/NAME.log; waits until it
# listens and its PIR databases are built (`/status` shows them: a shard serves no PIR
# document); sets $port.
start() {
  local name=$1; shift
  port=$((19000 + RANDOM % 1000))
  "$bin"/server "$@" --bind "127.0.0.1:$port" > "$out/$name.log" 2>&1 &
  pids+=($!); eval "pid_$name=$!"
  until curl -sf "http://127.0.0.1:$port/api/v1/status" | grep -q '"database_bytes"'; do
    kill -0 "${pids[-1]}" || { tail -20 "$out/$name.log"; exit 1; }
    sleep 5
  done
  echo "shardbench: $name ready on :$port ($(date -u +%T))"
}
mem() { awk '/VmRSS|RssAnon|RssFile|VmHWM/ {printf "%s %s kB  ", $1, $2} END {print ""}' "/proc/$1/status"; }

# One process (it builds the gallery, the partition and its PIR databases, or serves a copy
# of SHARDBENCH_STORE).
if [ -n "${SHARDBENCH_STORE:-}" ]; then copy_store "$SHARDBENCH_STORE" "$out/one"; fi
mkdir -p "$out/one"
start one --gallery-size "$n" --store "$out/one/gallery.redb" --pir-concurrency 8
one_port=$port
"$bin"/pirbench --base "http://127.0.0.1:$one_port" --queries "$queries" --epsilons 8 \
  --header --top-out "$out/one.tops" > "$out/one.csv"
echo "one $(mem "$pid_one")" > "$out/memory.txt"
kill "$pid_one"; wait "$pid_one" 2>/dev/null || true

# S shards, each from a copy of the built store (the same version, announced beside it).
shard_urls=()
for i in $(seq 0 $((S - 1))); do
  copy_store "$out/one" "$out/shard$i"
  start "shard$i" --gallery-size "$n" --store "$out/shard$i/gallery.redb" --shard-rows "$i/$S" \
    --pir-concurrency 8
  shard_urls+=("http://127.0.0.1:$port")
done
urls=$(IFS=,; echo "${shard_urls[*]}")
# The front's whole replica (`--public`: everything but the answers), on the one store again.
start public --gallery-size "$n" --store "$out/one/gallery.redb" --pir-concurrency 8
public_port=$port
fport=$((20000 + RANDOM % 1000))
"$bin"/server front --bind "127.0.0.1:$fport" --shards "$urls" \
  --public "http://127.0.0.1:$public_port" > "$out/front.log" 2>&1 &
pids+=($!); pid_front=$!
until curl -sf "http://127.0.0.1:$fport/api/v1/pir" > /dev/null; do sleep 1; done
"$bin"/pirbench --base "http://127.0.0.1:$fport" --status-base "$urls" --queries "$queries" \
  --epsilons 8 --header --top-out "$out/front.tops" > "$out/front.csv"
for i in $(seq 0 $((S - 1))); do
  p=pid_shard$i; echo "shard$i $(mem "${!p}")" >> "$out/memory.txt"
done
echo "front $(mem "$pid_front")" >> "$out/memory.txt"
echo "public $(mem "$pid_public")" >> "$out/memory.txt"

echo "== $n images, $S shards, $queries held-out photos, $(date -u +%F), commit $(git rev-parse --short HEAD), $(nproc) cores, profile $profile"
if cmp -s "$out/one.tops" "$out/front.tops"; then
  echo "top 8: identical for all $(wc -l < "$out/one.tops") PIR searches"
else
  echo "top 8: DIFFERENT:"; diff "$out/one.tops" "$out/front.tops" | head
fi
echo "-- one process"; grep -E '^[0-9]+,pir' "$out/one.csv"
echo "-- front over $S shards (server core-ms summed over the shards)"; grep -E '^[0-9]+,pir' "$out/front.csv"
echo "-- memory after the searches"; cat "$out/memory.txt"
