#!/usr/bin/env bash
# run.sh: builds and runs q8dec.cpp (see there) from the repository root:
# bash tools/cuda-emu/run.sh (needs build/libmuser.a: make first)
set -euo pipefail
cd "$(dirname "$0")/../.."
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
python3 - "$T/dev.inc" <<'PY'
import sys
# (file, the start of a definition): each is copied up to its closing "\n}\n" (a #define: its line)
want = [('src/gpu/mm.cuh', '#define MAGIC_I'), ('src/gpu/mm.cuh', '#define MAGIC_F'),
        ('src/gpu/mm.cuh', '__device__ __forceinline__ float magic_x('),
        ('src/gpu/mm.cuh', '__device__ __forceinline__ void fp4_mags('),
        ('src/gpu/mm.cuh', '__device__ __forceinline__ unsigned is_m128('),
        ('src/gpu/mm.cuh', '__device__ __forceinline__ int fp4_fix_neg('),
        ('src/gpu/gpu_cuda_mm.cu', '__device__ __forceinline__ float nvfp4_scale_rot('),
        ('src/gpu/gpu_cuda_mm.cu', 'template <int TYPE> __device__ __forceinline__ int q8d_perm('),
        ('src/gpu/gpu_cuda_mm.cu', 'template <int TYPE, int TM>\n__device__ __forceinline__ void q8d_block('),
        ('src/gpu/gpu_cuda.cu', 'static void nvfp4_dev_block(')]
out = []
for path, start in want:
    src = open(path).read()
    i = src.find(start)
    if i < 0: sys.exit('run.sh: %r not found in %s' % (start, path))
    out.append(src[i:src.index('\n', i) + 1] if start.startswith('#define') else src[i:src.index('\n}\n', i) + 3])
open(sys.argv[1], 'w').write('\n'.join(out))
PY
g++ -O1 -std=c++17 -ffp-contract=off -Wno-unknown-pragmas -Isrc -DDEV_INC="\"$T/dev.inc\"" -o "$T/q8dec" tools/cuda-emu/q8dec.cpp build/libmuser.a -lm -lpthread
"$T/q8dec"
