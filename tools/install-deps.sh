#!/usr/bin/env bash
# Installs the Debian 12 packages muser's build and tests need. Run as root.
set -euo pipefail
pkgs=(build-essential make git pkg-config libcmocka-dev libutf8proc-dev libjansson-dev
      libmicrohttpd-dev libssl-dev libedit-dev clang libclang-rt-14-dev python3 python3-jinja2
      gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user tmux curl)
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
