#!/usr/bin/env bash
# Installs the Debian packages spry builds and tests with. Idempotent: when every
# package is already present it does nothing (no apt-get update, no network).
set -euo pipefail

packages=(
  build-essential cmake pkg-config
  libdnnl-dev libopenblas-dev
  libturbojpeg0-dev libjpeg-dev libpng-dev
  libavformat-dev libavcodec-dev libswscale-dev libavutil-dev
  libopenmpi-dev openmpi-bin
  libyaml-dev libcairo2-dev libcmocka-dev
  libdlib-dev
)
# `deps.sh fuzz` (make fuzz): clang and its libFuzzer runtime as well.
if [ "${1:-}" = fuzz ]; then packages+=(clang libclang-rt-dev); fi
# `deps.sh format` (make format, make format-check): clang-format.
if [ "${1:-}" = format ]; then packages+=(clang-format); fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "deps.sh: installing ${missing[*]}" >&2
sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
