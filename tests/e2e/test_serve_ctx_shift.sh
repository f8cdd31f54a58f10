#!/usr/bin/env bash
# test_serve_ctx_shift.sh: llama.cpp's context shift over HTTP (docs/api.md,
# "Context shift"). A generation asked for more tokens than the slot holds:
# - without --context-shift it stops where the slot is full, with llama.cpp's
#   answer (truncated, stop_type "limit");
# - with --context-shift it goes on to n_predict, truncated, and its tokens
#   are `muser run --context-shift`'s (the scheduler's shift, which
#   tests/golden/shift-check.py compares with llama.cpp bit for bit), with
#   the request's n_keep / n_discard too;
# - a shifted slot's rows cannot be saved by position: the save answers an
#   error naming the shift, never a wrong pack.
SERVE_TEST_NAME=test_serve_ctx_shift
source "$(dirname "$0")/serve_lib.sh"
J='Content-Type: application/json'
P=$(python3 -c "print(','.join(str((i * 37 + 11) % 1000) for i in range(50)))")
mkdir -p "$T/slots"

# ask OUT EXTRA_JSON: a greedy /completion of 400 tokens from P
ask() {
  curl -s "$BASE/completion" -H "$J" \
    -d "{\"prompt\":[$P],\"n_predict\":400,\"temperature\":0,\"ignore_eos\":true,\"return_tokens\":true$2}" >"$T/$1"
}
# run_ids OUT ARGS...: muser run's greedy ids, one per line
run_ids() {
  local out=$1; shift
  "$MUSER" run -m "$MODEL" --prompt-ids "$P" --ctx 256 -n 400 --temp 0 --ignore-eos --json "$@" 2>"$T/run.err" |
    python3 -c "import json,sys; print(json.dumps([json.loads(l)['id'] for l in sys.stdin if '\"id\"' in l]))" >"$T/$out"
}

# --- without --context-shift: the slot fills, the answer says so
start_server --ctx 256 || { bad "server start"; exit 1; }
ask off ""
got=$(jget "$T/off" "(len(j['tokens']), j['truncated'], j['stop_type'], j['tokens_evaluated'])")
[ "$got" = "(206, True, 'limit', 50)" ] && ok "no shift: 206 tokens (256 - 50), truncated, stop_type limit" ||
  bad "no shift: got $got: $(head -c 300 "$T/off")"
stop_server

# --- with --context-shift: the generation goes on
start_server --ctx 256 --context-shift --slot-save-path "$T/slots" || { bad "server start (shift)"; exit 1; }
ask on ""
got=$(jget "$T/on" "(len(j['tokens']), j['truncated'], j['stop_type'], j['tokens_cached'])")
# two shifts of n_keep 1 (BOS kept): 255 -> 128 -> ... ; cached = 450 - discarded
[ "${got%%,*}" = "(400" ] && echo "$got" | grep -q "True, 'limit'" && ok "shift: 400 tokens past a 256-token slot, truncated ($got)" ||
  bad "shift: got $got: $(head -c 300 "$T/on")"
run_ids run_on --context-shift
if [ -s "$T/run_on" ] && [ "$(jget "$T/on" "json.dumps(j['tokens'])")" = "$(cat "$T/run_on")" ]; then
  ok "shift: the server's tokens are muser run --context-shift's"
else bad "shift: server and muser run differ: $(head -c 200 "$T/run_on") $(cat "$T/run.err")"; fi
ask keep ",\"n_keep\":-1,\"n_discard\":20"
got=$(jget "$T/keep" "(len(j['tokens']), j['truncated'], j['tokens_cached'])")
run_ids run_keep --context-shift --keep -1 --discard 20
if [ "$(jget "$T/keep" "json.dumps(j['tokens'])")" = "$(cat "$T/run_keep")" ] && [ "${got%%,*}" = "(400" ]; then
  ok "shift with n_keep -1, n_discard 20: muser run --keep -1 --discard 20's tokens ($got)"
else bad "n_keep/n_discard: got $got"; fi
if [ "$(cat "$T/run_keep")" != "$(cat "$T/run_on")" ]; then ok "n_keep / n_discard change the answer"
else bad "n_keep / n_discard changed nothing"; fi
# streamed: the last chunk says truncated, after 400 tokens
curl -sN "$BASE/completion" -H "$J" \
  -d "{\"prompt\":[$P],\"n_predict\":400,\"temperature\":0,\"ignore_eos\":true,\"stream\":true,\"cache_prompt\":false}" >"$T/stream"
got=$(python3 - "$T/stream" <<'EOF2'
import json, sys
ev = [json.loads(l[6:]) for l in open(sys.argv[1]) if l.startswith("data: ") and l[6:].strip() != "[DONE]"]
last = ev[-1]
print(sum(1 for e in ev if not e.get("stop")), last.get("stop"), last.get("truncated"), last.get("tokens_predicted"))
EOF2
)
[ "$got" = "400 True True 400" ] && ok "shift, streamed: 400 token chunks, the last says truncated" || bad "streamed: got $got"
# the slot's session is shifted now: saving it by position is refused
code=$(curl -s -o "$T/save" -w '%{http_code}' "$BASE/slots/0?action=save" -H "$J" -d '{"filename":"x"}')
if [ "$code" != 200 ] && grep -q "shifted" "$T/save"; then ok "a shifted slot's save is refused ($code, names the shift)"
else bad "save of a shifted slot: $code $(head -c 300 "$T/save")"; fi
# a short request still answers as before (the slot's next job starts fresh)
curl -s "$BASE/completion" -H "$J" -d "{\"prompt\":[$P],\"n_predict\":8,\"temperature\":0,\"ignore_eos\":true,\"return_tokens\":true}" >"$T/short"
got=$(jget "$T/short" "(len(j['tokens']), j['truncated'])")
[ "$got" = "(8, False)" ] && ok "a request that fits is not truncated" || bad "short request after shifts: $got"
stop_server

echo "test_serve_ctx_shift: $npass passed, $nfail failed"
exit $fail
