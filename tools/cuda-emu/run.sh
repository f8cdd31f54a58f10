#!/usr/bin/env bash
# run.sh: builds and runs q8dec.cpp (see there) from the repository root:
# bash tools/cuda-emu/run.sh (needs build/libmuser.a: make first)
set -euo pipefail
cd "$(dirname "$0")/../.."
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
python3 - "$T/dev.inc" <<'PY'
import sys
src = open('src/gpu/gpu_cuda_mm.cu').read()
out = []
for start in ('__device__ __forceinline__ void fp4_codes(', '__device__ __forceinline__ int fp4_fix(',
              '__device__ __forceinline__ float nvfp4_scale_rot(', 'template <int TYPE> __device__ __forceinline__ int q8d_perm('):
    i = src.find(start)
    if i < 0: sys.exit('run.sh: %s not found in gpu_cuda_mm.cu' % start)
    out.append(src[i:src.index('\n}\n', i) + 3])
open(sys.argv[1], 'w').write('\n'.join(out))
PY
g++ -O1 -std=c++17 -ffp-contract=off -Isrc -DDEV_INC="\"$T/dev.inc\"" -o "$T/q8dec" tools/cuda-emu/q8dec.cpp build/libmuser.a -lm -lpthread
"$T/q8dec"
