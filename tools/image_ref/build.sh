#!/usr/bin/env bash
# Builds tools/image_ref/mtmd_preproc_ref.cpp against the mtmd-image.cpp
# and stb_image of a llama.cpp source tree, outside the repository.
#   tools/image_ref/build.sh LLAMA_CPP_SRC [OUT_DIR]
# LLAMA_CPP_SRC: the source node-llama-cpp 3.22.1 bundles
#   (npm i -E node-llama-cpp@3.22.1; git clone
#    node_modules/node-llama-cpp/llama/gitRelease.bundle SRC)
# OUT_DIR defaults to /tmp/mtmd-io-build; prints the binary's path.
set -euo pipefail
src=${1:?usage: build.sh LLAMA_CPP_SRC [OUT_DIR]}
out=${2:-/tmp/mtmd-io-build}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
g++ -std=c++17 -O2 -I"$src/tools/mtmd" -I"$src/ggml/include" -I"$src/include" -I"$src/vendor" \
    -o "$out/mtmd_preproc_ref" "$here/mtmd_preproc_ref.cpp" "$src/tools/mtmd/mtmd-image.cpp"
echo "$out/mtmd_preproc_ref"
