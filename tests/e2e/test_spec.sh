#!/usr/bin/env bash
# test_spec.sh: speculative decoding from the outside (docs/speculative.md):
# `muser run --spec ngram` gives the tokens and text of plain decoding,
# greedy and sampled, and reports its draft counts; bad options are one
# error line; `muser serve --spec ngram` answers as `muser run` does, with
# llama.cpp's draft_n / draft_n_accepted timings and /metrics counters.
SERVE_TEST_NAME=test_spec
source "$(dirname "$0")/serve_lib.sh"

# the bundled model: a real vocabulary, and its answers repeat the prompt
M=models/muser-default.gguf
[ -f "$M" ] || M=$MODEL
P='ls -la lists files. ls -la lists files. ls -la lists files. The ls command'
ids() { python3 -c "import sys,json; print(','.join(str(json.loads(l)['id']) for l in sys.stdin if '\"id\"' in l))"; }

for sampling in "--temp 0" "--temp 0.9 --seed 11"; do
  # shellcheck disable=SC2086
  plain=$("$MUSER" run -m "$M" -p "$P" -n 48 $sampling --json --threads 1 --ignore-eos 2>"$T/err" | ids)
  # shellcheck disable=SC2086
  "$MUSER" run -m "$M" -p "$P" -n 48 $sampling --json --threads 1 --ignore-eos --spec ngram --draft-max 6 \
    >"$T/spec" 2>>"$T/err"
  spec=$(ids <"$T/spec")
  last=$(tail -1 "$T/spec")
  if [ -n "$plain" ] && [ "$plain" = "$spec" ]; then ok "run --spec ngram ($sampling): the tokens of plain decoding"
  else bad "run --spec ngram ($sampling): $plain vs $spec ($(cat "$T/err"))"; fi
  if echo "$last" | python3 -c '
import json, sys
t = json.loads(sys.stdin.read())["timings"]
assert t["predicted_n"] == 48 and 0 <= t["draft_n_accepted"] <= t["draft_n"] and t["draft_n"] > 0, t
assert t["spec_steps"] > 0 and t["draft_n"] <= 6 * t["spec_steps"], t
'; then ok "run --json --spec: timings line ($last)"; else bad "run --json --spec: last line: $last"; fi
done

# text mode: the same text; the counts on stderr
a=$("$MUSER" run -m "$M" -p "$P" -n 40 --temp 0 --threads 1 2>/dev/null)
b=$("$MUSER" run -m "$M" -p "$P" -n 40 --temp 0 --threads 1 --spec ngram 2>"$T/err")
if [ "$a" = "$b" ] && grep -q "^spec ngram: drafted [0-9]*, accepted [0-9]*" "$T/err"; then ok "run --spec ngram: same text, counts on stderr"
else bad "run --spec ngram text: [$a] vs [$b] ($(cat "$T/err"))"; fi

# bad options: one line, exit 1
for args in "--spec dflash" "--spec" "--draft-max 0" "--draft-max 65" "--draft-min -1" "--draft-max x"; do
  # shellcheck disable=SC2086
  "$MUSER" run -m "$M" -p hi -n 2 $args >/dev/null 2>"$T/err"
  rc=$?
  if [ $rc = 1 ] && [ "$(wc -l <"$T/err")" = 1 ] && grep -q "^muser run: " "$T/err"; then ok "run $args: $(cat "$T/err")"
  else bad "run $args: exit $rc: $(cat "$T/err")"; fi
done

# the server: --spec ngram for every request; the answer of `muser run`
MODEL=$M
start_server --parallel 2 --ctx 512 --threads 1 --spec ngram --draft-max 8 || { bad "server start"; exit 1; }
toks=$(curl -s "$BASE/tokenize" -H 'Content-Type: application/json' -d "{\"content\": \"$P\"}" | python3 -c 'import json,sys; print(",".join(map(str, json.load(sys.stdin)["tokens"])))')
want=$("$MUSER" run -m "$M" --prompt-ids "$toks" -n 32 --temp 0 --json --threads 1 --ignore-eos 2>/dev/null | ids)
curl -s "$BASE/completion" -H 'Content-Type: application/json' \
  -d "{\"prompt\": [$toks], \"n_predict\": 32, \"temperature\": 0, \"return_tokens\": true, \"ignore_eos\": true}" >"$T/c"
got=$(jget "$T/c" "','.join(map(str, j['tokens']))")
if [ -n "$want" ] && [ "$got" = "$want" ]; then ok "serve --spec ngram: /completion tokens equal muser run's"
else bad "serve --spec ngram: $got vs $want ($(head -c 300 "$T/c"))"; fi
dn=$(jget "$T/c" "j['timings']['draft_n']")
da=$(jget "$T/c" "j['timings']['draft_n_accepted']")
if [ -n "$dn" ] && [ "$dn" -gt 0 ] && [ "$da" -le "$dn" ]; then ok "serve: timings draft_n $dn, draft_n_accepted $da"
else bad "serve: timings: $(jget "$T/c" "j['timings']")"; fi
curl -s "$BASE/metrics" >"$T/m"
mdn=$(sed -n 's/^llamacpp:spec_decode_num_draft_tokens_total //p' "$T/m")
mda=$(sed -n 's/^llamacpp:spec_decode_num_accepted_tokens_total //p' "$T/m")
if [ "$mdn" = "$dn" ] && [ "$mda" = "$da" ] && grep -q '^llamacpp:spec_decode_num_drafts_total [1-9]' "$T/m"; then
  ok "/metrics: spec_decode counters ($mdn drafted, $mda accepted)"
else bad "/metrics: spec counters $mdn/$mda vs $dn/$da"; fi
stop_server

echo "test_spec: $npass passed, $nfail failed"
exit $fail
