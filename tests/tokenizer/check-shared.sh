#!/usr/bin/env bash
# check-shared.sh: `muser tokenize` against llama.cpp on the shared fixtures:
# the tokenize[] entries of ../shared/fixtures/t*.ref.json (all three models
# share one vocabulary) and the project corpus on t1-f16.gguf
# (golden-t1-f16.json), special parsing off and on. Skips (exit 0) when
# ../shared is absent; exit 1 on any mismatch.
# usage: tests/tokenizer/check-shared.sh   (MUSER_BIN overrides ./muser)
set -u
cd "$(dirname "$0")/../.."
MUSER=${MUSER_BIN:-$PWD/muser}
FIX=../shared/fixtures
if [ ! -d "$FIX" ]; then
  echo "tokenizer shared check: skipped: $FIX is absent"
  exit 0
fi
rc=0
for ref in "$FIX"/t*.ref.json; do
  [ -f "$ref" ] || continue
  model=${ref%.ref.json}.gguf
  python3 tests/tokenizer/compare.py "$MUSER" "$model" "$ref" || rc=1
done
if [ -f "$FIX/t1-f16.gguf" ]; then
  python3 tests/tokenizer/compare.py "$MUSER" "$FIX/t1-f16.gguf" tests/tokenizer/golden-t1-f16.json || rc=1
fi
exit $rc
