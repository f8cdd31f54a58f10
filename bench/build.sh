#!/usr/bin/env bash
# Builds the benchmark helpers (not part of `make`): membw (memory read
# bandwidth, bench/membw.c), kernbench (kernel throughput against that
# bandwidth, bench/kernbench.c) and verifybench (the cost of a speculative
# verification block, bench/verifybench.c), draftacc (a DFlash drafter's
# drafts at every position of a sequence, bench/draftacc.c) and kvbench (KV pack writes,
# restores and the prefix cache, bench/kvbench.c), into $BUILD/bench (default
# build/bench).
set -eu
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
mkdir -p "$BUILD/bench"
gcc -std=c11 -O2 -g -Wall -Wextra -D_GNU_SOURCE -pthread -mavx2 -o "$BUILD/bench/membw" bench/membw.c
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
if [ -f bench/kvbench.c ]; then
  make -s BUILD="$BUILD" "$BUILD/libmuser.a"
  gcc -std=c11 -O2 -g -Wall -Wextra -D_GNU_SOURCE -pthread -o "$BUILD/bench/kvbench" bench/kvbench.c \
    "$BUILD/libmuser.a" -lm -lutf8proc -ljansson -lssl -lcrypto
fi
echo "built $BUILD/bench"
