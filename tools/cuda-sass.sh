#!/usr/bin/env bash
# cuda-sass.sh: the sm_90a SASS of one CUDA source file, on a machine without
# a GPU or CUDA's own disassembler (the nvcc package here has none):
#   bash tools/cuda-sass.sh src/gpu/gpu_cuda_mm.cu > mm.sass
# nvcc compiles the file to a cubin as the Makefile does (-O3 -fmad=false,
# sm_90a; errors, warnings and ptxas's register and spill lines go to stderr); Debian's
# nvidia-cuda-toolkit 11.8 (non-free) supplies nvdisasm, fetched once with
# `apt-get download` and unpacked under /tmp (not installed). nvdisasm 11.8
# reads sm_90 code but not the ELF header CUDA 13 writes (ABI version 8), so
# the copy it reads says ABI 7 and EF_CUDA_SM90 in the old layout: the
# instructions are the cubin's own. For counting and reading instructions
# (a loop's length, what the compiler recomputes), not for timing.
set -euo pipefail
src=${1:?usage: tools/cuda-sass.sh FILE.cu}
cd "$(dirname "$0")/.."
D=/tmp/muser-nvdisasm
if [ ! -x $D/usr/bin/nvdisasm ]; then
  pol=$(apt-cache policy nvidia-cuda-toolkit 2>/dev/null || true)
  if ! grep -q 'Candidate: [0-9]' <<<"$pol"; then
    echo "cuda-sass: no nvidia-cuda-toolkit package: add the non-free component to apt's sources" >&2
    echo "  (Components: main contrib non-free in /etc/apt/sources.list.d/debian.sources), apt-get update" >&2
    exit 1
  fi
  mkdir -p $D && (cd $D && apt-get download -q nvidia-cuda-toolkit >/dev/null 2>&1 && dpkg -x nvidia-cuda-toolkit_*.deb .)
fi
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
"$NVCC" -O3 -std=c++17 -fmad=false -Iinclude -Isrc -cubin -gencode=arch=compute_90a,code=sm_90a -Xptxas -v \
  -o "$T/x.cubin" "$src" 2> >(grep -v '^ptxas info *: Function properties' >&2 || true)
python3 - "$T/x.cubin" <<'PY'
import struct, sys
d = bytearray(open(sys.argv[1], 'rb').read())
d[8] = 7                                   # EI_ABIVERSION
struct.pack_into('<I', d, 0x30, 0x005a055a) # e_flags: SM90, virtual SM90, old layout
open(sys.argv[1], 'wb').write(d)
PY
$D/usr/bin/nvdisasm -c "$T/x.cubin"
