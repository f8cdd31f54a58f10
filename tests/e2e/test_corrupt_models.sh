#!/usr/bin/env bash
# Corrupt-model corpus (issue 21): seeded mutations of generated tiny models
# (q4_k_m, f16 and nvfp4) through `muser run`: no sanitizer report, no hang, and
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
"$bin" gen -o "$tmp/nv.gguf" --preset tiny --type nvfp4 --seed 7 --merges 200 >/dev/null 2>&1 || { echo "FAIL gen nvfp4"; exit 1; }
# the weight check: a NaN in the last value of the file (the F32
# blk.3.post_ffw_norm.weight of the tiny model) named by info --check and
# refused by run --check-tensors with one line; a run without the check
# still ends normally (all-NaN Q8_K blocks quantize to zeros, as llama.cpp's)
python3 - "$tmp/q4.gguf" "$tmp/nan.gguf" <<'PY'
import sys
b = bytearray(open(sys.argv[1], "rb").read())
b[-4:] = b"\x00\x00\xc0\x7f"
open(sys.argv[2], "wb").write(b)
PY
want="tensor 'blk.3.post_ffw_norm.weight' (F32): value 255 (row 0, column 255) is not finite: nan"
"$bin" info -m "$tmp/q4.gguf" --check >"$tmp/out" 2>"$tmp/err" && grep -q '^check *ok' "$tmp/out" \
  && echo "ok   info --check on a sound model" || { echo "FAIL info --check on a sound model: $(cat "$tmp/err")"; exit 1; }
"$bin" info -m "$tmp/nan.gguf" --check >"$tmp/out" 2>"$tmp/err"; rc=$?
if [ $rc -eq 1 ] && [ "$(tail -1 "$tmp/err")" = "muser info: model: $want" ]; then echo "ok   info --check names the tensor"
else echo "FAIL info --check: exit $rc: $(tail -2 "$tmp/err")"; exit 1; fi
"$bin" run -m "$tmp/nan.gguf" --check-tensors -p hi -n 2 >"$tmp/out" 2>"$tmp/err"; rc=$?
if [ $rc -eq 1 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] && [ "$(cat "$tmp/err")" = "muser run: model: $want" ] && [ ! -s "$tmp/out" ]; then
  echo "ok   run --check-tensors refuses it"
else echo "FAIL run --check-tensors: exit $rc: $(head -2 "$tmp/err")"; exit 1; fi

# block scales: Q4_K d of block 3 of token_embd (144-byte blocks, d first),
# Q6_K d (offset 208) of block 0 of blk.3.attn_v (f16 +inf, NaN)
poke() { python3 "$root/tests/e2e/gguf_poke.py" "$tmp/q4.gguf" "$tmp/poked.gguf" "$@"; }
expect_check() {
  "$bin" info -m "$tmp/poked.gguf" --check >/dev/null 2>"$tmp/err"; local rc=$?
  if [ $rc -eq 1 ] && [ "$(tail -1 "$tmp/err")" = "muser info: model: $1" ]; then echo "ok   info --check: $1"
  else echo "FAIL info --check: exit $rc: $(tail -1 "$tmp/err") (want $1)"; exit 1; fi
}
poke token_embd.weight $((3 * 144)) 007c
expect_check "tensor 'token_embd.weight' (Q4_K): block 3 (row 3) has a non-finite scale d"
poke token_embd.weight $((5 * 144 + 2)) 01fe
expect_check "tensor 'token_embd.weight' (Q4_K): block 5 (row 5) has a non-finite scale dmin"
poke blk.3.attn_v.weight 208 007e
expect_check "tensor 'blk.3.attn_v.weight' (Q6_K): block 0 (row 0) has a non-finite scale d"

# NVFP4 scale bytes are all valid (llama.cpp's rule): 0x7f (E4M3's NaN, read
# as 0) and 0xff (240) in block 0 of blk.0.ffn_up pass the check
python3 "$root/tests/e2e/gguf_poke.py" "$tmp/nv.gguf" "$tmp/poked.gguf" blk.0.ffn_up.weight 0 7fff7f80
"$bin" info -m "$tmp/poked.gguf" --check >"$tmp/out" 2>"$tmp/err" && grep -q '^check *ok' "$tmp/out" \
  && echo "ok   info --check accepts every NVFP4 scale byte" || { echo "FAIL info --check on NVFP4 scales: $(cat "$tmp/err")"; exit 1; }

# untrusted bytes in a message: a file name with an invalid byte and an
# escape sequence comes back escaped, as one valid UTF-8 line
bad_name=$(printf '%s/x\377\033[2J.gguf' "$tmp")
"$bin" run -m "$bad_name" -p hi -n 1 >"$tmp/out" 2>"$tmp/err"; rc=$?
if [ $rc -eq 1 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] && grep -qF 'x\xff\x1b[2J.gguf' "$tmp/err" \
   && python3 -c 'import sys; sys.stdin.buffer.read().decode("utf-8")' <"$tmp/err"; then echo "ok   file name escaped: $(cat "$tmp/err")"
else echo "FAIL file name not escaped: exit $rc: $(od -c "$tmp/err" | head -3)"; exit 1; fi

run=$bin
if [ -x "$san" ]; then run=$san; else echo "note: build/asan/muser not built (make asan): running $bin without sanitizers"; fi
echo "binary: $run"
if python3 "$root/tests/e2e/corrupt_models.py" "$run" "$tmp/work" "${CORRUPT_N:-1200}" "${CORRUPT_SEED:-21}" \
    "$tmp/q4.gguf" "$tmp/f16.gguf" "$tmp/nv.gguf"; then
  echo "ok   corrupt models"
else
  keep=${CORRUPT_KEEP:-/tmp/muser-corrupt-failures}
  mkdir -p "$keep" && cp "$tmp"/work/failed-*.gguf "$keep"/ 2>/dev/null
  echo "FAIL corrupt models (mutants kept in $keep)"
  exit 1
fi
