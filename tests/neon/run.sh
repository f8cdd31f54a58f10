#!/usr/bin/env bash
# The neon tier: cross-compiles the kernels (src/base, src/kern) and the
# check driver for AArch64 with Debian's aarch64-linux-gnu-gcc (static, so
# qemu-user needs no sysroot) and runs the checks under qemu-aarch64 twice:
# on a CPU with the dot-product extension (-cpu max: SDOT path) and on one
# without (-cpu cortex-a57: widening-multiply path).
set -eu
cd "$(dirname "$0")/../.."
CC=${CROSS_CC:-aarch64-linux-gnu-gcc}
OUT=${BUILD:-build}/neon
mkdir -p "$OUT"
CFLAGS="-std=c11 -O2 -Wall -Wextra -Wshadow -Wno-unused-parameter -D_GNU_SOURCE -pthread -fno-strict-aliasing"
objs=()
for f in src/base/*.c src/kern/*.c tests/neon/driver.c; do
  case $f in src/kern/*avx2*.c|src/kern/*avx512*.c|src/kern/*amx*.c) continue ;; esac
  extra=""
  case $f in src/kern/*neon*.c) extra="-march=armv8.2-a+dotprod+fp16" ;; esac
  o="$OUT/$(echo "$f" | tr / _).o"
  if [ ! -f "$o" ] || [ "$f" -nt "$o" ] || [ tests/unit/kern_checks.h -nt "$o" ] || [ src/kern/kern.h -nt "$o" ]; then
    $CC $CFLAGS $extra -c -o "$o" "$f"
  fi
  objs+=("$o")
done
$CC -static -pthread -o "$OUT/kern_checks" "${objs[@]}" -lm
rc=0
for cpu in max cortex-a57; do
  echo "--- qemu-aarch64 -cpu $cpu"
  qemu-aarch64 -cpu "$cpu" "$OUT/kern_checks" || rc=1
done
exit $rc
