#!/usr/bin/env bash
# The evaluation table (PrivateMail vs non-private baselines on Fashion-MNIST).
#
#   bash scripts/eval.sh                 # docs/eval/results.csv, privacy-utility.svg, studies
#   bash scripts/eval.sh --blocks        # private block retrieval: docs/eval/blocks.csv,
#                                        # blocks.svg and blocks.md (10,000 and 70,000 galleries,
#                                        # 1,000 held-out queries; about 10 minutes on 2 cores)
#   bash scripts/eval.sh --blocks --blocks-large 0   # the 10,000 gallery only
#   bash scripts/eval.sh --blocks-served 10000,70000,1000000 --blocks-queries 200
#                                        # the plans the server serves at each size, predicted
#                                        # against measured: docs/eval/blocks-served.md (about
#                                        # 20 minutes on 2 cores)
#   bash scripts/eval.sh --photos        # the model on held-out photos (backgrounds, framing,
#                                        # rotation, noise, JPEG, uneven light, shadow, colour,
#                                        # a garment cut by the frame) and the out-of-distribution
#                                        # check: docs/eval/photos.md, photos.csv, photos-ood.csv
#                                        # (about a minute; it prints the OOD thresholds)
#   bash scripts/eval.sh --photos-dev --out /tmp/dev   # the same on the development photos
#                                        # (other images, other draws): tune thresholds here
#   bash scripts/real-images.sh /tmp/real && bash scripts/eval.sh --real-images /tmp/real
#                                        # the familiarity warning on 2,200 real images that are
#                                        # not clothing (icons, emoji, photographs, faces):
#                                        # docs/eval/real-images.md (about 15 seconds)
#
# `--help` lists every flag (the block evaluation's start with `--blocks-`).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$HOME/.cargo/bin:$PATH"
exec cargo run --release -p privatemail-eval --bin eval -- "$@"
