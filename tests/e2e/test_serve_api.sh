#!/usr/bin/env bash
# test_serve_api.sh: `muser serve` on loopback with curl: every route of the
# three protocols, streaming shapes (SSE with [DONE], llama.cpp SSE, Ollama
# NDJSON), greedy parity with `muser run`, the bad-input corpus over every
# route (400/404/405/413/415 in each protocol's error shape), 429 with
# Retry-After when slots and queue are full, cancellation on disconnect,
# the bind policy, TLS with a bearer key.
SERVE_TEST_NAME=test_serve_api
source "$(dirname "$0")/serve_lib.sh"

MUSER_TEST_HOLD=2 start_server --parallel 2 --queue 1 --ctx 1024 --threads 1 || { bad "server start"; exit 1; }
J='Content-Type: application/json'
req() { # req METHOD PATH BODY -> $T/out, prints status
  curl -s -o "$T/out" -w '%{http_code}' -X "$1" "$BASE$2" -H "$J" ${3:+--data-binary "$3"}
}

# ---- continuous batching: two concurrent greedy requests with different
# prompt lengths share forward calls and still produce exactly the tokens of
# `muser run`. The server runs with MUSER_TEST_HOLD=2 (its scheduler starts
# no job until two are queued), so the two requests always overlap however
# busy the machine is; these are the server's first two jobs.
N=12
PA=1,2,3,4,5
PB=7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,33,34,35,36,37,38,39,40
run_ids() { "$MUSER" run -m "$MODEL" --prompt-ids "$1" -n $N --temp 0 --json --threads 1 --ignore-eos 2>/dev/null |
  python3 -c "import sys,json; print(','.join(str(json.loads(l)['id']) for l in sys.stdin if l.strip()))"; }
dec0=$(curl -s "$BASE/metrics" | sed -n 's/^llamacpp:n_decode_total //p')
ppids=()
for p in A B; do
  eval "prompt=\$P$p"
  curl -s "$BASE/completion" -H "$J" -d "{\"prompt\":[$prompt],\"n_predict\":$N,\"temperature\":0,\"return_tokens\":true,\"ignore_eos\":true}" >"$T/par$p" &
  ppids+=($!)
done
wait "${ppids[@]}"
dec1=$(curl -s "$BASE/metrics" | sed -n 's/^llamacpp:n_decode_total //p')
RA=$(run_ids $PA); RB=$(run_ids $PB)
QA=$(jget "$T/parA" "','.join(map(str,j['tokens']))"); QB=$(jget "$T/parB" "','.join(map(str,j['tokens']))")
if [ -n "$RA" ] && [ "$QA" = "$RA" ] && [ -n "$RB" ] && [ "$QB" = "$RB" ]; then ok "two concurrent greedy requests (prompts of 5 and 34 tokens) == muser run"
else bad "concurrent parity: run [$RA] [$RB] api [$QA] [$QB]"; fi
steps=$(python3 -c "print(int(float('$dec1') - float('$dec0')))")
# one request after the other would need 2 x N forward calls
[ "$steps" -lt $((2 * N)) ] && ok "continuous batching: $((2 * N)) tokens in $steps forward calls" || bad "no batching: $steps forward calls for $((2 * N)) tokens"

# ---- the sampler chain over HTTP: llama.cpp's penalty, DRY and logit-bias
# fields give the tokens `muser run` gives with the same flags (and not the
# plain greedy ones, so the fields are not ignored)
SP=4,695,788,566,527,39,477
SFLAGS="--repeat-penalty 0.5 --repeat-last-n 16 --frequency-penalty 0.5 --presence-penalty 0.25 --dry-multiplier 0.8 --logit-bias 10+2.5 --logit-bias 11-inf"
RP=$("$MUSER" run -m "$MODEL" --prompt-ids $SP -n $N --temp 0 --json --threads 1 --ignore-eos $SFLAGS 2>"$T/err" |
  python3 -c "import sys,json; print(','.join(str(json.loads(l)['id']) for l in sys.stdin if l.strip()))")
R0=$(run_ids $SP)
curl -s "$BASE/completion" -H "$J" -d "{\"prompt\":[$SP],\"n_predict\":$N,\"temperature\":0,\"return_tokens\":true,\"ignore_eos\":true,\"repeat_penalty\":0.5,\"repeat_last_n\":16,\"frequency_penalty\":0.5,\"presence_penalty\":0.25,\"dry_multiplier\":0.8,\"logit_bias\":[[10,2.5],[11,false]]}" >"$T/pen"
QP=$(jget "$T/pen" "','.join(map(str,j['tokens']))")
if [ -n "$RP" ] && [ "$QP" = "$RP" ] && [ "$RP" != "$R0" ]; then ok "/completion with penalties, DRY and logit_bias == muser run with the same flags"
else bad "sampler parity: run [$RP] api [$QP] plain [$R0] $(cat "$T/err")"; fi
# ignore_eos as llama.cpp's server: end-of-generation tokens get -inf, so
# even a huge bias on them cannot make them come out
EOS=$("$MUSER" info -m "$MODEL" | awk '/^tokens/ {print $5}')
curl -s "$BASE/completion" -H "$J" -d "{\"prompt\":[$SP],\"n_predict\":6,\"temperature\":0,\"return_tokens\":true,\"ignore_eos\":true,\"logit_bias\":[[$EOS,1000]]}" >"$T/eog"
curl -s "$BASE/completion" -H "$J" -d "{\"prompt\":[$SP],\"n_predict\":6,\"temperature\":0,\"return_tokens\":true,\"logit_bias\":[[$EOS,1000]]}" >"$T/eog2"
[ -n "$EOS" ] && [ "$(jget "$T/eog" "len([t for t in j['tokens'] if t == $EOS])")" = 0 ] && [ "$(jget "$T/eog" "len(j['tokens'])")" = 6 ] &&
  [ "$(jget "$T/eog2" "j['tokens']")" = "[$EOS]" ] && ok "ignore_eos bans end-of-generation tokens (a bias of 1000 on eos $EOS cannot bring it back)" ||
  bad "ignore_eos: $(cat "$T/eog") / $(cat "$T/eog2")"
# OpenAI's names on /v1/completions, against the same fields on /completion
PF='"temperature":0,"frequency_penalty":0.7,"presence_penalty":0.3,"repeat_penalty":0.5,"logit_bias":{"10":2.5,"11":false}'
curl -s "$BASE/v1/completions" -H "$J" -d "{\"prompt\":[$SP],\"max_tokens\":$N,$PF}" >"$T/oapen"
curl -s "$BASE/completion" -H "$J" -d "{\"prompt\":[$SP],\"n_predict\":$N,$PF}" >"$T/lcpen"
QT=$(jget "$T/oapen" "j['choices'][0]['text']"); QC=$(jget "$T/lcpen" "j['content']")
curl -s "$BASE/completion" -H "$J" -d "{\"prompt\":[$SP],\"n_predict\":$N,\"temperature\":0}" >"$T/lc0"
Q0=$(jget "$T/lc0" "j['content']")
[ -n "$QT" ] && [ "$QT" = "$QC" ] && [ "$QT" != "$Q0" ] && ok "/v1/completions frequency_penalty, presence_penalty, logit_bias == /completion's" ||
  bad "OpenAI penalties: [$QT] /completion [$QC] plain [$Q0]"


# ---- basics
[ "$(req GET /health)" = 200 ] && [ "$(jget "$T/out" "j['status']")" = ok ] && ok "GET /health" || bad "GET /health"
ID=$(req GET /v1/models >/dev/null; jget "$T/out" "j['data'][0]['id']")
[ -n "$ID" ] && ok "GET /v1/models: $ID" || bad "GET /v1/models"
[ "$(req GET /models)" = 200 ] && [ "$(jget "$T/out" "j['data'][0]['id']")" = "$ID" ] && ok "GET /models (OpenAI without /v1)" || bad "GET /models: $(cat "$T/out")"
[ "$(req POST /chat/completions '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":2}')" = 200 ] &&
  [ "$(jget "$T/out" "j['object']")" = chat.completion ] && ok "POST /chat/completions (OpenAI without /v1)" || bad "POST /chat/completions: $(cat "$T/out")"
[ "$(req POST /chat/completions '{"messages":[],"bogus":1}')" = 400 ] && [ -n "$(jget "$T/out" "j['error']['type']")" ] &&
  ok "POST /chat/completions errors in OpenAI's shape" || bad "/chat/completions error shape: $(cat "$T/out")"
[ "$(req GET /api/tags)" = 200 ] && [ "$(jget "$T/out" "j['models'][0]['model']")" = "$ID:latest" ] && ok "GET /api/tags" || bad "GET /api/tags"
[ "$(req POST /api/show "{\"model\":\"$ID\"}")" = 200 ] && [ "$(jget "$T/out" "j['details']['format']")" = gguf ] && ok "POST /api/show" || bad "POST /api/show"
[ "$(req GET /props)" = 200 ] && [ "$(jget "$T/out" "j['total_slots']")" = 2 ] && ok "GET /props" || bad "GET /props"
[ "$(req GET /slots)" = 200 ] && [ "$(jget "$T/out" "len(j)")" = 2 ] && ok "GET /slots" || bad "GET /slots"
[ "$(req GET /metrics)" = 200 ] && grep -q '^llamacpp:prompt_tokens_total ' "$T/out" && ok "GET /metrics (Prometheus text)" || bad "GET /metrics"

# ---- tokenize / detokenize round trip, apply-template
req POST /tokenize '{"content":"Hello world","add_special":false}' >/dev/null
TOKS=$(jget "$T/out" "','.join(map(str,j['tokens']))")
[ -n "$TOKS" ] && ok "POST /tokenize: [$TOKS]" || bad "POST /tokenize"
req POST /detokenize "{\"tokens\":[$TOKS]}" >/dev/null
[ "$(jget "$T/out" "j['content']")" = "Hello world" ] && ok "POST /detokenize round trip" || bad "detokenize: $(cat "$T/out")"
[ "$(req POST /apply-template '{"messages":[{"role":"user","content":"hi"}]}')" = 200 ] &&
  jget "$T/out" "j['prompt']" | grep -q hi && ok "POST /apply-template" || bad "apply-template: $(cat "$T/out")"

# ---- greedy parity with muser run
N=12
RUN_IDS=$("$MUSER" run -m "$MODEL" --prompt-ids 1,2,3,4,5 -n $N --temp 0 --json --threads 1 2>/dev/null |
  python3 -c "import sys,json; print(','.join(str(json.loads(l)['id']) for l in sys.stdin if l.strip()))")
req POST /completion "{\"prompt\":[1,2,3,4,5],\"n_predict\":$N,\"temperature\":0,\"return_tokens\":true}" >/dev/null
API_IDS=$(jget "$T/out" "','.join(map(str,j['tokens']))")
if [ -n "$RUN_IDS" ] && [ "$RUN_IDS" = "$API_IDS" ]; then ok "greedy /completion == muser run ($API_IDS)"
else bad "greedy parity: run [$RUN_IDS] api [$API_IDS]"; fi
req POST /v1/completions "{\"prompt\":[1,2,3,4,5],\"max_tokens\":$N,\"temperature\":0,\"logprobs\":2}" >/dev/null
[ "$(jget "$T/out" "j['usage']['completion_tokens']")" -ge 1 ] 2>/dev/null &&
  [ "$(jget "$T/out" "len(j['choices'][0]['logprobs']['top_logprobs'][0])")" = 2 ] && ok "POST /v1/completions with logprobs" || bad "v1/completions: $(head -c 300 "$T/out")"

# ---- chat, non-streaming and streaming
req POST /v1/chat/completions '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":4,"temperature":0,"logprobs":true,"top_logprobs":2}' >/dev/null
[ "$(jget "$T/out" "j['object']")" = chat.completion ] && [ "$(jget "$T/out" "j['choices'][0]['message']['role']")" = assistant ] &&
  [ "$(jget "$T/out" "j['usage']['total_tokens'] == j['usage']['prompt_tokens'] + j['usage']['completion_tokens']")" = True ] &&
  [ "$(jget "$T/out" "'prompt_ms' in j['timings']")" = True ] && ok "chat completion (usage, timings, logprobs)" || bad "chat: $(head -c 400 "$T/out")"

check_sse() { # file, expect_done(1/0)
  python3 - "$1" "$2" <<'EOF'
import json, sys
data = open(sys.argv[1]).read()
assert data.endswith("\n\n"), "stream does not end with a blank line"
events = [e for e in data.split("\n\n") if e]
for e in events:
    assert e.startswith("data: "), e
done = events[-1] == "data: [DONE]"
if sys.argv[2] == "1":
    assert done, "no [DONE]"
    events = events[:-1]
objs = [json.loads(e[6:]) for e in events]
print(len(objs))
EOF
}
curl -sN "$BASE/v1/chat/completions" -H "$J" -d '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":5,"temperature":0,"stream":true,"stream_options":{"include_usage":true}}' >"$T/sse"
if n=$(check_sse "$T/sse" 1) && grep -q '"usage":{"prompt_tokens"' "$T/sse" && grep -q '"finish_reason":"length"' "$T/sse"; then ok "chat SSE: $n events, usage chunk, [DONE]"; else bad "chat SSE: $(head -c 600 "$T/sse")"; fi
curl -sN "$BASE/completion" -H "$J" -d '{"prompt":"Hello","n_predict":4,"temperature":0,"stream":true}' >"$T/sse2"
if check_sse "$T/sse2" 0 >/dev/null && tail -c 2000 "$T/sse2" | grep -q '"stop":true'; then ok "llama.cpp /completion stream"; else bad "completion stream: $(head -c 400 "$T/sse2")"; fi
curl -sN "$BASE/api/chat" -H "$J" -d '{"messages":[{"role":"user","content":"Hi"}],"options":{"temperature":0,"num_predict":4}}' >"$T/nd"
if python3 - "$T/nd" <<'EOF'
import json, sys
lines = open(sys.argv[1]).read().splitlines()
objs = [json.loads(l) for l in lines]
assert all(not o["done"] for o in objs[:-1]) and objs[-1]["done"], "done flags"
last = objs[-1]
for k in ("total_duration", "prompt_eval_count", "eval_count", "eval_duration", "done_reason"):
    assert k in last, k
assert last["eval_count"] == 4, last
EOF
then ok "Ollama /api/chat NDJSON done record"; else bad "ollama chat: $(head -c 400 "$T/nd")"; fi
[ "$(req POST /api/generate '{"prompt":"Hi","stream":false,"options":{"temperature":0,"num_predict":3}}')" = 200 ] &&
  [ "$(jget "$T/out" "j['done'] and j['eval_count']")" = 3 ] && ok "Ollama /api/generate non-streaming" || bad "generate: $(cat "$T/out")"

# ---- bad-input corpus: METHOD PATH CONTENT-TYPE BODY STATUS SHAPE
# SHAPE: openai (.error.message), llama (.error.code), ollama (.error string)
python3 - "$BASE" <<'EOF' || fail=1
import json, sys, urllib.request
base = sys.argv[1]
cases = [
  ("POST", "/v1/chat/completions", "application/json", '{"messages":[{"role":"user","contnt":"x"}]}', 400, "openai", "messages[0].contnt"),
  ("POST", "/v1/chat/completions", "text/plain", '{"messages":[]}', 415, "openai", "Content-Type"),
  ("POST", "/v1/chat/completions", "application/json", '{"messages":[{"role":"user","content":"x"}],"top_p":1.5}', 400, "openai", "top_p"),
  ("POST", "/v1/chat/completions", "application/json", '{"model":"other","messages":[{"role":"user","content":"x"}]}', 404, "openai", "not found"),
  ("POST", "/v1/chat/completions", "application/json", '{"messages":', 400, "openai", "malformed"),
  ("POST", "/v1/chat/completions", "application/json", b'{"messages":[{"role":"user","content":"\xff"}]}', 400, "openai", "malformed"),
  ("POST", "/v1/chat/completions", "application/json", '{"messages":[{"role":"user","content":"x"}],"tool_choice":"required"}', 400, "openai", "tool_choice"),
  ("POST", "/v1/completions", "application/json", '{"prompt":"x","n":17}', 400, "openai", "'n'"),
  ("POST", "/v1/chat/completions", "application/json", '{"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema","json_schema":{"name":"a","schema":{"type":"string","pattern":"a"}}}}', 400, "openai", "'pattern'"),
  ("POST", "/v1/completions", "application/json", '{"prompt":[1,99999999]}', 400, "openai", "prompt[1]"),
  ("GET", "/v1/chat/completions", None, None, 405, "openai", "not allowed"),
  ("GET", "/v1/nothing", None, None, 404, "openai", "no such route"),
  ("POST", "/completion", "application/json", '{"prompt":"x","n_predict":"3"}', 400, "llama", "n_predict"),
  ("POST", "/completion", "application/json", '[1,2]', 400, "llama", "object"),
  ("POST", "/completion", "application/json", '{"prompt":"x","prompt":"y"}', 400, "llama", "malformed"),
  ("POST", "/completion", "application/x-www-form-urlencoded", 'prompt=x', 415, "llama", "Content-Type"),
  ("POST", "/tokenize", "application/json", '{"content":"x","extra":true}', 400, "llama", "extra"),
  ("POST", "/detokenize", "application/json", '{"tokens":[1.5]}', 400, "llama", "tokens[0]"),
  ("POST", "/detokenize", "application/json", '{"tokens":[123456789]}', 400, "llama", "out of range"),
  ("POST", "/apply-template", "application/json", '{"messages":[{"role":"user"}],"x":1}', 400, "llama", "'x'"),
  ("POST", "/health", "application/json", '{}', 405, "llama", "not allowed"),
  ("POST", "/api/generate", "application/json", '{"prompt":"x","options":{"num_predict":-5}}', 400, "ollama", "num_predict"),
  ("POST", "/api/generate", "application/json", '{"prompt":"x","format":"xml"}', 400, "ollama", "format"),
  ("POST", "/completion", "application/json", '{"prompt":"x","json_schema":{"oneOf":[]}}', 400, "llama", "'oneOf'"),
  ("POST", "/api/chat", "application/json", '{"messages":[{"role":"user","content":"x","images":["aGk="]}]}', 400, "ollama", "image"),
  ("POST", "/api/chat", "application/json", '{"model":"nope:latest","messages":[]}', 404, "ollama", "not found"),
  ("POST", "/api/show", "application/json", '{"model":"x","bogus":1}', 400, "ollama", "bogus"),
]
bad = 0
for method, path, ct, body, status, shape, needle in cases:
    data = body.encode() if isinstance(body, str) else body
    r = urllib.request.Request(base + path, data=data, method=method)
    if ct: r.add_header("Content-Type", ct)
    try:
        resp = urllib.request.urlopen(r, timeout=30); code = resp.status; text = resp.read()
    except urllib.error.HTTPError as e:
        code = e.code; text = e.read()
    try:
        j = json.loads(text)
        if shape == "openai": msg = j["error"]["message"]; assert "type" in j["error"]
        elif shape == "llama": msg = j["error"]["message"]; assert j["error"]["code"] == status
        else: msg = j["error"]; assert isinstance(msg, str)
    except Exception as e:
        msg = None
    if code != status or msg is None or needle not in msg:
        print(f"FAIL bad input {method} {path} {body!r}: got {code} {text[:200]!r}"); bad = 1
    else:
        print(f"ok   bad input {method} {path} -> {code} ({shape} shape)")
sys.exit(bad)
EOF
head -c 9000000 /dev/zero | tr '\0' ' ' >"$T/big"
[ "$(curl -s -o "$T/out" -w '%{http_code}' "$BASE/v1/completions" -H "$J" --data-binary @"$T/big")" = 413 ] && ok "oversized body -> 413" || bad "413: $(cat "$T/out")"

[ "$(req GET /health)" = 200 ] && ok "server healthy after the bad-input corpus" || bad "server unhealthy"
stop_server

# ---- 429 and hang-ups, without timing: MUSER_TEST_HOLD=4 keeps every job
# queued (2 slots + 1 queue place take at most 3), MUSER_TEST_STALL_AFTER=3
# makes a running job stop after 3 tokens until it is cancelled
metric() { curl -s "$BASE/metrics" | sed -n "s/^llamacpp:$1 //p" | cut -d. -f1; }
wait_metric() { # NAME VALUE: until the metric has the value (a hang detector, 600 s)
  for _ in $(seq 1 3000); do [ "$(metric "$1")" = "$2" ] && return 0; sleep 0.2; done; return 1; }
MUSER_TEST_HOLD=4 start_server --parallel 2 --queue 1 --ctx 1024 --threads 1 || { bad "server start (held)"; exit 1; }
pids=()
for i in 1 2 3; do
  curl -s -o "$T/b$i" "$BASE/completion" -H "$J" -d '{"prompt":[1,2,3],"n_predict":8}' &
  pids+=($!)
done
if wait_metric requests_deferred 3; then
  c4=$(curl -s -D "$T/h4" -o "$T/b4" -w '%{http_code}' "$BASE/completion" -H "$J" -d '{"prompt":[1,2,3],"n_predict":8}')
  [ "$c4" = 429 ] && grep -qi '^retry-after:' "$T/h4" && ok "overflow -> 429 with Retry-After (3 held, the 4th rejected)" ||
    bad "429: got $c4: $(cat "$T/b4")"
else bad "429: the three held requests never queued: $(curl -s "$BASE/metrics" | grep deferred)"; fi
# queued requests whose clients hang up leave the queue at once
kill "${pids[@]}" 2>/dev/null; wait "${pids[@]}" 2>/dev/null
wait_metric requests_cancelled_total 3 && wait_metric requests_deferred 0 &&
  ok "queued requests of clients that hung up are cancelled and leave the queue" ||
  bad "queued hang-ups: $(curl -s "$BASE/metrics" | grep -E 'cancelled|deferred')"
stop_server

MUSER_TEST_STALL_AFTER=3 start_server --parallel 2 --queue 1 --ctx 1024 --threads 1 || { bad "server start (stall)"; exit 1; }
pids=()
for i in 1 2; do
  curl -sN "$BASE/v1/completions" -H "$J" -d '{"prompt":[1,2,3],"max_tokens":1000,"stream":true}' >"$T/s$i" &
  pids+=($!)
done
wait_metric tokens_predicted_total 6 # both streams are running and stalled
kill "${pids[@]}" 2>/dev/null; wait "${pids[@]}" 2>/dev/null
if wait_metric requests_cancelled_total 2 && wait_metric requests_processing 0; then
  ok "client disconnect cancels its running jobs (2 cancelled, slots idle, $(metric tokens_predicted_total) tokens)"
else bad "disconnect: $(curl -s "$BASE/metrics" | grep -E 'cancelled|processing|predicted_total')"; fi
[ "$(req GET /health)" = 200 ] && ok "server healthy after the disconnects" || bad "server unhealthy"
stop_server

# ---- bind policy and TLS with a bearer key
if "$MUSER" serve -m "$MODEL" --host 0.0.0.0 --port 0 2>"$T/err"; then bad "non-loopback bind without TLS/key was accepted"
else grep -q "refusing" "$T/err" && ok "non-loopback bind without TLS and key refused" || bad "bind refusal message: $(cat "$T/err")"; fi
if command -v openssl >/dev/null; then
  openssl req -x509 -newkey rsa:2048 -nodes -keyout "$T/key.pem" -out "$T/cert.pem" -days 1 -subj /CN=localhost >/dev/null 2>&1
  printf 'test-key-123\n' >"$T/apikey"; chmod 644 "$T/apikey"
  if "$MUSER" serve -m "$MODEL" --port 0 --api-key-file "$T/apikey" 2>"$T/err"; then bad "key file with mode 644 accepted"
  else grep -q 0600 "$T/err" && ok "API key file with mode 644 refused" || bad "mode message: $(cat "$T/err")"; fi
  chmod 600 "$T/apikey"
  if start_server --threads 1 --tls-cert "$T/cert.pem" --tls-key "$T/key.pem" --api-key-file "$T/apikey"; then
    c1=$(curl -sk -o /dev/null -w '%{http_code}' "$BASE/v1/models")
    c2=$(curl -sk -o /dev/null -w '%{http_code}' "$BASE/v1/models" -H 'Authorization: Bearer wrong-key-123')
    c3=$(curl -sk -o /dev/null -w '%{http_code}' "$BASE/v1/models" -H 'Authorization: Bearer test-key-123')
    c4=$(curl -sk -o /dev/null -w '%{http_code}' "$BASE/health")
    [ "$c1$c2$c3$c4" = 401401200200 ] && ok "TLS + bearer key: 401 without/wrong key, 200 with key, /health open" || bad "TLS auth: $c1 $c2 $c3 $c4"
    stop_server
  else bad "TLS server start"; fi
else
  echo "skip TLS checks: openssl is missing"
fi

echo "test_serve_api: $npass passed, $nfail failed"
exit $fail
