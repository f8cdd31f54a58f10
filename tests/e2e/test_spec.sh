#!/usr/bin/env bash
# test_spec.sh: speculative decoding from the outside (docs/speculative.md):
# `muser run --spec ngram` and `--spec dflash --draft D.gguf` (a random
# drafter from `muser gen --dflash`) give the tokens and text of plain
# decoding, greedy and sampled, and report their draft counts; bad options
# are one error line; `muser serve --spec ngram` answers as `muser run`
# does, with llama.cpp's draft_n / draft_n_accepted timings and /metrics
# counters; per request, speculative.type / n_max (and the Ollama,
# Anthropic forms) pick the method, p_min is accepted; each protocol reports
# the drafts in its own style; `muser serve --draft` drafts with dflash.
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
for args in "--spec eagle3" "--spec" "--draft-max 0" "--draft-max 65" "--draft-min -1" "--draft-max x"; do
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
ds=$(jget "$T/c" "j['timings']['spec_steps']")
if [ -n "$dn" ] && [ "$dn" -gt 0 ] && [ "$da" -le "$dn" ] && [ "$ds" -gt 0 ] && [ "$dn" -le $((8 * ds)) ]; then
  ok "serve: timings draft_n $dn, draft_n_accepted $da, spec_steps $ds"
else bad "serve: timings: $(jget "$T/c" "j['timings']")"; fi
curl -s "$BASE/metrics" >"$T/m"
mdn=$(sed -n 's/^llamacpp:spec_decode_num_draft_tokens_total //p' "$T/m")
mda=$(sed -n 's/^llamacpp:spec_decode_num_accepted_tokens_total //p' "$T/m")
if [ "$mdn" = "$dn" ] && [ "$mda" = "$da" ] && grep -q '^llamacpp:spec_decode_num_drafts_total [1-9]' "$T/m"; then
  ok "/metrics: spec_decode counters ($mdn drafted, $mda accepted)"
else bad "/metrics: spec counters $mdn/$mda vs $dn/$da"; fi
# per request: speculative.type none turns the server's default off; dflash
# without a drafter is a 400
curl -s "$BASE/completion" -H 'Content-Type: application/json' \
  -d "{\"prompt\": [$toks], \"n_predict\": 32, \"temperature\": 0, \"return_tokens\": true, \"ignore_eos\": true, \"speculative.type\": \"none\"}" >"$T/c"
got=$(jget "$T/c" "','.join(map(str, j['tokens']))")
if [ "$got" = "$want" ] && [ "$(jget "$T/c" "'draft_n' in j['timings']")" = False ]; then ok "serve: speculative.type none: no drafts, same tokens"
else bad "serve: speculative.type none: $(head -c 300 "$T/c")"; fi
code=$(curl -s -o "$T/c" -w '%{http_code}' "$BASE/completion" -H 'Content-Type: application/json' \
  -d '{"prompt": "hi", "n_predict": 4, "speculative.type": "dflash"}')
if [ "$code" = 400 ] && grep -q "drafter" "$T/c"; then ok "serve: speculative.type dflash without --draft: 400 ($(head -c 160 "$T/c"))"
else bad "serve: dflash without a drafter: $code $(head -c 300 "$T/c")"; fi
code=$(curl -s -o "$T/c" -w '%{http_code}' "$BASE/completion" -H 'Content-Type: application/json' \
  -d '{"prompt": "hi", "n_predict": 4, "speculative.type": "eagle3"}')
if [ "$code" = 400 ] && grep -q "speculative.type" "$T/c"; then ok "serve: an unknown speculative.type: 400"
else bad "serve: speculative.type eagle3: $code $(head -c 300 "$T/c")"; fi
# llama.cpp's speculative.p_min: accepted (no effect), 0..1
code=$(curl -s -o "$T/c" -w '%{http_code}' "$BASE/completion" -H 'Content-Type: application/json' \
  -d '{"prompt": "hi", "n_predict": 4, "speculative.p_min": 0.75}')
code2=$(curl -s -o "$T/c2" -w '%{http_code}' "$BASE/completion" -H 'Content-Type: application/json' \
  -d '{"prompt": "hi", "n_predict": 4, "speculative.p_min": 2}')
if [ "$code" = 200 ] && [ "$code2" = 400 ] && grep -q "speculative.p_min" "$T/c2"; then ok "serve: speculative.p_min 0.75 accepted, 2 a 400"
else bad "serve: speculative.p_min: $code $code2 $(head -c 300 "$T/c2")"; fi
# the telemetry of each protocol: the mean accepted drafts per step in
# llama.cpp's timings, Ollama's *_count fields, a speculative object in
# Anthropic's and the Responses API's answers
curl -s "$BASE/completion" -H 'Content-Type: application/json' \
  -d "{\"prompt\": [$toks], \"n_predict\": 32, \"temperature\": 0, \"ignore_eos\": true}" >"$T/c"
if [ "$(jget "$T/c" "(lambda t: abs(t['spec_accepted_per_step'] - t['draft_n_accepted'] / t['spec_steps']) < 1e-9)(j['timings'])")" = True ]; then
  ok "serve: timings.spec_accepted_per_step = draft_n_accepted / spec_steps"
else bad "serve: spec_accepted_per_step: $(jget "$T/c" "j['timings']")"; fi
curl -s "$BASE/api/generate" -H 'Content-Type: application/json' -d "{\"model\": \"muser-default\", \"prompt\": \"$P\", \"stream\": false, \"raw\": true, \"options\": {\"temperature\": 0, \"num_predict\": 32}}" >"$T/o"
if [ "$(jget "$T/o" "j['draft_count'] > 0 and 0 <= j['draft_accepted_count'] <= j['draft_count'] and j['draft_step_count'] > 0")" = True ]; then
  ok "ollama: draft_count $(jget "$T/o" "j['draft_count']"), draft_accepted_count $(jget "$T/o" "j['draft_accepted_count']"), draft_step_count"
else bad "ollama telemetry: $(head -c 400 "$T/o")"; fi
for route in messages responses; do
  if [ $route = messages ]; then
    body="{\"model\": \"muser-default\", \"max_tokens\": 32, \"messages\": [{\"role\": \"user\", \"content\": \"$P\"}], \"temperature\": 0}"
  else
    body="{\"model\": \"muser-default\", \"max_output_tokens\": 32, \"input\": \"$P\", \"temperature\": 0}"
  fi
  curl -s "$BASE/v1/$route" -H 'Content-Type: application/json' -d "$body" >"$T/a"
  # a speculative object (the prompt repeats itself: the job drafts), with counts that agree
  if [ "$(jget "$T/a" "(lambda s: s['draft_n'] > 0 and 0 <= s['draft_n_accepted'] <= s['draft_n'] and s['spec_steps'] > 0)(j['speculative'])")" = True ]; then ok "$route: speculative $(jget "$T/a" "j['speculative']")"
  else bad "$route telemetry: $(head -c 400 "$T/a")"; fi
done
stop_server

# DFlash: a random drafter for the bundled model, in llama.cpp's layout
D=$T/drafter.gguf
if "$MUSER" gen --dflash -o "$D" --target "$M" 2>"$T/err"; then ok "gen --dflash: $(cat "$T/err")"
else bad "gen --dflash: $(cat "$T/err")"; fi
for sampling in "--temp 0" "--temp 0.9 --seed 11"; do
  # shellcheck disable=SC2086
  plain=$("$MUSER" run -m "$M" -p "$P" -n 40 $sampling --json --threads 1 --ignore-eos 2>"$T/err" | ids)
  # shellcheck disable=SC2086
  "$MUSER" run -m "$M" -p "$P" -n 40 $sampling --json --threads 1 --ignore-eos --spec dflash --draft "$D" \
    >"$T/spec" 2>>"$T/err"
  spec=$(ids <"$T/spec")
  last=$(tail -1 "$T/spec")
  if [ -n "$plain" ] && [ "$plain" = "$spec" ] && echo "$last" | python3 -c '
import json, sys
t = json.loads(sys.stdin.read())["timings"]
assert t["predicted_n"] == 40 and 0 <= t["draft_n_accepted"] <= t["draft_n"] and t["draft_n"] > 0, t
'; then ok "run --spec dflash ($sampling): the tokens of plain decoding ($last)"
  else bad "run --spec dflash ($sampling): $plain vs $spec, $last ($(cat "$T/err"))"; fi
done
a=$("$MUSER" run -m "$M" -p "$P" -n 24 --temp 0 --threads 1 --draft "$D" 2>"$T/err")
b=$("$MUSER" run -m "$M" -p "$P" -n 24 --temp 0 --threads 1 2>/dev/null)
if [ "$a" = "$b" ] && grep -q "^spec dflash: drafted" "$T/err"; then ok "run --draft alone: dflash, same text"
else bad "run --draft: [$a] vs [$b] ($(cat "$T/err"))"; fi
# the shortlist head (muser.dflash.shortlist, written by tools/train/dflash_shortlist.py):
# a drafter with one drafts the same tokens as plain decoding; bad lists are refused by name
sl() { python3 -c "import sys; sys.path.insert(0, 'tools/train'); import dflash_shortlist as d; d.write_keys(sys.argv[1], sys.argv[2], [int(x) for x in sys.argv[3].split(',')], 'test')" "$D" "$T/sl.gguf" "$1"; }
sl "$(seq -s, 0 3 8000)"
plain=$("$MUSER" run -m "$M" -p "$P" -n 40 --temp 0 --json --threads 1 --ignore-eos 2>"$T/err" | ids)
spec=$("$MUSER" run -m "$M" -p "$P" -n 40 --temp 0 --json --threads 1 --ignore-eos --spec dflash --draft "$T/sl.gguf" 2>>"$T/err" | ids)
if [ -n "$plain" ] && [ "$plain" = "$spec" ]; then ok "run --spec dflash, a shortlist head of 2667 ids: the tokens of plain decoding"
else bad "shortlist head: $plain vs $spec ($(cat "$T/err"))"; fi
for bad_list in "5,9000" "5,5,7"; do
  sl "$bad_list"
  if ! "$MUSER" run -m "$M" -p "$P" -n 4 --threads 1 --spec dflash --draft "$T/sl.gguf" >/dev/null 2>"$T/err" &&
     grep -q "shortlist" "$T/err"; then ok "shortlist [$bad_list] refused: $(head -c 200 "$T/err")"
  else bad "shortlist [$bad_list]: $(cat "$T/err")"; fi
done
cp "$M" "$T/m.gguf" && cp "$D" "$T/m.dflash.gguf"
if "$MUSER" run -m "$T/m.gguf" -p "$P" -n 8 --temp 0 --threads 1 --spec dflash >/dev/null 2>"$T/err" &&
   grep -q "^spec dflash: drafted" "$T/err"; then ok "run --spec dflash: the model's own drafter (M.dflash.gguf next to M.gguf)"
else bad "run --spec dflash with M.dflash.gguf: $(cat "$T/err")"; fi
rm -f "$T/m.gguf" "$T/m.dflash.gguf"
"$MUSER" gen --preset tiny --seed 4 -o "$T/other.gguf" 2>/dev/null
for args in "--draft $M" "--draft /nonexistent.gguf" "--spec dflash"; do
  # shellcheck disable=SC2086
  "$MUSER" run -m "$T/other.gguf" -p hi -n 2 $args >/dev/null 2>"$T/err"
  rc=$?
  if [ $rc = 1 ] && [ "$(wc -l <"$T/err")" = 1 ] && grep -q "^muser run: " "$T/err"; then ok "run $args: $(cat "$T/err")"
  else bad "run $args: exit $rc: $(cat "$T/err")"; fi
done

# the bundled model's drafter (muser-default.dflash.gguf beside it) when no
# --draft is named: a repository layout in $T/repo (the binary, and a tiny
# generated model standing in for the bundled one)
R=$T/repo
mkdir -p "$R/models" && cp "$MUSER" "$R/muser" && "$MUSER" gen --preset tiny --seed 3 -o "$R/models/muser-default.gguf" 2>/dev/null
cp "$R/models/muser-default.gguf" "$T/copy.gguf"
"$R/muser" run -p "$P" -n 4 --temp 0 --threads 1 --spec dflash >/dev/null 2>"$T/err"
rc=$?
if [ $rc = 1 ] && [ "$(wc -l <"$T/err")" = 1 ] && grep -q "^muser run: --spec dflash: the bundled model's drafter is missing: .*/models/muser-default.dflash.gguf" "$T/err"
then ok "run --spec dflash, bundled model without its drafter: $(cat "$T/err")"
else bad "run --spec dflash, no bundled drafter: exit $rc: $(cat "$T/err")"; fi
"$R/muser" gen --dflash -o "$R/models/muser-default.dflash.gguf" 2>/dev/null
a=$("$R/muser" run -p "$P" -n 16 --temp 0 --threads 1 2>/dev/null)
for how in "the default model" "-m $T/copy.gguf (a copy)" "MUSER_MODEL=$T/copy.gguf"; do
  case $how in
  -m*) b=$("$R/muser" run -m "$T/copy.gguf" -p "$P" -n 16 --temp 0 --threads 1 --spec dflash 2>"$T/err") ;;
  MUSER*) b=$(MUSER_MODEL=$T/copy.gguf "$R/muser" run -p "$P" -n 16 --temp 0 --threads 1 --spec dflash 2>"$T/err") ;;
  *) b=$("$R/muser" run -p "$P" -n 16 --temp 0 --threads 1 --spec dflash 2>"$T/err") ;;
  esac
  if [ -n "$a" ] && [ "$a" = "$b" ] && grep -q "^spec dflash: drafted [1-9]" "$T/err"; then ok "run --spec dflash, $how: the bundled drafter, same text"
  else bad "run --spec dflash, $how: [$a] vs [$b] ($(cat "$T/err"))"; fi
done
# a file of the same size with one byte changed is another model
python3 -c 'import sys; f = open(sys.argv[1], "r+b"); f.seek(-1, 2); b = f.read(1); f.seek(-1, 2); f.write(bytes([b[0] ^ 1]))' "$T/copy.gguf"
"$R/muser" run -m "$T/copy.gguf" -p hi -n 2 --spec dflash >/dev/null 2>"$T/err"
rc=$?
if [ $rc = 1 ] && grep -q "needs --draft" "$T/err"; then ok "run --spec dflash, a changed copy: not the bundled model"
else bad "run --spec dflash, a changed copy: exit $rc: $(cat "$T/err")"; fi
rm -rf "$R" "$T/copy.gguf"

# the server with a drafter: dflash by default, other methods per request
start_server --parallel 2 --ctx 512 --threads 1 --draft "$D" || { bad "server start (--draft)"; exit 1; }
for spec in '' ', "speculative.type": "ngram", "speculative.n_max": 4' ', "speculative.type": "draft-dflash", "speculative.n_max": 3'; do
  curl -s "$BASE/completion" -H 'Content-Type: application/json' \
    -d "{\"prompt\": [$toks], \"n_predict\": 32, \"temperature\": 0, \"return_tokens\": true, \"ignore_eos\": true$spec}" >"$T/c"
  got=$(jget "$T/c" "','.join(map(str, j['tokens']))")
  dn=$(jget "$T/c" "j['timings'].get('draft_n', 0)")
  if [ "$got" = "$want" ] && [ "$dn" -gt 0 ]; then ok "serve --draft, request [$spec]: tokens of muser run, $dn drafted"
  else bad "serve --draft [$spec]: $got vs $want, draft_n $dn ($(head -c 300 "$T/c"))"; fi
done
curl -s "$BASE/api/generate" -H 'Content-Type: application/json' -d "{\"model\": \"muser-default\", \"prompt\": \"$P\", \"stream\": false, \"raw\": true, \"options\": {\"temperature\": 0, \"num_predict\": 8, \"speculative_type\": \"none\"}}" >"$T/o"
if [ "$(jget "$T/o" "j['done']")" = True ]; then ok "ollama: options.speculative_type accepted"
else bad "ollama speculative_type: $(head -c 300 "$T/o")"; fi
curl -s "$BASE/v1/messages" -H 'Content-Type: application/json' \
  -d '{"model": "muser-default", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}], "speculative": {"type": "dflash", "n_max": 4}}' >"$T/a"
if [ "$(jget "$T/a" "j['type']")" = message ]; then ok "anthropic: speculative object accepted"
else bad "anthropic speculative: $(head -c 300 "$T/a")"; fi
stop_server

echo "test_spec: $npass passed, $nfail failed"
exit $fail
