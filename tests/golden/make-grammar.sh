#!/usr/bin/env bash
# Makes tests/golden/ref-grammar/<model>.json: llama.cpp's greedy tokens
# under the GBNF grammars and JSON-schema grammars of grammar-cases.json on
# golden models, through node-llama-cpp 3.22.1 (llamacpp-grammar.mjs). The
# models must already be in build/golden (run make-golden.sh or the model
# tier once).
# Needs: node and npm, and once: (cd tests/golden && npm i -E node-llama-cpp@3.22.1),
# then in that copy only libggml-cpu-zen4.so of the libggml-cpu-*.so variants
# (the answers are made with that one; see ../shared/fixtures/README.md).
# usage: make-grammar.sh [MODEL_NAME ...]   (default: the models below)
set -euo pipefail
cd "$(dirname "$0")"
root=$(cd ../.. && pwd)
work=${GOLDEN_WORK:-$root/build/golden}
[ -d node_modules/node-llama-cpp ] || { echo "run: (cd tests/golden && npm i -E node-llama-cpp@3.22.1)"; exit 1; }
models=("$@")
[ ${#models[@]} -eq 0 ] && models=(g1-f16 g3-q4_k_m)
mkdir -p ref-grammar
for name in "${models[@]}"; do
  [ -f "$work/$name.gguf" ] || { echo "no $work/$name.gguf: run make-golden.sh first"; exit 1; }
  node llamacpp-grammar.mjs "$work/$name.gguf" grammar-cases.json "ref-grammar/$name.json"
done
