#!/usr/bin/env bash
# The one test runner. Tiers, each skipped with a message when its resource
# is missing:
#   check    layering table, self-contained headers, cited paths exist
#   unit     cmocka unit tests (no model)               build/tests/test_*
#   asan     the unit tests built with ASan + UBSan (and build/asan/muser, which
#            the e2e corrupt-model test runs)
#   fuzz     replay of every fuzz corpus                tests/fuzz/corpus/*
#   model    golden data from llama.cpp on generated models   tests/golden
#   shared   the team's shared fixtures                 ../shared/fixtures
#   e2e      end-to-end scripts (CLI, server on loopback)  tests/e2e/test_*.sh
#   neon     ARM64 kernels under qemu-user              (cross compiler + qemu)
#   gpu      CUDA backend vs the CPU and llama.cpp      (a CUDA device)
#   fresh    `make up` + `make test` in a new Debian 12 chroot (slow; run only
#            when named)                                root, debootstrap, network
# Usage: tests/run.sh [tier ...]   (default: all)
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
export MUSER_BIN=${MUSER_BIN:-$PWD/muser}
tiers=("$@")
[ ${#tiers[@]} -eq 0 ] && tiers=(check unit asan fuzz model shared e2e neon gpu)
fail=0
passed=()
failed=()
skipped=()

run_tier() {
  local name=$1
  shift
  echo "=== tier $name"
  if "$@"; then passed+=("$name"); else failed+=("$name"); fail=1; fi
}
skip() { echo "=== tier $1: skipped: $2"; skipped+=("$1"); }

tier_unit() {
  local rc=0 t
  for t in "$BUILD"/tests/test_*; do
    [ -x "$t" ] || continue
    echo "--- $(basename "$t")"
    "$t" || rc=1
  done
  # the Q8_0 / NVFP4 decode ring's lane arithmetic, taken from the CUDA source, on the host
  # (linked with build/libmuser.a: the plain build's tier only)
  if [ "$BUILD" = build ]; then
    echo "--- cuda-emu (k_mm_q8_dec's lanes against kern_ref.c)"
    bash tools/cuda-emu/run.sh || rc=1
  fi
  return $rc
}

tier_fuzz() { bash tests/fuzz/replay.sh; }

tier_check() {
  local rc=0
  bash tools/check-layers.sh || rc=1
  bash tools/check-paths.sh || rc=1
  return $rc
}

tier_asan() {
  make -s BUILD=build/asan OPT=-O1 SAN="-fsanitize=address,undefined,float-cast-overflow -fno-omit-frame-pointer -fno-sanitize-recover=undefined" build/asan/muser unit || return 1
  BUILD=build/asan tier_unit
}

tier_model() { bash tests/golden/run.sh; }

tier_shared() { bash tests/golden/run-shared.sh; }

tier_e2e() {
  local rc=0 t
  for t in tests/e2e/test_*.sh; do
    [ -f "$t" ] || continue
    echo "--- $t"
    bash "$t" || { echo "FAIL: $t"; rc=1; }
  done
  return $rc
}

tier_neon() { bash tests/neon/run.sh; }

for tier in "${tiers[@]}"; do
  case $tier in
    check) run_tier check tier_check ;;
    unit) run_tier unit tier_unit ;;
    asan) run_tier asan tier_asan ;;
    fuzz) run_tier fuzz tier_fuzz ;;
    model) run_tier model tier_model ;;
    shared)
      if [ -d ../shared/fixtures ]; then run_tier shared tier_shared
      else skip shared "../shared/fixtures is absent"; fi ;;
    e2e) run_tier e2e tier_e2e ;;
    neon)
      if command -v aarch64-linux-gnu-gcc >/dev/null && command -v qemu-aarch64 >/dev/null && [ -f tests/neon/run.sh ]; then
        run_tier neon tier_neon
      else skip neon "needs aarch64-linux-gnu-gcc and qemu-aarch64"; fi ;;
    gpu)
      if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then run_tier gpu bash tests/gpu/run.sh
      else skip gpu "no CUDA device on this machine"; fi ;;
    fresh) run_tier fresh bash tests/fresh/debootstrap.sh ;;  # slow: only when named
    *) echo "unknown tier $tier"; exit 2 ;;
  esac
done

echo "=== summary: passed: ${passed[*]:-none}; failed: ${failed[*]:-none}; skipped: ${skipped[*]:-none}"
exit $fail
