#!/usr/bin/env bash
# `make demo`: a short tour of what works today. The keypoint issue replaces this
# with "train a small keypoint model, evaluate it, leave a report".
set -euo pipefail
cd "$(dirname "$0")/.."
echo "== spry demo: one training step of the seed's VGG (vgg-face, 224x224 gray, batch 8) on the reference backend"
build/spry bench train --model vgg-face --backend ref --batch 8 --steps 2 --profile
echo "== training a keypoint model end to end (spry train) arrives with the keypoint issue"
