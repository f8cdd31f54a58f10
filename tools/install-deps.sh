#!/usr/bin/env bash
# Installs the Debian 12 packages muser's build and tests need. Run as root.
#   tools/install-deps.sh           install what is missing (apt-get)
#   tools/install-deps.sh --print   install nothing: print the one apt-get line
#                                   for what is missing and exit 1 (0 if nothing is)
set -euo pipefail
pkgs=(build-essential make git pkg-config libcmocka-dev libutf8proc-dev libjansson-dev
      libmicrohttpd-dev libssl-dev libedit-dev libcurl4-openssl-dev clang libclang-rt-14-dev
      python3 python3-jinja2 gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user tmux curl
      chromium openssl libsqlite3-dev libpng-dev libjpeg62-turbo-dev libwebp-dev)
# Not here: Node.js and npm. The tests that use npm packages (the OpenAI SDK,
# puppeteer-core) skip without them; with Debian 12's Node 18 the SDK's
# streaming calls fail (node-fetch: "Premature close", seen in a fresh
# chroot, tests/fresh/debootstrap.sh), so this script does not install it.
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${1:-}" = --print ]; then
  [ ${#missing[@]} -eq 0 ] && exit 0
  echo "missing Debian packages; as root, run:" >&2
  echo "apt-get install -y --no-install-recommends ${missing[*]}"
  exit 1
fi
if [ ${#missing[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
