#!/usr/bin/env bash
# The CLI contract: JSON lines of `run`, `info`, and for every bad argument
# or bad file exactly one error line on stderr, exit code 1, never a crash.
set -u
bin=${MUSER_BIN:-$(cd "$(dirname "$0")/../.." && pwd)/muser}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=1; }

"$bin" gen -o "$tmp/m.gguf" --preset tiny --type q8_0 --seed 3 >/dev/null 2>&1 || { bad "gen"; exit 1; }

# run --json: one line per token with the top list
out=$("$bin" run -m "$tmp/m.gguf" --prompt-ids 1,2,3 -n 5 --temp 0 --json --top 4 --ignore-eos)
n=$(echo "$out" | wc -l)
if [ "$n" = 5 ] && echo "$out" | python3 -c '
import json, sys
for line in sys.stdin:
    r = json.loads(line)
    assert isinstance(r["id"], int) and len(r["top"]) == 4
    ps = [p for _, p in r["top"]]
    assert ps == sorted(ps, reverse=True) and 0 < ps[0] <= 1
    assert r["top"][0][0] == r["id"]  # greedy picks the most probable
'; then ok "run --json lines"; else bad "run --json: $out"; fi

"$bin" info -m "$tmp/m.gguf" | grep -q '^layers' && ok "info" || bad "info"

# prefill progress: on a terminal (script(1) gives the run one), a line per
# prompt chunk on stderr, "D/T tokens", erased before the reply; without a
# terminal, none. 1200 ids: three chunks of 512 (the scheduler's default).
ids=$(python3 -c "print(','.join(str(i % 1000 + 1) for i in range(1200)))")
if command -v script >/dev/null; then
  # stderr is the terminal; script copies what the terminal got to its stdout
  script -qec "\"$bin\" run -m \"$tmp/m.gguf\" --prompt-ids $ids -n 2 --temp 0 --ignore-eos --threads 1 >/dev/null" /dev/null >"$tmp/pf.err"
  prog=$(tr '\r' '\n' <"$tmp/pf.err" | grep -o 'prefill: [0-9]*/[0-9]* tokens' | tr '\n' ' ')
  if [ "$prog" = "prefill: 0/1200 tokens prefill: 512/1200 tokens prefill: 1024/1200 tokens " ] &&
    [ "$(tail -c 4 "$tmp/pf.err" | od -An -c | tr -d ' ')" = '\r033[K' ]; then
    ok "run on a terminal: prefill progress per chunk on stderr, erased at the end"
  else bad "run on a terminal: progress '$prog', stderr ends $(tail -c 8 "$tmp/pf.err" | od -An -c)"; fi
else echo "test_cli: script(1) is missing: the terminal progress check is skipped"; fi
"$bin" run -m "$tmp/m.gguf" --prompt-ids "$ids" -n 2 --temp 0 --ignore-eos --threads 1 >/dev/null 2>"$tmp/pf2.err"
[ ! -s "$tmp/pf2.err" ] && ok "run without a terminal: no progress text" || bad "run without a terminal: $(head -c 200 "$tmp/pf2.err")"

# one error line, exit 1
expect_error() {
  local what=$1; shift
  "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$? lines
  lines=$(wc -l <"$tmp/err")
  if [ $rc -eq 1 ] && [ "$lines" -eq 1 ] && [ ! -s "$tmp/out" ]; then ok "$what: $(cat "$tmp/err")"
  else bad "$what: exit $rc, $lines stderr lines: $(head -3 "$tmp/err")"; fi
}

# backends: without a usable GPU, auto runs on the CPU and cuda is one error
# line (a build with the CUDA plugin on a machine without a driver, as in CI)
if "$bin" info -m "$tmp/m.gguf" | grep -q '^gpu          none'; then
  "$bin" run -m "$tmp/m.gguf" --prompt-ids 1,2 -n 2 --temp 0 --backend auto >/dev/null 2>&1 && ok "--backend auto without a GPU runs on the CPU" || bad "--backend auto without a GPU"
  expect_error "--backend cuda without a GPU" "$bin" run -m "$tmp/m.gguf" --prompt-ids 1,2 -n 2 --backend cuda
else
  echo "skip --backend fallback checks: a GPU is present (the gpu tier checks the CUDA backend)"
fi
expect_error "--backend unknown" "$bin" run -m "$tmp/m.gguf" --prompt-ids 1,2 -n 2 --backend tpu
expect_error "--gpu not a number" "$bin" run -m "$tmp/m.gguf" --prompt-ids 1,2 -n 2 --gpu x

size=$(stat -c %s "$tmp/m.gguf")
head -c 100 "$tmp/m.gguf" >"$tmp/trunc-header.gguf"
head -c $((size / 2)) "$tmp/m.gguf" >"$tmp/trunc-data.gguf"
cp "$tmp/m.gguf" "$tmp/foreign.gguf"
python3 - "$tmp/foreign.gguf" <<'PY'
import sys
p = sys.argv[1]
b = bytearray(open(p, "rb").read())
i = b.index(b"muse-glimmer")  # first occurrence: the general.architecture value
b[i:i + 12] = b"llama-glimmr"
open(p, "wb").write(b)
PY
cp "$tmp/m.gguf" "$tmp/badver.gguf"
printf '\x07' | dd of="$tmp/badver.gguf" bs=1 seek=4 conv=notrunc 2>/dev/null
printf 'hello world, not a model at all, but long enough\n' >"$tmp/text.gguf"

expect_error "truncated header" "$bin" run -m "$tmp/trunc-header.gguf" --prompt-ids 1 -n 1
expect_error "truncated data" "$bin" run -m "$tmp/trunc-data.gguf" --prompt-ids 1 -n 1
expect_error "foreign architecture" "$bin" info -m "$tmp/foreign.gguf"
expect_error "bad version" "$bin" info -m "$tmp/badver.gguf"
expect_error "not a gguf" "$bin" run -m "$tmp/text.gguf" --prompt-ids 1 -n 1
expect_error "missing file" "$bin" run -m "$tmp/none.gguf" --prompt-ids 1 -n 1
expect_error "a directory" "$bin" info -m "$tmp"
expect_error "unknown command" "$bin" frobnicate
expect_error "unknown option" "$bin" run -m "$tmp/m.gguf" --prompt-ids 1 --bogus
expect_error "bad -n" "$bin" run -m "$tmp/m.gguf" --prompt-ids 1 -n -3
expect_error "bad ids" "$bin" run -m "$tmp/m.gguf" --prompt-ids 1,,2
expect_error "id out of vocabulary" "$bin" run -m "$tmp/m.gguf" --prompt-ids 99999999 -n 1
expect_error "two prompts" "$bin" run -m "$tmp/m.gguf" --prompt-ids 1 -p hi
expect_error "missing value" "$bin" run -m "$tmp/m.gguf" --prompt-ids
expect_error "bad temp" "$bin" run -m "$tmp/m.gguf" --prompt-ids 1 --temp x
expect_error "bad logit bias" "$bin" run -m "$tmp/m.gguf" --prompt-ids 1 --logit-bias 5*2
expect_error "logit bias +inf" "$bin" run -m "$tmp/m.gguf" --prompt-ids 1 --logit-bias 5+inf
expect_error "bad repeat penalty" "$bin" run -m "$tmp/m.gguf" --prompt-ids 1 --repeat-penalty 0
expect_error "bad mirostat" "$bin" run -m "$tmp/m.gguf" --prompt-ids 1 --mirostat 3
expect_error "grammar syntax" "$bin" run -m "$tmp/m.gguf" --prompt-ids 1 -n 2 --grammar 'root ::= ("a"'
expect_error "empty grammar" "$bin" run -m "$tmp/m.gguf" --prompt-ids 1 -n 2 --grammar-file /dev/null
expect_error "missing grammar file" "$bin" run -m "$tmp/m.gguf" --prompt-ids 1 -n 2 --grammar-file "$tmp/none.gbnf"
expect_error "two grammars" "$bin" run -m "$tmp/m.gguf" --prompt-ids 1 -n 2 --grammar 'root ::= "a"' --grammar-file /dev/null
# a grammar constrains the text (sampled: the grammar, not the model, decides the shape)
printf 'root ::= "ab" [0-9]{3} "."\n' >"$tmp/g.gbnf"
out=$("$bin" run -m "$tmp/m.gguf" --prompt-ids 1,5 -n 12 --seed 3 --grammar-file "$tmp/g.gbnf" 2>&1)
[[ $out =~ ^ab[0-9]{3}\.$ ]] && ok "--grammar-file constrains the output: $out" || bad "--grammar-file: '$out'"
expect_error "bad repeat-last-n" "$bin" run -m "$tmp/m.gguf" --prompt-ids 1 --repeat-last-n -2
out=$("$bin" run -m "$tmp/m.gguf" --prompt-ids 1,2,3 -n 4 --temp 0 --json --logit-bias 7+1000 --repeat-penalty 1.3 --frequency-penalty 0.2 --typical 0.9 --xtc-probability 0 --min-keep 1 2>&1)
[ "$(echo "$out" | head -1 | python3 -c 'import sys,json; print(json.loads(sys.stdin.readline())["id"])')" = 7 ] &&
  ok "run: --logit-bias 7+1000 makes token 7 the greedy one" || bad "run --logit-bias: $out"
expect_error "context too small" "$bin" run -m "$tmp/m.gguf" --prompt-ids 1,2,3 -n 10 --ctx 4
expect_error "unknown kernel table" "$bin" run -m "$tmp/m.gguf" --prompt-ids 1 -n 1 --kern sparc

# every header byte of the file flipped, one at a time (first 256 bytes):
# never a crash, always exit 0 or 1
crashes=0
for i in $(seq 0 8 255); do
  cp "$tmp/m.gguf" "$tmp/flip.gguf"
  printf "\\x$(printf %02x $(( ($(od -An -tu1 -j $i -N1 "$tmp/m.gguf") ^ 0xff) & 0xff )))" |
    dd of="$tmp/flip.gguf" bs=1 seek=$i conv=notrunc 2>/dev/null
  "$bin" run -m "$tmp/flip.gguf" --prompt-ids 1 -n 1 --temp 0 >/dev/null 2>&1
  rc=$?
  [ $rc -le 1 ] || { crashes=$((crashes + 1)); echo "  byte $i: exit $rc"; }
done
[ $crashes -eq 0 ] && ok "32 flipped header bytes: no crash" || bad "$crashes crashes on flipped bytes"
exit $fail
