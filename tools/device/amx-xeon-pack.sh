#!/usr/bin/env bash
# amx-xeon-pack.sh: builds, on the CPU machine, what tools/device/amx-xeon.sh
# runs on the GPU machine's Xeon (AMX-INT8), and puts it in .gpu/amx/
# (ignored by git; the device tool carries it; nothing else of .gpu/ is
# touched or needed):
#   .gpu/amx/muser, test_kern, kernbench, membw   stripped binaries
#   .gpu/amx/lib/                 the shared libraries the binaries link, but
#                             glibc's (the GPU machine lacks several)
#   .gpu/amx/fixtures/            the shared fixture whose matrices the AMX gemms
#                             take (t3-q4_k_m: Q4_K and Q6_K), when ../shared
#                             has it
#   .gpu/amx/llama-min.tar.xz     with --llamacpp SRC: the part of a llama.cpp
#                             source tree llama-bench needs (for
#                             amx-xeon.sh --llamacpp)
# usage: tools/device/amx-xeon-pack.sh [--llamacpp SRC_DIR]
#   SRC_DIR e.g. /tmp/lcsrc, a clone of node-llama-cpp 3.22.1's
#   llama/gitRelease.bundle. It also writes .gpu/amx.tar.xz (the folder,
#   about 14 MB: the carry limit is 64 MiB with the tree); on the device,
#   carrying .gpu/amx.tar.xz:
#   tar -xJf .gpu/amx.tar.xz -C .gpu && bash tools/device/amx-xeon.sh [--llamacpp]
set -euo pipefail
cd "$(dirname "$0")/../.."
lsrc=
while [ $# -gt 0 ]; do
  case $1 in
    --llamacpp) lsrc=${2:?--llamacpp needs a source directory}; shift 2 ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) echo "amx-xeon-pack: unknown argument: $1" >&2; exit 2 ;;
  esac
done
make -s -j2 muser build/tests/test_kern
bash bench/build.sh >/dev/null
D=.gpu/amx
rm -rf "$D"
mkdir -p "$D/lib"
for b in muser build/tests/test_kern build/bench/kernbench build/bench/membw; do
  cp "$b" "$D/" && strip "$D/$(basename "$b")"
done
tools/device/libs.sh "$D/lib" muser build/tests/test_kern
fx=../shared/fixtures
if [ -f "$fx/t3-q4_k_m.gguf" ]; then
  mkdir -p "$D/fixtures"
  cp "$fx/t3-q4_k_m.gguf" "$fx/t3-q4_k_m.ref.json" "$D/fixtures/"
else
  echo "amx-xeon-pack: no $fx/t3-q4_k_m.gguf: the device run skips the shared fixture" >&2
fi
if [ -n "$lsrc" ]; then
  [ -f "$lsrc/CMakeLists.txt" ] || { echo "amx-xeon-pack: no llama.cpp source tree: $lsrc" >&2; exit 1; }
  out=$PWD/$D/llama-min.tar.xz
  (cd "$lsrc" && tar -cJf "$out" \
    --exclude=ggml/src/ggml-vulkan --exclude=ggml/src/ggml-sycl --exclude=ggml/src/ggml-metal \
    --exclude=ggml/src/ggml-cann --exclude=ggml/src/ggml-opencl --exclude=ggml/src/ggml-musa \
    --exclude=ggml/src/ggml-hip --exclude=ggml/src/ggml-webgpu --exclude=ggml/src/ggml-zdnn \
    --exclude=ggml/src/ggml-cuda \
    CMakeLists.txt cmake ggml src include common vendor tools/llama-bench tools/CMakeLists.txt)
fi
tar -cJf .gpu/amx.tar.xz -C .gpu amx
du -sh "$D" .gpu/amx.tar.xz
echo "carry: .gpu/amx.tar.xz   run there: tar -xJf .gpu/amx.tar.xz -C .gpu && bash tools/device/amx-xeon.sh${lsrc:+ --llamacpp}"
