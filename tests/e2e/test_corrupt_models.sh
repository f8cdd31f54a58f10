#!/usr/bin/env bash
# Corrupt-model corpus (issue 21): seeded mutations of generated tiny models
# (q4_k_m and f16) through `muser run`: no sanitizer report, no hang, and
# every outcome a normal run or exactly one valid-UTF-8 error line
# (tests/e2e/corrupt_models.py). Uses the ASan + UBSan build build/asan/muser
# when it exists (the asan tier of tests/run.sh builds it), else ./muser.
# CORRUPT_N trials (default 1200, about 70 s on 2 cores), CORRUPT_SEED (default 21).
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${MUSER_BIN:-$root/muser}
san=$root/build/asan/muser
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
command -v python3 >/dev/null || { echo "skip: no python3"; exit 0; }
"$bin" gen -o "$tmp/q4.gguf" --preset tiny --type q4_k_m --seed 5 --merges 200 >/dev/null 2>&1 || { echo "FAIL gen q4_k_m"; exit 1; }
"$bin" gen -o "$tmp/f16.gguf" --preset tiny --type f16 --seed 6 --merges 200 >/dev/null 2>&1 || { echo "FAIL gen f16"; exit 1; }
run=$bin
if [ -x "$san" ]; then run=$san; else echo "note: build/asan/muser not built (make asan): running $bin without sanitizers"; fi
echo "binary: $run"
if python3 "$root/tests/e2e/corrupt_models.py" "$run" "$tmp/work" "${CORRUPT_N:-1200}" "${CORRUPT_SEED:-21}" \
    "$tmp/q4.gguf" "$tmp/f16.gguf"; then
  echo "ok   corrupt models"
else
  keep=${CORRUPT_KEEP:-/tmp/muser-corrupt-failures}
  mkdir -p "$keep" && cp "$tmp"/work/failed-*.gguf "$keep"/ 2>/dev/null
  echo "FAIL corrupt models (mutants kept in $keep)"
  exit 1
fi
