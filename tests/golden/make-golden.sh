#!/usr/bin/env bash
# Makes the golden answers in tests/golden/ref/: for every model of
# models.txt, generate it with `muser gen`, record its SHA-256, and ask
# llama.cpp (node-llama-cpp 3.22.1) for greedy continuations and top-8
# probabilities on the prompts of make-spec.py.
# Needs: ./muser built, node and npm, and once: (cd tests/golden && npm i -E node-llama-cpp@3.22.1)
# usage: make-golden.sh [MODEL_NAME ...]   (default: every model of models.txt)
set -euo pipefail
cd "$(dirname "$0")"
root=$(cd ../.. && pwd)
work=${GOLDEN_WORK:-$root/build/golden}
mkdir -p "$work" ref
[ -d node_modules/node-llama-cpp ] || { echo "run: (cd tests/golden && npm i -E node-llama-cpp@3.22.1)"; exit 1; }
grep -v '^#' models.txt | while read -r name opts; do
  [ -n "$name" ] || continue
  if [ $# -gt 0 ] && ! printf '%s\n' "$@" | grep -qx "$name"; then continue; fi
  # shellcheck disable=SC2086
  "$root/muser" gen -o "$work/$name.gguf" $opts --name "$name" >/dev/null
  sha=$(sha256sum "$work/$name.gguf" | cut -d' ' -f1)
  vocab=$("$root/muser" info -m "$work/$name.gguf" | awk '/^vocab/ {print $2}')
  bos=$("$root/muser" info -m "$work/$name.gguf" | awk '/^tokens/ {print $3}')
  python3 make-spec.py "$vocab" "$bos" > "$work/$name.spec.json"
  node llamacpp-answers.mjs "$work/$name.gguf" "$work/$name.spec.json" "ref/$name.json"
  echo "$sha  $name.gguf" > "ref/$name.sha256"
done
