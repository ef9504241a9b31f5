#!/usr/bin/env bash
# Idempotent set-up for a fresh machine: installs only what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
# Each step says what it does and about how long it takes before it starts (long ones run
# for minutes with little output of their own).
step() { echo "setup: $1 (about $2)…" >&2; }

apt_missing=()
[ -f /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz ] || apt_missing+=(dataset-fashion-mnist)
command -v cargo >/dev/null 2>&1 || [ -x "$HOME/.cargo/bin/cargo" ] || apt_missing+=(cargo rustc)
# The tests' tools (PM_SETUP_BROWSER=1, scripts/test.sh): the browser, its driver, and the
# load-balancer test's HAProxy (tests/tests/e2e/scale.rs, deploy/haproxy.cfg).
if [ "${PM_SETUP_BROWSER:-0}" = 1 ]; then
  command -v haproxy >/dev/null 2>&1 || [ -x /usr/sbin/haproxy ] || apt_missing+=(haproxy)
  [ -x /usr/bin/chromium ] || apt_missing+=(chromium)
  [ -x /usr/bin/chromedriver ] || apt_missing+=(chromium-driver)
fi
if [ ${#apt_missing[@]} -gt 0 ]; then
  step "installing ${apt_missing[*]} with apt" "1–3 minutes"
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq "${apt_missing[@]}"
fi

export PATH="$HOME/.cargo/bin:$PATH"
if command -v rustup >/dev/null 2>&1; then
  rustup target list --installed | grep -qx wasm32-unknown-unknown \
    || { step "adding the wasm32 target to Rust" "1 minute"; rustup target add wasm32-unknown-unknown; }
fi

# The browser tests need the wasm tools too.
[ "${PM_SETUP_BROWSER:-0}" = 1 ] && PM_SETUP_WASM=1
if [ "${PM_SETUP_WASM:-0}" = 1 ]; then
  # wasm-bindgen-cli must match the wasm-bindgen version in Cargo.lock exactly.
  want=$(awk '/^name = "wasm-bindgen"$/{getline; gsub(/version = |"/, ""); print; exit}' Cargo.lock)
  have=$(wasm-bindgen --version 2>/dev/null | awk '{print $2}' || true)
  [ "$have" = "$want" ] || { step "compiling wasm-bindgen-cli $want" "3–5 minutes"; cargo install -q wasm-bindgen-cli --version "$want"; }
  command -v wasm-pack >/dev/null 2>&1 || { step "compiling wasm-pack" "3–5 minutes"; cargo install -q wasm-pack; }
fi

# The tests' S3-compatible server: the object-storage test (tests/tests/e2e/object_store.rs)
# and the replicas' version switch from a bucket (tests/tests/e2e/scale.rs). scripts/test.sh
# asks for it with the browser tools; running the server does not need it.
if [ "${PM_SETUP_BROWSER:-0}" = 1 ]; then
  have=$(cargo install --list 2>/dev/null | awk '/^s3s-fs v/{gsub(/v|:/, "", $2); print $2}')
  [ "$have" = "0.14.1" ] || { step "compiling s3s-fs 0.14.1 (the object-storage test's server)" "3 minutes"; cargo install -q s3s-fs --version 0.14.1 --features binary; }
fi
