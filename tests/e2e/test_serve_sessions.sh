#!/usr/bin/env bash
# test_serve_sessions.sh: named sessions over HTTP (docs/api.md "Sessions"):
# create, continue with a revision check and an Idempotency-Key, save,
# restore in another server process, delete, a streamed turn; every check
# by the answers, /metrics counters and the pack store's files, never by
# timing. A restore verifies on a thread of its own: held at a gate
# (MUSER_TEST_RESTORE_GATE), the server's one HTTP thread still answers.
# Exactness: a turn continued from a session restored in another process
# (its KV state from the pack store, cache_source "pack": a delta
# pack of the second turn over the first's, restored as a chain) equals the
# same turn continued from the live session (cache_source "slot") bit for
# bit: the tokens and their log-probabilities. Both conversations are built
# the same way in a fresh server, so their states are the same rows.
SERVE_TEST_NAME=test_serve_sessions
source "$(dirname "$0")/serve_lib.sh"
export MUSER_HOME=$T/home
J='Content-Type: application/json'
ids() { python3 -c "import sys; print(','.join(str((i * int(sys.argv[3]) + int(sys.argv[2])) % 1000) for i in range(int(sys.argv[1]))))" "$1" "$2" "${3:-37}"; }
P=$(ids 600 11)
Q=$(ids 40 300 41)
R=$(ids 30 700 43)
mkdir -p "$T/store" "$T/store2"

# post PATH BODY OUT [HEADER]: the status code on stdout, the body in $T/OUT
post() {
  if [ -n "${4:-}" ]; then curl -s -o "$T/$3" -w '%{http_code}' "$BASE$1" -H "$J" -H "$4" -d "$2"
  else curl -s -o "$T/$3" -w '%{http_code}' "$BASE$1" -H "$J" -d "$2"; fi
}
turn() { # turn SESSION REVISION PROMPT_IDS OUT [HEADER]
  post "/v1/sessions/$1/continue" "{\"revision\":$2,\"prompt\":[$3],\"n_predict\":8,\"temperature\":0,\"ignore_eos\":true,\"logprobs\":true}" "$4" "${5:-}"
}
src_of() { jget "$T/$1" "j['cache_source'], j['timings']['cache_n']"; }
metric() { curl -s "$BASE/metrics" | sed -n "s/^llamacpp:$1 //p"; }
same() { # bit for bit: the tokens and their log-probabilities
  python3 - "$T/$1" "$T/$2" <<'EOF'
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
assert a["tokens"] == b["tokens"] and a["logprobs"] == b["logprobs"], (a["tokens"], b["tokens"])
assert len(a["tokens"]) == 8
EOF
}

# ---- one server: the routes and their rules --------------------------------
start_server --parallel 2 --ctx 2048 --threads 1 --pack-dir "$T/store" || { bad "server start"; exit 1; }
[ "$(post /v1/sessions '{"id":"a"}' c1)" = 201 ] && [ "$(jget "$T/c1" "j['revision'], j['n_tokens']")" = "0 0" ] \
  && ok "create: 201, revision 0" || bad "create: $(cat "$T/c1")"
[ "$(post /v1/sessions '{"id":"a"}' c2)" = 409 ] && ok "create an existing id: 409" || bad "duplicate: $(cat "$T/c2")"
[ "$(post /v1/sessions '{"id":"a/b"}' c3)" = 400 ] && ok "a bad id: 400" || bad "bad id: $(cat "$T/c3")"
[ "$(post /v1/sessions '{"idd":"x"}' c4)" = 400 ] && grep -q idd "$T/c4" && ok "an unknown field: 400 naming it" || bad "unknown field: $(cat "$T/c4")"
[ "$(post /v1/sessions '{}' c5)" = 201 ] && jget "$T/c5" "j['id']" | grep -q '^sess-' && ok "create without an id: one is made" \
  || bad "generated id: $(cat "$T/c5")"
# a turn whose pack cannot be written fails and changes nothing
post /v1/sessions '{"id":"f"}' f0 >/dev/null
echo x >"$T/store/session-f"
[ "$(turn f 0 "$Q" f1)" = 500 ] && grep -q "is not a directory" "$T/f1" && [ "$(curl -s "$BASE/v1/sessions/f" | python3 -c "import json,sys; j=json.load(sys.stdin); print(j['revision'], j['n_tokens'], j['busy'])")" = "0 0 False" ] \
  && ok "a turn that cannot save: 500, the session unchanged" || bad "failed save: $(cat "$T/f1")"
rm "$T/store/session-f"
[ "$(turn f 0 "$Q" f2)" = 200 ] && ok "the same turn once the store is writable: 200" || bad "after the failure: $(cat "$T/f2")"
[ "$(turn nosuch 0 "$Q" n1)" = 404 ] && ok "continue an unknown session: 404" || bad "unknown session: $(cat "$T/n1")"
# a streamed turn: chunks, then the answer as the last event, then [DONE]; the same turn as f's
post /v1/sessions '{"id":"st"}' st0 >/dev/null
SB="{\"revision\":0,\"prompt\":[$Q],\"n_predict\":8,\"temperature\":0,\"ignore_eos\":true,\"logprobs\":true,\"stream\":true}"
curl -s -N -D "$T/sth" -o "$T/st1" "$BASE/v1/sessions/st/continue" -H "$J" -H 'Idempotency-Key: s-1' -d "$SB"
sse_check() { # sse_check FILE REF: chunks add up to the answer, whose tokens are REF's (REF's prompt was
  # evaluated whole; this one may reuse its rows, so log-probabilities may differ in the last bits)
  python3 - "$1" "$2" <<'EOF'
import json, sys
ev = [l[6:] for l in open(sys.argv[1]).read().split("\n") if l.startswith("data: ")]
assert ev[-1] == "[DONE]", ev[-1]
fin = json.loads(ev[-2]); ref = json.load(open(sys.argv[2]))
chunks = [json.loads(e) for e in ev[:-2]]
assert fin["object"] == "session.turn" and fin["revision"] == 1, fin
assert all(c["object"] == "session.turn.chunk" for c in chunks)
assert sum((c["tokens"] for c in chunks), []) == fin["tokens"] == ref["tokens"], (fin["tokens"], ref["tokens"])
assert sum((c["logprobs"] for c in chunks), []) == fin["logprobs"] and len(fin["logprobs"]) == 8
assert "".join(c["content"] for c in chunks) == fin["content"] == ref["content"]
EOF
}
grep -qi '^content-type: text/event-stream' "$T/sth" && sse_check "$T/st1" "$T/f2" && [ "$(curl -s "$BASE/v1/sessions/st" | python3 -c "import json,sys; print(json.load(sys.stdin)['revision'])")" = 1 ] \
  && ok "a streamed turn: its chunks add up to its answer (the last event), the same as a turn not streamed; committed" \
  || bad "streamed turn: $(head -c 600 "$T/st1")"
curl -s -N -D "$T/sth2" -o "$T/st2" "$BASE/v1/sessions/st/continue" -H "$J" -H 'Idempotency-Key: s-1' -d "$SB"
grep -qi '^Idempotent-Replayed: true' "$T/sth2" && grep -qi '^content-type: text/event-stream' "$T/sth2" \
  && [ "$(grep '^data: {' "$T/st2")" = "$(grep '^data: {' "$T/st1" | tail -1)" ] && tail -2 "$T/st2" | grep -q '^data: \[DONE\]' \
  && ok "a streamed turn replayed by its key: the answer event again, then [DONE]" || bad "stream replay: $(head -c 400 "$T/st2")"

[ "$(turn a 0 "$P" t1)" = 200 ] && [ "$(jget "$T/t1" "j['revision'], j['n_tokens'], j['persisted']")" = "1 608 True" ] \
  && ok "turn 1: revision 1, 608 tokens, persisted" || bad "turn 1: $(head -c 400 "$T/t1")"
[ -f "$T/store/session-a/manifest.kvpk" ] && [ -f "$T/store/session-a/tokens.kvtok" ] \
  && ok "the turn's pack is in the store, with its token ids" || bad "no pack: $(ls -R "$T/store")"
"$MUSER" pack verify -m "$MODEL" --ctx 2048 "$T/store/session-a" >"$T/v1" 2>&1 && ok "muser pack verify: the session's pack is ok" \
  || { "$MUSER" pack verify "$T/store/session-a" >"$T/v1" 2>&1 && ok "muser pack verify: the session's pack is ok" || bad "verify: $(cat "$T/v1")"; }
[ "$(turn a 0 "$Q" t1b)" = 409 ] && grep -q "revision 0 is not the session's (1)" "$T/t1b" && ok "a stale revision: 409" \
  || bad "stale revision: $(cat "$T/t1b")"

req0=$(metric requests_total)
[ "$(turn a 1 "$Q" t2 'Idempotency-Key: k-1')" = 200 ] && [ "$(src_of t2)" = "slot 607" ] \
  && ok "turn 2: the live slot's 607 positions reused (all but the last token: sampled, not evaluated)" || bad "turn 2: $(src_of t2) $(head -c 300 "$T/t2")"
code=$(curl -s -D "$T/h3" -o "$T/t2r" -w '%{http_code}' "$BASE/v1/sessions/a/continue" -H "$J" -H 'Idempotency-Key: k-1' \
  -d "{\"revision\":1,\"prompt\":[$Q],\"n_predict\":8,\"temperature\":0,\"ignore_eos\":true,\"logprobs\":true}")
[ "$code" = 200 ] && cmp -s "$T/t2" "$T/t2r" && grep -qi '^Idempotent-Replayed: true' "$T/h3" \
  && ok "the same key and body again: the same answer, marked replayed" || bad "replay: $code $(head -c 300 "$T/t2r")"
[ "$(metric requests_total)" = "$((req0 + 1))" ] && ok "the replay ran nothing (requests_total +1 for turn 2 only)" \
  || bad "requests_total $req0 -> $(metric requests_total)"
kind() { "$MUSER" pack inspect --json "$1" | python3 -c "import json,sys; print(json.load(sys.stdin)['kind'])"; }
[ "$(kind "$T/store/session-a")" = delta ] && [ -f "$T/store/session-a/parent-1.kvpk" ] \
  && "$MUSER" pack verify -m "$MODEL" --ctx 2048 "$T/store/session-a" >/dev/null 2>&1 \
  && ok "turn 2 wrote a delta pack on turn 1's (its ancestor carried as hard links), verified as a chain" \
  || bad "turn 2's pack: $(kind "$T/store/session-a") $(ls "$T/store/session-a" | head -3)"
[ "$(turn a 1 "$R" t2x 'Idempotency-Key: k-1')" = 422 ] && ok "the same key with another body: 422" || bad "key reuse: $(cat "$T/t2x")"
curl -s "$BASE/v1/sessions/a" >"$T/g1"
[ "$(jget "$T/g1" "j['revision'], j['n_tokens'], j['busy']")" = "2 656 False" ] && ok "GET: revision 2, 656 tokens" || bad "get: $(cat "$T/g1")"
[ "$(post /v1/sessions/a/save '{}' s1)" = 200 ] && [ "$(jget "$T/s1" "j['revision'], j['pack'], j['encrypted']")" = "2 session-a True" ] \
  && ok "save: the pack holds revision 2, encrypted" || bad "save: $(cat "$T/s1")"
curl -s "$BASE/v1/sessions" >"$T/l1"
[ "$(jget "$T/l1" "sorted(s['id'] for s in j['data'])[:2]")" = "['a', 'f']" ] && [ "$(jget "$T/l1" "len(j['data'])")" = 4 ] && ok "list: the four sessions" || bad "list: $(cat "$T/l1")"
[ "$(curl -s -o /dev/null -w '%{http_code}' -X DELETE "$BASE/v1/sessions/$(jget "$T/c5" "j['id']")")" = 200 ] \
  && ok "delete: 200" || bad "delete"
stop_server

# ---- another process: restore, then the next turn equals the live one -------
MUSER_TEST_RESTORE_GATE=$T/gate start_server --parallel 2 --ctx 2048 --threads 1 --http-threads 1 --pack-dir "$T/store" \
  || { bad "server start 2"; exit 1; }
[ "$(turn a 0 "$R" r0)" = 404 ] && ok "a new process knows no session before a restore" || bad "before restore: $(cat "$T/r0")"
post /v1/sessions/a/restore '{}' r1 >"$T/r1.code" &
RP=$!
busy_a() { curl -s "$BASE/v1/sessions/a" | python3 -c "import json,sys; print(json.load(sys.stdin).get('busy'))" 2>/dev/null; }
for ((i = 0; i < 600; i++)); do [ "$(busy_a)" = True ] && break; sleep 0.1; done # until the restore holds the session
[ "$(busy_a)" = True ] && [ "$(curl -s -o /dev/null -w '%{http_code}' "$BASE/health")" = 200 ] && [ "$(turn a 0 "$R" r0b)" = 409 ] \
  && ok "while a restore verifies (held at its gate), the server's one HTTP thread answers; a turn of the session is 409" \
  || bad "during the restore: $(busy_a) $(cat "$T/r0b" 2>/dev/null)"
touch "$T/gate"
wait $RP
[ "$(cat "$T/r1.code")" = 200 ] && [ "$(jget "$T/r1" "j['revision'], j['n_tokens']")" = "1 656" ] \
  && ok "restore: 656 tokens, revision 1" || bad "restore: $(cat "$T/r1")"
[ "$(turn a 1 "$R" t3p)" = 200 ] && [ "$(src_of t3p)" = "pack 655" ] \
  && ok "turn 3 after the restore: 655 positions from the session's pack" || bad "turn 3: $(src_of t3p) $(head -c 300 "$T/t3p")"
[ "$(post /v1/sessions/zz/restore '{}' r2)" = 404 ] && ok "restore without a pack: 404" || bad "restore nothing: $(cat "$T/r2")"
cp -r "$T/store/session-a" "$T/store/session-bad"
f=$(ls "$T/store/session-bad"/*.kvchk | head -1)
python3 tests/e2e/flip_byte.py "$f" 100
[ "$(post /v1/sessions/bad/restore '{}' r3)" = 400 ] && grep -q "verdict" "$T/r3" && ok "a corrupt pack: 400 with its verdict" \
  || bad "corrupt: $(cat "$T/r3")"
[ "$(curl -s -o /dev/null -w '%{http_code}' "$BASE/v1/sessions/bad")" = 404 ] && ok "a failed restore makes no session" || bad "bad session made"
[ "$(curl -s -o /dev/null -w '%{http_code}' -X DELETE "$BASE/v1/sessions/a")" = 200 ] && [ ! -e "$T/store/session-a" ] \
  && ok "delete removes the session's pack" || bad "delete: $(ls "$T/store")"
[ "$(curl -s -o /dev/null -w '%{http_code}' "$BASE/v1/sessions/a")" = 404 ] && ok "GET after delete: 404" || bad "get after delete"
stop_server

# the live reference: the same three turns in one fresh process
start_server --parallel 2 --ctx 2048 --threads 1 --pack-dir "$T/store2" || { bad "server start 3"; exit 1; }
post /v1/sessions '{"id":"live"}' l0 >/dev/null
turn live 0 "$P" l1 >/dev/null
turn live 1 "$Q" l2 >/dev/null
same t2 l2 && ok "turn 2 in another process: the same answer" || bad "turn 2 differs across processes"
[ "$(turn live 2 "$R" l3)" = 200 ] && [ "$(src_of l3)" = "slot 655" ] && same t3p l3 \
  && ok "restored session == live session, bit for bit (tokens, log-probabilities)" || bad "restored != live: $(src_of l3) $(head -c 300 "$T/l3") vs $(head -c 300 "$T/t3p")"
stop_server

# ---- no pack store: sessions live in memory ------------------------------
start_server --parallel 1 --ctx 2048 --threads 1 || { bad "server start 4"; exit 1; }
post /v1/sessions '{"id":"m"}' m0 >/dev/null
[ "$(turn m 0 "$Q" m1)" = 200 ] && [ "$(jget "$T/m1" "j['persisted']")" = False ] && ok "without --pack-dir: a turn, not persisted" \
  || bad "memory turn: $(cat "$T/m1")"
[ "$(turn m 1 "$R" m2)" = 200 ] && [ "$(src_of m2)" = "slot 47" ] && ok "the next turn reuses the live slot" || bad "memory turn 2: $(src_of m2)"
[ "$(post /v1/sessions/m/save '{}' m3)" = 501 ] && ok "save without --pack-dir: 501" || bad "save: $(cat "$T/m3")"
stop_server

# ---- the store's budget (--pack-max-bytes): least recently used packs go ----
rm -rf "$T/store3" && mkdir -p "$T/store3"
start_server --parallel 1 --ctx 2048 --threads 1 --pack-dir "$T/store3" || { bad "server start (budget)"; exit 1; }
post /v1/sessions '{"id":"b1"}' b0 >/dev/null
turn b1 0 "$Q" b1 >/dev/null
stop_server
PB=$(du -sb "$T/store3/session-b1" | cut -f1)
for k in 1 2 3; do cp -r "$T/store3/session-b1" "$T/store3/old$k"; touch -d "2020-01-0$k" "$T/store3/old$k"; done
touch -d "2020-02-01" "$T/store3/session-b1"
# room for two packs and a half: the start trims the store to the two newest (session-b1, old3)
start_server --parallel 1 --ctx 2048 --threads 1 --pack-dir "$T/store3" --pack-max-bytes $((PB * 5 / 2)) || { bad "server start (budget 2)"; exit 1; }
[ ! -e "$T/store3/old1" ] && [ ! -e "$T/store3/old2" ] && [ -e "$T/store3/old3" ] && [ -e "$T/store3/session-b1" ] \
  && ok "the start trims the store to its budget, oldest first" || bad "start trim: $(ls "$T/store3")"
post /v1/sessions/b1/restore '{}' b2 >/dev/null
post /v1/sessions '{"id":"b2"}' b3 >/dev/null
[ "$(turn b2 0 "$R" b4)" = 200 ] && [ -e "$T/store3/session-b2" ] && [ ! -e "$T/store3/old3" ] && [ -e "$T/store3/session-b1" ] \
  && ok "a turn's new pack pushes the least recently used one out" || bad "turn trim: $(ls "$T/store3")"
[ "$(turn b1 1 "$R" b5)" = 200 ] && [ "$(src_of b5)" = "pack $(($(jget "$T/b2" "j['n_tokens']") - 1))" ] \
  && ok "the kept session restores from its pack ($(src_of b5))" || bad "b1 turn: $(src_of b5) $(head -c 200 "$T/b5")"
[ ! -e "$T/store3/session-b2" ] && [ -e "$T/store3/session-b1" ] && ok "then b2's pack was the least recently used" || bad "lru: $(ls "$T/store3")"
[ "$(post /v1/sessions/b2/save '{}' b6)" = 409 ] && grep -q "evicted" "$T/b6" && ok "save of an evicted session: 409" \
  || bad "evicted save: $(cat "$T/b6")"
[ "$(metric pack_store_evicted_total)" = 4 ] && [ "$(metric pack_store_bytes_max)" = "$((PB * 5 / 2))" ] \
  && ok "/metrics: 4 packs evicted, the budget" || bad "metrics: $(metric pack_store_evicted_total) $(metric pack_store_bytes_max)"
[ -z "$(ls -A "$T/store3" | grep '^\.')" ] && ok "no partial or removal left behind" || bad "leftovers: $(ls -A "$T/store3")"
stop_server
out=$("$MUSER" serve -m "$MODEL" --pack-max-bytes 1M 2>&1); [ $? != 0 ] && echo "$out" | grep -q "needs --pack-dir" \
  && ok "--pack-max-bytes without --pack-dir: refused" || bad "budget without store: $out"

# ---- the bundled model (a sliding window of 256): restored == live ------------
if [ -f models/muser-default.gguf ]; then
  MODEL=models/muser-default.gguf
  rm -rf "$T/store" "$T/store2" && mkdir -p "$T/store" "$T/store2"
  start_server --parallel 1 --ctx 2048 --threads 1 --pack-dir "$T/store" || { bad "server start 5"; exit 1; }
  post /v1/sessions '{"id":"w"}' w0 >/dev/null
  turn w 0 "$P" w1 >/dev/null
  turn w 1 "$Q" w2 >/dev/null
  stop_server
  start_server --parallel 1 --ctx 2048 --threads 1 --pack-dir "$T/store" || { bad "server start 6"; exit 1; }
  post /v1/sessions/w/restore '{}' w3 >/dev/null
  turn w 1 "$R" w4 >/dev/null
  stop_server
  start_server --parallel 1 --ctx 2048 --threads 1 --pack-dir "$T/store2" || { bad "server start 7"; exit 1; }
  post /v1/sessions '{"id":"w"}' x0 >/dev/null
  turn w 0 "$P" x1 >/dev/null
  turn w 1 "$Q" x2 >/dev/null
  turn w 2 "$R" x3 >/dev/null
  stop_server
  [ "$(src_of w4)" = "pack 655" ] && [ "$(src_of x3)" = "slot 655" ] && same w4 x3 \
    && ok "bundled model: restored session == live session, bit for bit" || bad "bundled model: $(src_of w4) / $(src_of x3)"
else
  echo "skip bundled model: models/muser-default.gguf is absent"
fi

echo "test_serve_sessions: $npass passed, $nfail failed"
exit $fail
