#!/usr/bin/env bash
# Makes tests/golden/ref-sampler/<model>.json: llama.cpp's tokens with the
# sampler chain's stages on (sampler-cases.json: penalties, DRY, logit bias,
# XTC, seeded draws) on golden models, through node-llama-cpp 3.22.1
# (llamacpp-sampler.mjs). The models must already be in build/golden (run
# make-golden.sh or the model tier once).
# Needs: node and npm, and once: (cd tests/golden && npm i -E node-llama-cpp@3.22.1),
# then in that copy only libggml-cpu-zen4.so of the libggml-cpu-*.so variants
# (the answers are made with that one; see ../shared/fixtures/README.md).
# usage: make-sampler.sh [MODEL_NAME ...]   (default: the models below)
set -euo pipefail
cd "$(dirname "$0")"
root=$(cd ../.. && pwd)
work=${GOLDEN_WORK:-$root/build/golden}
[ -d node_modules/node-llama-cpp ] || { echo "run: (cd tests/golden && npm i -E node-llama-cpp@3.22.1)"; exit 1; }
models=("$@")
[ ${#models[@]} -eq 0 ] && models=(g1-f16 g7-f32 g3-q4_k_m g6-bf16)
mkdir -p ref-sampler
for name in "${models[@]}"; do
  [ -f "$work/$name.gguf" ] || { echo "no $work/$name.gguf: run make-golden.sh first"; exit 1; }
  node llamacpp-sampler.mjs "$work/$name.gguf" sampler-cases.json "ref-sampler/$name.json"
done
