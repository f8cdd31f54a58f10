#!/usr/bin/env bash
# cuda-h200-pack.sh: builds, on the CPU machine, what tools/device/cuda-h200.sh
# runs on the GPU machine, and packs it into .gpu/cuda.tar.xz (ignored by
# git; carry that one file, the carry limit is 64 MiB with the tree):
#   .gpu/muser, .gpu/muser-cuda.so   muser (stripped) and the CUDA plugin built
#                                    for sm_90a alone (build/h200)
#   .gpu/test_gpu_kern, test_gpu_engine, test_gpu_stream, test_gpu_vision,
#   test_gpu_draft
#                                    the gpu tier's programs
#   .gpu/gpukernbench                one matmul timed on the device (bench/gpukernbench.c;
#                                    MUSER_CUDA_PLUGIN=$PWD/.gpu/muser-cuda.so)
#   .gpu/lib/                        the shared libraries they link, but glibc's
#                                    (the GPU machine has no -dev packages)
#   .gpu/llama-cuda.tar.xz           with --llamacpp SRC: the part of a llama.cpp
#                                    tree llama-bench and libmtmd need, ggml-cuda
#                                    included (for cuda-h200.sh --compare and
#                                    cuda-vision-mtmd.sh)
# Unpacked at the repository root it gives the .gpu/ that bench/lane-h200.sh
# expects too.
# usage: tools/device/cuda-h200-pack.sh [--llamacpp SRC_DIR]
#   SRC_DIR: a clone of node-llama-cpp 3.22.1's llama/gitRelease.bundle
#   (../shared/reference/gpu-machine.md). Then, carrying .gpu/cuda.tar.xz:
#   tar -xJf .gpu/cuda.tar.xz && bash tools/device/cuda-h200.sh [options]
set -euo pipefail
cd "$(dirname "$0")/../.."
lsrc=
while [ $# -gt 0 ]; do
  case $1 in
    --llamacpp) lsrc=${2:?--llamacpp needs a source directory}; shift 2 ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) echo "cuda-h200-pack: unknown argument: $1" >&2; exit 2 ;;
  esac
done
arch="-gencode=arch=compute_90a,code=sm_90a"
make -s -j2 muser build/tests/gpu/test_gpu_kern build/tests/gpu/test_gpu_engine build/tests/gpu/test_gpu_stream \
  build/tests/gpu/test_gpu_vision build/tests/gpu/test_gpu_draft
make -s -j2 BUILD=build/h200 build/h200/muser-cuda.so CUDA_ARCH="$arch"
BUILD=build bash bench/build.sh
S=$(mktemp -d)
trap 'rm -rf "$S"' EXIT
G=$S/.gpu
mkdir -p "$G/lib"
cp muser build/tests/gpu/test_gpu_kern build/tests/gpu/test_gpu_engine build/tests/gpu/test_gpu_stream \
  build/tests/gpu/test_gpu_vision build/tests/gpu/test_gpu_draft build/bench/gpukernbench "$G/"
strip "$G/muser" "$G/test_gpu_kern" "$G/test_gpu_engine" "$G/test_gpu_stream" "$G/test_gpu_vision" "$G/test_gpu_draft" \
  "$G/gpukernbench"
cp build/h200/muser-cuda.so "$G/"
tools/device/libs.sh "$G/lib" muser build/tests/gpu/test_gpu_kern build/tests/gpu/test_gpu_vision
if [ -n "$lsrc" ]; then
  [ -f "$lsrc/CMakeLists.txt" ] || { echo "cuda-h200-pack: no llama.cpp source tree: $lsrc" >&2; exit 1; }
  (cd "$lsrc" && tar -cJf "$G/llama-cuda.tar.xz" \
    --exclude=ggml/src/ggml-vulkan --exclude=ggml/src/ggml-sycl --exclude=ggml/src/ggml-metal \
    --exclude=ggml/src/ggml-cann --exclude=ggml/src/ggml-opencl --exclude=ggml/src/ggml-musa \
    --exclude=ggml/src/ggml-hip --exclude=ggml/src/ggml-webgpu --exclude=ggml/src/ggml-zdnn \
    --exclude='tools/mtmd/test-*' --exclude=tools/mtmd/tests --exclude=tools/mtmd/legacy-models \
    CMakeLists.txt cmake ggml src include common vendor tools/llama-bench tools/mtmd tools/CMakeLists.txt)
fi
mkdir -p .gpu
tar -cJf .gpu/cuda.tar.xz -C "$S" .gpu
ls -la .gpu/cuda.tar.xz
echo "carry: .gpu/cuda.tar.xz   run there: tar -xJf .gpu/cuda.tar.xz && bash tools/device/cuda-h200.sh${lsrc:+ --compare}"
