#!/usr/bin/env bash
# Serving memory and a rebuild while serving (#31 item 5): starts the release server at one
# gallery size on a fresh store under /tmp, waits until it serves, runs a few hintless searches,
# then deletes one gallery item through the REST API — which re-embeds the gallery and rebuilds
# the partition and its PIR databases (`AppState::schedule_reembed` → `rebuild_partition`)
# while the old version keeps serving — with a short burst of searches every minute during the
# rebuild, waits until the new version serves, runs a few searches on it, and prints the
# process's own memory (RssAnon) and the kernel's peak resident size (VmHWM) before, during
# (peak) and after the rebuild. RssAnon is sampled every `MEMBENCH_EVERY` seconds (default 1).
# Usage: bash scripts/membench.sh [size]   (default 1000000; ~30 GB of store at 1M, deleted at
# the end). The server runs under `nice -n 10`. Log and samples: /tmp/membench-logs/.
# A rebuild writes a second version's block files (28.5 GB at 1M) before the first one's are
# deleted; MEMBENCH_DROP_OLD_BLOCKS=1 deletes the serving version's level files from disk just
# before the rebuild (its document and checksums stay), for a disk without room for both. The
# searches here are hintless PIR searches, which read no block file, so the memory measured is
# the same; block GETs of the old version would fail meanwhile.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
n=${1:-1000000}
every=${MEMBENCH_EVERY:-1}
# MEMBENCH_BUILD=0: use the binaries as they are.
if [ "${MEMBENCH_BUILD:-1}" != 0 ]; then
  nice -n 10 cargo build --release -q -p privatemail-server --bin server -p privatemail-bench --bin pirbench
fi
logs=/tmp/membench-logs; mkdir -p "$logs"
dir=$(mktemp -d /tmp/membench.XXXXXX)
port=$((19000 + RANDOM % 1000))
base="http://127.0.0.1:$port"
token=membench-$RANDOM$RANDOM
PM_ADMIN_TOKEN=$token nice -n 10 target/release/server --bind "127.0.0.1:$port" \
  --gallery-size "$n" --store "$dir/gallery.redb" > "$logs/server-$n.log" 2>&1 &
pid=$!
sampler=
trap 'kill "$pid" 2>/dev/null || true; [ -z "$sampler" ] || kill "$sampler" 2>/dev/null || true; rm -rf "$dir"' EXIT
samples="$logs/samples-$n.tsv"
phase="$logs/phase-$n"
echo build > "$phase"
# One line per sample: seconds since start, phase, RssAnon kB, VmHWM kB, RssFile kB.
( t0=$(date +%s); echo -e "secs\tphase\trss_anon_kb\tvm_hwm_kb\trss_file_kb"
  while kill -0 "$pid" 2>/dev/null; do
    awk -v t=$(( $(date +%s) - t0 )) -v p="$(cat "$phase")" \
      '/^RssAnon/ {a=$2} /^VmHWM/ {h=$2} /^RssFile/ {f=$2}
       END {if (a != "") printf "%d\t%s\t%d\t%d\t%d\n", t, p, a, h, f}' "/proc/$pid/status" 2>/dev/null || true
    sleep "$every"
  done ) > "$samples" &
sampler=$!
status() { curl -sf "$base/api/v1/status"; }
echo "membench: building the $n-image server (log: $logs/server-$n.log)…"
until status > /dev/null 2>&1; do
  kill -0 "$pid" || { tail -n 20 "$logs/server-$n.log"; exit 1; }
  sleep 5
done
# Wait for the PIR databases too (built before the version is announced, so /status has them
# once the partition is there).
until [ "$(status | jq -r '.pir != null')" = true ]; do sleep 5; done
old=$(status | jq -r .partition.version)
searches() { target/release/pirbench --base "$base" --throughput 1 --seconds "$1" 2>&1 | tail -n 3 || true; }
# VmHWM is the kernel's peak since start or since the last reset (`clear_refs` 5): reset at each
# phase, so each phase's VmHWM is its own.
reset_hwm() { echo 5 > "/proc/$pid/clear_refs" 2>/dev/null || echo "membench: could not reset VmHWM" >&2; }
build_hwm=$(awk '/^VmHWM/ {print $2}' "/proc/$pid/status")
reset_hwm
echo serving > "$phase"
echo "membench: serving version $old; settling 20 s, then searches (30 s)…"
sleep 20
searches 30
sleep "$((every + 1))"
reset_hwm
echo rebuild > "$phase"
if [ "${MEMBENCH_DROP_OLD_BLOCKS:-0}" = 1 ]; then
  echo "membench: deleting version $old's level files from disk ($(du -sh "$dir/gallery.blocks/$old" | cut -f1))"
  find "$dir/gallery.blocks/$old" -mindepth 1 -maxdepth 1 -type d -exec rm -rf {} +
fi
df -h "$dir" | tail -n 1
id=$(curl -sf "$base/api/v1/gallery-map" | jq -r '.ids[0]')
echo "membench: deleting gallery item $id (a rebuild while serving)…"
curl -sf -X DELETE -H "Authorization: Bearer $token" "$base/api/v1/gallery/$id" | jq -c .
t_start=$(date +%s)
# Searches during the rebuild: 10 s of them every 60 s, while it runs.
while :; do
  s=$(status)
  [ "$(jq -r .reembedding <<< "$s")" = false ] && [ "$(jq -r .partition.version <<< "$s")" != "$old" ] && break
  searches 10 > /dev/null
  for _ in $(seq 10); do
    [ "$(status | jq -r .reembedding)" = false ] && break
    sleep 5
  done
done
t_rebuild=$(( $(date +%s) - t_start ))
new=$(status | jq -r .partition.version)
reset_hwm
echo after > "$phase"
df -h "$dir" | tail -n 1
echo "membench: version $new serves after ${t_rebuild} s; settling 20 s, then searches (30 s)…"
sleep 20
searches 30
sleep "$((every + 1))"
echo done > "$phase"
final=$(grep -E "^(VmHWM|VmRSS|RssAnon|RssFile)" "/proc/$pid/status" | tr -s ' \t' ' ' | paste -sd, -)
kill "$pid"; wait "$pid" 2>/dev/null || true
wait "$sampler" 2>/dev/null || true
sampler=
gb() { awk '{printf "%.2f GB", $1 * 1024 / 1e9}'; }
peak() { awk -v p="$1" -v c="$2" -F'\t' '$2 == p && $c > m {m = $c} END {print m + 0}' "$samples"; }
last() { awk -v p="$1" -v c="$2" -F'\t' '$2 == p {v = $c} END {print v + 0}' "$samples"; }
{
  echo "membench: $n images, $(nproc) cores, $(date -u +%F), sampled every ${every} s"
  echo "  build (empty store to serving): peak RssAnon $(peak build 3 | gb), VmHWM $(echo "$build_hwm" | gb)"
  echo "  serving, before the rebuild:    RssAnon $(last serving 3 | gb) (peak $(peak serving 3 | gb)), VmHWM $(last serving 4 | gb)"
  echo "  rebuild while serving (${t_rebuild} s): peak RssAnon $(peak rebuild 3 | gb), VmHWM $(last rebuild 4 | gb)"
  echo "  serving, after the rebuild:     RssAnon $(last after 3 | gb) (peak $(peak after 3 | gb)), VmHWM $(last after 4 | gb)"
  echo "  at exit: $final"
  echo "  samples: $samples"
} | tee "$logs/summary-$n.txt"
