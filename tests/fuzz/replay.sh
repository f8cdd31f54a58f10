#!/usr/bin/env bash
# Builds every harness tests/fuzz/fuzz_<name>.c with the replay driver (gcc,
# ASan + UBSan) and runs it over tests/fuzz/corpus/<name>/*.
set -eu
cd "$(dirname "$0")/../.."
make -s BUILD=build/asan OPT=-O1 SAN="-fsanitize=address,undefined,float-cast-overflow -fno-omit-frame-pointer -fno-sanitize-recover=undefined" build/asan/libmuser.a
mkdir -p build/fuzz
rc=0
for h in tests/fuzz/fuzz_*.c; do
  [ -f "$h" ] || continue
  name=$(basename "$h" .c); name=${name#fuzz_}
  bin=build/fuzz/replay_$name
  gcc -std=c11 -O1 -g -D_GNU_SOURCE -fsanitize=address,undefined,float-cast-overflow -fno-sanitize-recover=undefined \
    -o "$bin" "$h" tests/fuzz/replay_main.c build/asan/libmuser.a \
    -lm -lpthread -lutf8proc -ljansson -lmicrohttpd -lssl -lcrypto -ledit -lsqlite3 -lpng -ljpeg -lwebp -lwebpdemux
  files=(tests/fuzz/corpus/"$name"/*)
  if [ ! -e "${files[0]}" ]; then echo "fuzz $name: empty corpus"; rc=1; continue; fi
  echo -n "fuzz $name: "
  "$bin" "${files[@]}" || rc=1
done
exit $rc
