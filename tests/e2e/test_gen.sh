#!/usr/bin/env bash
# test_gen.sh: `muser gen` end to end: a tiny model per type, determinism
# (same options -> same sha256, whatever the thread count), the GGUF header,
# `muser info` acceptance when that command is built, and bad options ->
# exit 1 with one error line and no file left behind.
set -u
cd "$(dirname "$0")/../.."
MUSER=${MUSER_BIN:-$PWD/muser}
[ -x "$MUSER" ] || { echo "test_gen: skipped: no muser binary at $MUSER"; exit 0; }
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=1; }

has_info=0
if "$MUSER" info --help >/dev/null 2>&1 || ! "$MUSER" info 2>&1 | grep -q "not part of this build"; then has_info=1; fi

# The generator's bytes are pinned: golden data (tests/golden) was made from
# generated files and checks their SHA-256. If a change here is intended,
# regenerate the golden answers (tests/golden/make-golden.sh) and update these.
declare -A PIN=(
  [f32]=d79b8bb1a2316f4e8c7864dabb09eeb3d7bd4677d859ea0e7681478cffe8b73d
  [f16]=782a5ded2005331821f54cddbd4522fefc014aaac327ebc4330cfed9a884d2cc
  [bf16]=9893f15c32638476a8d386f7630f5f8ab8216f8d42909a6250100d1d0b486c29
  [q8_0]=f6d72146b4dc555d1bbffecfc09f4242ac2c502ea42f405e28f220fb4c9a2bfe
  [q4_k]=c127be3c11f3a9b18af47cd75ac13b2b0f41dba34acdbeca2be38506f623decf
  [q5_k]=4740a75356193774a35a6ac141dd77210c10f65a47610a2623d124a34fdbb731
  [q6_k]=9dd9e2f293833ad10d38426c4db5e17b16bd71eda7cf035432398dbe06c74f43
  [q4_k_m]=9f11e1c8f45cda5a69f5ddbc1bbb39e0e06d427962e599bdb985633cfc7342f0
  [q4_k_s]=72c9b94932e3fc4c60b2827befc16dd182daafb6a7cc3602f577f2928d205669
  [q5_k_s]=fb23216e11666cdbda6768930966bfd77c99eae6769c53bbbd93d79082b89ebd
  [q5_k_m]=0d9091b9df6ab3a3d6fece6c081067d98919f7630c54ae4870a15bafc216daeb
  [nvfp4]=c08bd4a552c99012a58f6fe417c6d588cb7aa41622b5ab6f6b7afed701a2b519
)
for t in f32 f16 bf16 q8_0 q4_k q5_k q6_k q4_k_m q4_k_s q5_k_s q5_k_m nvfp4; do
  f=$T/tiny-$t.gguf
  if "$MUSER" gen -o "$f" --preset tiny --type "$t" --seed 3 2>"$T/err"; then
    if [ "$(head -c 4 "$f")" = GGUF ] && [ ! -e "$f.tmp" ]; then ok "gen tiny $t ($(stat -c %s "$f") bytes)"
    else bad "gen tiny $t: bad header or leftover .tmp"; fi
    h=$(sha256sum <"$f" | cut -c1-64)
    [ "$h" = "${PIN[$t]}" ] && ok "tiny $t bytes unchanged" || bad "tiny $t: generator output changed ($h): golden data would break"
    if [ $has_info = 1 ]; then
      if "$MUSER" info -m "$f" >"$T/info" 2>&1; then ok "info accepts tiny $t"; else bad "info rejects tiny $t: $(head -c 300 "$T/info")"; fi
    fi
  else
    bad "gen tiny $t failed: $(cat "$T/err")"
  fi
done
[ $has_info = 1 ] || echo "skip muser info checks: info is not part of this build"

# determinism: same seed -> same bytes, independent of threads; other seed -> other bytes
"$MUSER" gen -o "$T/a.gguf" --preset fixture --type q4_k_m --seed 11 --threads 1 2>/dev/null
"$MUSER" gen -o "$T/b.gguf" --preset fixture --type q4_k_m --seed 11 --threads 2 2>/dev/null
"$MUSER" gen -o "$T/c.gguf" --preset fixture --type q4_k_m --seed 12 2>/dev/null
ha=$(sha256sum <"$T/a.gguf" | cut -c1-64); hb=$(sha256sum <"$T/b.gguf" | cut -c1-64); hc=$(sha256sum <"$T/c.gguf" | cut -c1-64)
[ -n "$ha" ] && [ "$ha" = "$hb" ] && ok "deterministic across thread counts" || bad "same seed gave different bytes"
[ "$ha" != "$hc" ] && ok "different seed, different bytes" || bad "different seeds gave the same bytes"
# fast and careful quantization both produce loadable, different files
"$MUSER" gen -o "$T/f.gguf" --preset fixture --type q4_k_m --seed 11 --quant fast 2>/dev/null
hf=$(sha256sum <"$T/f.gguf" | cut -c1-64)
[ "$hf" = c4a996da1040894524c2997b6243cc329902ea003957843ff106271c2f00e537 ] && [ "$hf" != "$ha" ] \
  && ok "--quant fast (pinned)" || bad "--quant fast: output changed or equals careful ($hf)"

# llama.cpp's Q4_K_M rule: Q6_K attn_v/ffn_down where use_more_bits(il, n):
# il < n/8 || il >= 7n/8 || (il - n/8) % 3 == 2; for 16 layers: 0 1 4 7 10 13 14 15
if [ $has_info = 1 ]; then
  "$MUSER" gen -o "$T/m.gguf" --layers 16 --embd 256 --ff 256 --heads 2 --kv-heads 1 --head-dim 128 --type q4_k_m 2>/dev/null
  got=$("$MUSER" info -m "$T/m.gguf" --tensors | awk '$2 ~ /attn_v|ffn_down/ && $3 == "Q6_K" {split($2, a, "."); print a[2]}' | sort -n | uniq | tr '\n' ' ')
  out=$("$MUSER" info -m "$T/m.gguf" --tensors | awk '$2 == "output.weight" {print $3}')
  [ "$got" = "0 1 4 7 10 13 14 15 " ] && [ "$out" = Q6_K ] && ok "Q4_K_M layer rule" || bad "Q4_K_M layer rule: Q6_K layers '$got', output $out"
fi

# geometry and key options
"$MUSER" gen -o "$T/p.gguf" --layers 3 --embd 256 --ff 256 --heads 2 --kv-heads 1 --head-dim 64 --vocab 300 \
  --pattern-bools 1,0,1 --no-softcap --type q8_0 2>/dev/null && ok "custom geometry" || bad "custom geometry"
"$MUSER" gen -o "$T/s.gguf" --layers 4 --pattern 2 --type f16 --template /dev/null --merges 10 2>/dev/null \
  && ok "scalar pattern, template file, merges cap" || bad "scalar pattern, template file, merges cap"

# bad options: exit 1, exactly one stderr line, no output file
expect_fail() {
  local what=$1; shift
  rm -f "$T/x.gguf" "$T/x.gguf.tmp"
  "$MUSER" gen "$@" 2>"$T/err" >/dev/null
  local rc=$? lines
  lines=$(wc -l <"$T/err")
  if [ $rc -eq 1 ] && [ "$lines" -eq 1 ] && [ ! -e "$T/x.gguf" ] && [ ! -e "$T/x.gguf.tmp" ]; then ok "rejects $what: $(cat "$T/err")"
  else bad "$what: rc=$rc lines=$lines $(head -c 200 "$T/err")"; fi
}
expect_fail "missing -o"
expect_fail "unknown type" -o "$T/x.gguf" --type q3_k
expect_fail "unknown option" -o "$T/x.gguf" --frobnicate 1
expect_fail "unknown preset" -o "$T/x.gguf" --preset huge
expect_fail "heads not multiple of kv" -o "$T/x.gguf" --heads 5 --kv-heads 2
expect_fail "K-quant row not multiple of 256" -o "$T/x.gguf" --embd 200 --type q4_k
expect_fail "non-numeric layers" -o "$T/x.gguf" --layers four
expect_fail "zero layers" -o "$T/x.gguf" --layers 0
expect_fail "pattern bools length" -o "$T/x.gguf" --layers 4 --pattern-bools 1,0
expect_fail "pattern bools value" -o "$T/x.gguf" --layers 2 --pattern-bools 1,2
expect_fail "vocab too small" -o "$T/x.gguf" --vocab 100
expect_fail "missing template" -o "$T/x.gguf" --template "$T/nope.jinja"
expect_fail "value missing" -o "$T/x.gguf" --seed
expect_fail "negative seed" -o "$T/x.gguf" --seed -1
rm -f "$T/x.gguf"
# an interrupted run leaves neither OUT nor OUT.tmp. Events, not a sleep: wait
# until OUT.tmp exists (the handler is installed before it is created), stop
# the process, check it is still writing, then SIGINT and SIGCONT (the signal
# is delivered on resume), so the signal always lands mid-write. The wait only
# guards against a hang (600 s).
"$MUSER" gen -o "$T/i.gguf" --preset 1b --type q8_0 2>/dev/null &
pid=$!
for ((i = 0; i < 12000; i++)); do
  [ -e "$T/i.gguf.tmp" ] && break
  kill -0 $pid 2>/dev/null || break
  sleep 0.05
done
kill -STOP $pid 2>/dev/null
if [ -e "$T/i.gguf.tmp" ] && [ ! -e "$T/i.gguf" ] && kill -0 $pid 2>/dev/null; then
  kill -INT $pid
  kill -CONT $pid
  wait $pid
  rc=$?
  [ $rc = 130 ] && [ ! -e "$T/i.gguf.tmp" ] && [ ! -e "$T/i.gguf" ] && ok "interrupted run removes OUT.tmp (exit $rc)" ||
    bad "interrupted run: exit $rc, left $(ls "$T" | grep '^i\.gguf' | tr '\n' ' ')"
else
  # gen ended (or never wrote OUT.tmp) before it could be stopped: 1b takes
  # far longer than one poll, so this is a failure of gen, not of timing
  kill -CONT $pid 2>/dev/null; kill $pid 2>/dev/null; wait $pid; rc=$?
  bad "interrupted run: gen exited ($rc) before writing OUT.tmp or stopping: $(ls "$T" | grep '^i\.gguf' | tr '\n' ' ')"
fi
rm -f "$T/i.gguf" "$T/i.gguf.tmp"
"$MUSER" gen -o "$T/nodir/x.gguf" 2>"$T/err"; rc=$?
[ $rc -eq 1 ] && [ "$(wc -l <"$T/err")" -eq 1 ] && ok "unwritable path: $(cat "$T/err")" || bad "unwritable path rc=$rc"

exit $fail
