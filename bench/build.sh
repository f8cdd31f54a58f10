#!/usr/bin/env bash
# Builds the benchmark helpers (not part of `make`): membw (memory read
# bandwidth, bench/membw.c), on x86-64 corebench (the int8 multiply-add rate
# the cores reach alone and together, bench/corebench.c), kernbench (kernel throughput against that
# bandwidth, bench/kernbench.c) and verifybench (the cost of a speculative
# verification block, bench/verifybench.c), draftacc (a DFlash drafter's
# drafts at every position of a sequence, bench/draftacc.c), kvbench (KV pack writes,
# restores and the prefix cache, bench/kvbench.c) and, on x86-64, attnbench (the
# AVX-512 attention kernels at long depth, bench/attnbench.c; ATTN_SRC=file builds
# it from another version of src/kern/attn_avx512.c) and gpukernbench (one GPU
# matmul timed on the device through the CUDA plugin, bench/gpukernbench.c), into
# $BUILD/bench (default build/bench).
set -eu
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
mkdir -p "$BUILD/bench"
gcc -std=c11 -O2 -g -Wall -Wextra -D_GNU_SOURCE -pthread -mavx2 -o "$BUILD/bench/membw" bench/membw.c
if [ "$(uname -m)" = x86_64 ]; then
  gcc -std=c11 -O2 -g -Wall -Wextra -D_GNU_SOURCE -pthread -o "$BUILD/bench/corebench" bench/corebench.c
fi
if [ -f bench/kernbench.c ]; then
  make -s BUILD="$BUILD" "$BUILD/libmuser.a"
  gcc -std=c11 -O2 -g -Wall -Wextra -D_GNU_SOURCE -pthread -o "$BUILD/bench/kernbench" bench/kernbench.c \
    "$BUILD/libmuser.a" -lm
fi
if [ -f bench/verifybench.c ]; then
  make -s BUILD="$BUILD" "$BUILD/libmuser.a"
  gcc -std=c11 -O2 -g -Wall -Wextra -D_GNU_SOURCE -pthread -o "$BUILD/bench/verifybench" bench/verifybench.c \
    "$BUILD/libmuser.a" -lm -lutf8proc -ljansson
fi
if [ -f bench/draftacc.c ]; then
  make -s BUILD="$BUILD" "$BUILD/libmuser.a"
  gcc -std=c11 -O2 -g -Wall -Wextra -D_GNU_SOURCE -pthread -o "$BUILD/bench/draftacc" bench/draftacc.c \
    "$BUILD/libmuser.a" -lm -lutf8proc -ljansson
fi
if [ -f bench/gpukernbench.c ]; then
  make -s BUILD="$BUILD" "$BUILD/libmuser.a"
  gcc -std=c11 -O2 -g -Wall -Wextra -D_GNU_SOURCE -pthread -o "$BUILD/bench/gpukernbench" bench/gpukernbench.c \
    "$BUILD/libmuser.a" -lm -ldl -lutf8proc -ljansson
fi
if [ -f bench/kvbench.c ]; then
  make -s BUILD="$BUILD" "$BUILD/libmuser.a"
  gcc -std=c11 -O2 -g -Wall -Wextra -D_GNU_SOURCE -pthread -o "$BUILD/bench/kvbench" bench/kvbench.c \
    "$BUILD/libmuser.a" -lm -lutf8proc -ljansson -lssl -lcrypto
fi
if [ -f bench/attnbench.c ] && [ "$(uname -m)" = x86_64 ]; then
  make -s BUILD="$BUILD" "$BUILD/libmuser.a"
  gcc -std=c11 -O2 -g -Wall -Wextra -D_GNU_SOURCE -pthread -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni \
    -mavx512bf16 -mfma -mf16c -Isrc/kern -DATTN_SRC="\"$(realpath "${ATTN_SRC:-src/kern/attn_avx512.c}")\"" \
    -o "$BUILD/bench/attnbench" bench/attnbench.c "$BUILD/libmuser.a" -lm
fi
echo "built $BUILD/bench"
