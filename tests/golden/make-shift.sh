#!/usr/bin/env bash
# Makes tests/golden/ref-shift/<model>.json: llama.cpp's greedy tokens across
# context shifts (shift-cases.json: a context that wraps the sliding ring,
# one that keeps the prompt, a fixed n_discard with many shifts), the way
# its server shifts with --context-shift, through node-llama-cpp 3.22.1
# (llamacpp-shift.mjs says how the erase maps onto llama.cpp's seq_rm and
# seq_add). The models must already be in build/golden (run make-golden.sh
# or the model tier once).
# Needs: node and npm, and once: (cd tests/golden && npm i -E node-llama-cpp@3.22.1),
# then in that copy only libggml-cpu-zen4.so of the libggml-cpu-*.so variants
# (see ../shared/fixtures/README.md).
# usage: make-shift.sh [MODEL_NAME ...]   (default: the models below)
set -euo pipefail
cd "$(dirname "$0")"
root=$(cd ../.. && pwd)
work=${GOLDEN_WORK:-$root/build/golden}
[ -d node_modules/node-llama-cpp ] || { echo "run: (cd tests/golden && npm i -E node-llama-cpp@3.22.1)"; exit 1; }
models=("$@")
[ ${#models[@]} -eq 0 ] && models=(g1-f16 g2-q8_0 g3-q4_k_m)
mkdir -p ref-shift
for name in "${models[@]}"; do
  [ -f "$work/$name.gguf" ] || { echo "no $work/$name.gguf: run make-golden.sh first"; exit 1; }
  node llamacpp-shift.mjs "$work/$name.gguf" shift-cases.json "ref-shift/$name.json"
done
