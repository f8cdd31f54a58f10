#!/usr/bin/env bash
# Builds libFuzzer binaries (clang) for every harness: build/fuzz/fuzz_<name>.
# Run one: build/fuzz/fuzz_gguf tests/fuzz/corpus/gguf -max_total_time=60
set -eu
cd "$(dirname "$0")/../.."
make -s CC=clang BUILD=build/fuzzlib OPT=-O1 SAN="-fsanitize=address,undefined,float-cast-overflow,fuzzer-no-link" build/fuzzlib/libmuser.a
mkdir -p build/fuzz
for h in tests/fuzz/fuzz_*.c; do
  name=$(basename "$h" .c)
  clang -std=c11 -O1 -g -D_GNU_SOURCE -fsanitize=address,undefined,float-cast-overflow,fuzzer -o build/fuzz/"$name" "$h" \
    build/fuzzlib/libmuser.a -lm -lpthread -lutf8proc -ljansson -lmicrohttpd -lssl -lcrypto -ledit -lsqlite3 -lpng -ljpeg -lwebp -lwebpdemux
  echo "built build/fuzz/$name"
done
