#!/usr/bin/env bash
# test_tokenizer_golden.sh: regenerates the tokenizer test model with
# `muser gen` (a 4096-token byte-level BPE vocabulary, 3592 merges, trained on
# tests/tokenizer/train.txt) and checks `muser tokenize` against llama.cpp's
# ids for every string of tests/tokenizer/corpus.json, special parsing off
# and on (tests/tokenizer/golden-gen4096.json, made by make-golden.mjs; see
# tests/tokenizer/README.md). Needs no ../shared.
set -eu
cd "$(dirname "$0")/../.."
MUSER=${MUSER_BIN:-$PWD/muser}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$MUSER" gen -o "$dir/tok.gguf" --preset tiny --vocab 4096 --seed 7 --corpus tests/tokenizer/train.txt --type q8_0 >/dev/null
if ! python3 tests/tokenizer/compare.py "$MUSER" "$dir/tok.gguf" tests/tokenizer/golden-gen4096.json; then
  want=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["model_sha256"])' tests/tokenizer/golden-gen4096.json)
  have=$(sha256sum "$dir/tok.gguf" | cut -d' ' -f1)
  if [ "$want" != "$have" ]; then
    echo "note: the generated model differs from the one the goldens were made on"
    echo "      (sha256 $have, goldens $want). If muser gen's vocabulary changed on"
    echo "      purpose, regenerate golden-gen4096.json (tests/tokenizer/README.md)."
  fi
  exit 1
fi

# CLI contract: ids without BOS on one line; bad input is one stderr line, exit 1
out=$("$MUSER" tokenize -m "$dir/tok.gguf" --special "<|eot|>")
eot=$("$MUSER" tokenize -m "$dir/tok.gguf" --special "<|eot|><|eot|>")
[ "$out" = "[4091]" ] && [ "$eot" = "[4091,4091]" ] || { echo "FAIL: tokenize <|eot|>: $out $eot"; exit 1; }
[ "$("$MUSER" tokenize -m "$dir/tok.gguf" "")" = "[]" ] || { echo "FAIL: empty text"; exit 1; }
for args in "" "--bogus x" "-m $dir/missing.gguf x" "-m $dir/tok.gguf -f $dir/missing.txt" "-m $dir/tok.gguf a b" \
            "-m tests/tokenizer/corpus.json x"; do
  if "$MUSER" tokenize $args >/dev/null 2>"$dir/err"; then echo "FAIL: tokenize $args succeeded"; exit 1; fi
  [ "$(wc -l <"$dir/err")" = 1 ] || { echo "FAIL: tokenize $args: stderr is not one line"; exit 1; }
done
echo "tokenize CLI checks: ok"
