#!/usr/bin/env bash
# test_serve_prefix.sh: the server's reuse ladder over HTTP (docs/kvpack.md
# "The server's prefix cache"): live slot -> resident prefix cache -> pack
# store -> prefill, counted by /metrics (never by timing) and reported per
# request (timings.cache_n, cache_source).
# Exactness: with the default block (512, the scheduler's prefill chunk) a
# restored prefix ends where a lone cold prefill splits its ubatches, so the
# cached answer equals the cold one bit for bit (tokens and probabilities).
# With a 16-token block the restore ends inside the cold run's ubatch, and
# llama.cpp's numbers (and muser's) depend on where ubatches split: only the
# greedy ids are promised, under the tie-aware rule (a divergence only where
# the reference's two best candidates are within 1e-3).
# A corrupt pack in the store is a miss with a log line; the server answers.
SERVE_TEST_NAME=test_serve_prefix
source "$(dirname "$0")/serve_lib.sh"
export MUSER_HOME=$T/home
J='Content-Type: application/json'
ids() { python3 -c "import sys; print(','.join(str((i * int(sys.argv[3]) + int(sys.argv[2])) % 1000) for i in range(int(sys.argv[1]))))" "$1" "$2" "${3:-37}"; }
P=$(ids 600 11)
U=$(ids 600 500 41)
W=$(ids 300 7 43)
REST=$(ids 50 900 13)
mkdir -p "$T/store"

# ask NAME PROMPT_IDS CACHE_PROMPT: a greedy /completion with probabilities
ask() {
  curl -s "$BASE/completion" -H "$J" -d "{\"prompt\":[$2],\"n_predict\":8,\"temperature\":0,\"return_tokens\":true,\"ignore_eos\":true,\"n_probs\":2,\"cache_prompt\":$3}" >"$T/$1"
}
src_of() { jget "$T/$1" "j['cache_source'], j['timings']['cache_n']"; }
metric() { curl -s "$BASE/metrics" | sed -n "s/^llamacpp:$1 //p"; }
same() { # bit for bit: the tokens and their probabilities
  python3 - "$T/$1" "$T/$2" <<'EOF'
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
assert a["tokens"] == b["tokens"] and a["content"] == b["content"], (a["tokens"], b["tokens"])
assert a["completion_probabilities"] == b["completion_probabilities"]
EOF
}
greedy_same() { # tie-aware: the first divergence only where $2's two best are within 1e-3
  python3 - "$T/$1" "$T/$2" <<'EOF'
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
for x, y, pr in zip(a["tokens"], b["tokens"], b["completion_probabilities"]):
    if x != y:
        top = pr["top_logprobs"] if "top_logprobs" in pr else pr["top_probs"]
        v = [t.get("logprob", t.get("prob")) for t in top]
        assert len(v) > 1 and abs(v[0] - v[1]) < 1e-3, (x, y, top)
        break
EOF
}

start_server --parallel 2 --ctx 2048 --threads 1 --pack-dir "$T/store" || { bad "server start"; exit 1; }

ask a "$P" true
[ "$(src_of a)" = "none 0" ] && ok "first request: nothing cached ($(src_of a))" || bad "first request: $(src_of a) $(head -c 300 "$T/a")"
ask cold "$P" false
same a cold && ok "cache_prompt false: the cold answer" || bad "cold answer differs"
ask u "$U" true # takes slot 0 (no slot shares more): P's rows live on only in the tree
ask d "$P" true
[ "$(src_of d)" = "cache 512" ] && ok "prefix cache: 512 tokens restored ($(src_of d))" || bad "prefix cache: $(src_of d)"
same a d && ok "cached answer = the answer of the session it came from, bit for bit" || bad "cached answer differs"
[ "$(metric prompt_tokens_cached_prefix_total)" = 512 ] && ok "/metrics: 512 prompt tokens from the prefix cache" \
  || bad "/metrics prefix tokens: $(metric prompt_tokens_cached_prefix_total)"
[ "$(metric prompt_cache_requests_prefix_total)" = 1 ] && [ "$(metric prompt_cache_requests_miss_total)" = 2 ] \
  && ok "/metrics: 1 request from the cache, 2 misses" || bad "/metrics requests: $(curl -s "$BASE/metrics" | grep prompt_cache_requests)"
[ "$(metric prefix_cache_nodes)" = 2 ] && ok "/metrics: 2 blocks resident (P's and U's first 512)" || bad "nodes: $(metric prefix_cache_nodes)"
ask e "$P" true
[ "$(src_of e)" = "slot 599" ] && ok "live slot first: $(src_of e)" || bad "live slot: $(src_of e)"
greedy_same e a && ok "live slot: greedy ids = the cold run (tie-aware)" || bad "live slot ids differ"
ask u2 "$U" true # the slot again holds U (its first 512 from the cache): the next P comes from the prefix cache
curl -s "$BASE/v1/completions" -H "$J" -d "{\"prompt\":[$P],\"max_tokens\":2,\"temperature\":0,\"cache_prompt\":true}" >"$T/oai"
[ "$(jget "$T/oai" "j['usage']['prompt_tokens_details']['cached_tokens']")" = 512 ] && ok "OpenAI usage.prompt_tokens_details.cached_tokens: 512" \
  || bad "OpenAI cached_tokens: $(head -c 300 "$T/oai")"
curl -s "$BASE/snapshot" >"$T/snap"
[ "$(jget "$T/snap" "j['prompt_reuse']['cache']['tokens']['value'], j['memory']['prefix_cache_bytes']['value'] > 0")" = "1536 True" ] \
  && ok "/snapshot: prompt_reuse and prefix_cache_bytes" || bad "/snapshot: $(jget "$T/snap" "j.get('prompt_reuse'), j['memory']")"

# the pack store: a pack of W saved by the CLI serves W + REST
"$MUSER" pack save -m "$MODEL" --prompt-ids "$W" -o "$T/store/w" --ctx 2048 >/dev/null 2>"$T/err" || bad "pack save: $(cat "$T/err")"
ask h "$W,$REST" true
[ "$(src_of h)" = "pack 300" ] && ok "pack store: 300 tokens restored ($(src_of h))" || bad "pack store: $(src_of h)"
"$MUSER" run -m "$MODEL" --pack "$T/store/w" --prompt-ids "$REST" --temp 0 --json -n 8 >"$T/run" 2>"$T/err" || bad "run --pack: $(cat "$T/err")"
python3 -c "
import json, sys
a = [json.loads(l)['id'] for l in open(sys.argv[1])]
b = json.load(open(sys.argv[2]))['tokens']
assert a == b, (a, b)" "$T/run" "$T/h" && ok "pack store answer = muser run --pack (same split), ids" || bad "pack answer differs from run --pack"
ask hcold "$W,$REST" false
greedy_same h hcold && ok "pack store: greedy ids = the cold run (tie-aware)" || bad "pack store ids differ from cold"
[ "$(metric prompt_tokens_cached_pack_total)" = 300 ] && ok "/metrics: 300 tokens from the pack store" || bad "/metrics pack: $(metric prompt_tokens_cached_pack_total)"

# corrupt packs in the store: a longer pack with a damaged chunk is chosen,
# fails to restore (a miss, logged); a damaged manifest is skipped (logged)
"$MUSER" pack save -m "$MODEL" --prompt-ids "$W,$(ids 20 3)" -o "$T/store/y" --ctx 2048 >/dev/null 2>&1 || bad "pack save y"
f=$(ls "$T/store/y"/*.kvchk | head -1)
python3 tests/e2e/flip_byte.py "$f" 300
cp -r "$T/store/w" "$T/store/z"
python3 tests/e2e/flip_byte.py "$T/store/z/manifest.kvpk" 100
ask k "$W,$(ids 20 3),$REST" true
jget "$T/k" "len(j['tokens'])" | grep -qx 8 && ok "corrupt store packs: the server still answers ($(src_of k))" || bad "corrupt store: $(head -c 300 "$T/k")"
ask kcold "$W,$(ids 20 3),$REST" false
greedy_same k kcold && ok "corrupt store packs: the answer is the cold one" || bad "corrupt store: answer differs"
n=$(metric prefix_cache_store_errors_total)
[ "${n%.*}" -ge 2 ] 2>/dev/null && ok "/metrics: $n store errors counted" || bad "store errors: $n"
grep -q "kvcache: store pack y failed to restore" "$T/server.log" && grep -q "kvcache: store pack z skipped" "$T/server.log" \
  && ok "store errors logged, one line each" || bad "no log lines: $(grep kvcache "$T/server.log" | head -3)"

code=$(curl -s -o "$T/s0" -w '%{http_code}' "$BASE/slots/0?action=save" -H "$J" -d '{"filename":"x"}')
[ "$code" = 501 ] && grep -q "slot-save-path" "$T/s0" && ok "/slots actions without --slot-save-path: 501" || bad "no slot path: $code $(cat "$T/s0")"
stop_server

# llama.cpp's /slots/{id}?action=save|restore|erase on packs
mkdir -p "$T/slots"
start_server --parallel 2 --ctx 2048 --threads 1 --slot-save-path "$T/slots" --cache-bytes 0 || { bad "server start (slots)"; exit 1; }
slot() { curl -s -o "$T/$1" -w '%{http_code}' "$BASE/slots/$2" -H "$J" -d "$3"; }
code=$(slot s1 "0?action=save" '{"filename":"a"}')
[ "$code" = 400 ] && grep -q "Unable to save slot" "$T/s1" && ok "save of an empty slot: 400" || bad "empty save: $code $(cat "$T/s1")"
ask sa "$P" true
code=$(slot s2 "0?action=save" '{"filename":"a"}')
[ "$code" = 200 ] && [ "$(jget "$T/s2" "j['id_slot'], j['filename'], j['n_saved'], j['n_written'] > 0, 'save_ms' in j['timings']")" = "0 a 607 True True" ]   && ok "save: $(cat "$T/s2")" || bad "save: $code $(cat "$T/s2")"
"$MUSER" pack verify -m "$MODEL" "$T/slots/a" >"$T/v" 2>&1 && ok "the saved slot is a pack: verify -m ok" || bad "verify slot pack: $(cat "$T/v")"
G=$(jget "$T/sa" "','.join(str(t) for t in j['tokens'][:7])")
ask sx "$P,$G,$REST" true # the live slot continues: its 607 positions and 50 more
[ "$(src_of sx)" = "slot 607" ] || bad "continuation on the live slot: $(src_of sx)"
code=$(slot s3 "0?action=erase" '{}')
[ "$code" = 200 ] && [ "$(jget "$T/s3" "j['id_slot'], j['n_erased']")" = "0 664" ] && ok "erase: $(cat "$T/s3")" || bad "erase: $code $(cat "$T/s3")"
curl -s "$BASE/slots" >"$T/sl"
[ "$(jget "$T/sl" "j[0]['n_past']")" = 0 ] && ok "erased slot holds nothing" || bad "erased slot: $(cat "$T/sl")"
code=$(slot s4 "1?action=restore" '{"filename":"a"}')
[ "$code" = 200 ] && [ "$(jget "$T/s4" "j['id_slot'], j['filename'], j['n_restored'], j['n_read'] > 0, 'restore_ms' in j['timings']")" = "1 a 607 True True" ] \
  && ok "restore into slot 1: $(cat "$T/s4")" || bad "restore: $code $(cat "$T/s4")"
ask sy "$P,$G,$REST" true
[ "$(src_of sy)" = "slot 607" ] && ok "the restored slot serves the continuation ($(src_of sy))" || bad "after restore: $(src_of sy)"
same sx sy && ok "restored slot: the answer of the session it was saved from, bit for bit" || bad "restored slot answer differs"
ask sw "$P" true # inside the restored positions: a slot save keeps every row the ring held, so it cuts back
[ "$(src_of sw)" = "slot 599" ] && greedy_same sw sa && ok "a prompt inside the restored positions reuses 599 ($(src_of sw)); greedy ids = the original" \
  || bad "short prompt: $(src_of sw)"
ask sz "$P,$G,$REST" false
greedy_same sy sz && ok "restored slot: greedy ids = the cold run (tie-aware)" || bad "restored slot: ids differ from cold"
for fn in '../a' 'a/b' '.hidden' '' 'x\\y'; do
  code=$(slot s5 "0?action=restore" "{\"filename\":\"$fn\"}")
  [ "$code" = 400 ] && grep -q "Invalid filename" "$T/s5" || bad "filename '$fn' not refused: $code $(cat "$T/s5")"
done
code=$(slot s5 "0?action=save" '{"file":"a"}'); [ "$code" = 400 ] && grep -q "Invalid filename" "$T/s5" || bad "no filename: $code"
ok "path traversal and bad names refused (400 Invalid filename)"
code=$(slot s6 "7?action=save" '{"filename":"a"}'); c2=$(slot s7 "x?action=save" '{"filename":"a"}')
[ "$code" = 400 ] && [ "$c2" = 400 ] && grep -q "Invalid slot ID" "$T/s6" && ok "bad slot ids: 400" || bad "slot id: $code $c2"
code=$(slot s8 "0?action=fly" '{}'); [ "$code" = 400 ] && grep -q "Invalid action" "$T/s8" && ok "bad action: 400" || bad "action: $code"
code=$(slot s9 "0?action=restore" '{"filename":"nope"}')
[ "$code" = 400 ] && grep -q "Unable to restore slot: kvpack: no pack at" "$T/s9" && ok "restore of a missing file: 400" || bad "missing: $code $(cat "$T/s9")"
"$MUSER" pack save -m "$MODEL" --prompt-ids "$W" -o "$T/slots/noids" --ctx 2048 >/dev/null 2>&1
code=$(slot s10 "0?action=restore" '{"filename":"noids"}')
[ "$code" = 400 ] && grep -q "no token ids" "$T/s10" && ok "restore of a pack without token ids: 400" || bad "noids: $code $(cat "$T/s10")"
python3 tests/e2e/flip_byte.py "$T/slots/a/tokens.kvtok" 60
code=$(slot s11 "0?action=restore" '{"filename":"a"}')
[ "$code" = 400 ] && grep -q "authenticate" "$T/s11" && ok "a damaged token sidecar: 400" || bad "sidecar: $code $(cat "$T/s11")"
ask sc "$P" true
jget "$T/sc" "len(j['tokens'])" | grep -qx 8 && ok "the server serves on after failed restores" || bad "after failures: $(head -c 200 "$T/sc")"
stop_server

# a 16-token block: restores end inside the cold run's ubatch
start_server --parallel 1 --ctx 2048 --threads 1 --cache-block 16 || { bad "server start (block 16)"; exit 1; }
ask a16 "$P" true
ask u16 "$U" true
ask d16 "$P" true
[ "$(src_of d16)" = "cache 592" ] && ok "block 16: 592 tokens restored" || bad "block 16: $(src_of d16)"
greedy_same d16 a && ok "block 16: greedy ids = the cold run (tie-aware; the ubatch split differs)" || bad "block 16 ids differ"
stop_server

# --cache-bytes 0: no tree, the live slot only
start_server --parallel 1 --ctx 2048 --threads 1 --cache-bytes 0 || { bad "server start (no cache)"; exit 1; }
ask a0 "$P" true
ask u0 "$U" true
ask d0 "$P" true
[ "$(src_of d0)" = "none 0" ] && ok "--cache-bytes 0: no prefix cache" || bad "--cache-bytes 0: $(src_of d0)"
[ -z "$(metric prefix_cache_nodes)" ] && ok "--cache-bytes 0: no prefix_cache metrics" || bad "metrics with no cache"
stop_server
# the bundled model (window 256): the same two promises
if [ -f models/muser-default.gguf ]; then
  MODEL=models/muser-default.gguf
  start_server --parallel 1 --ctx 2048 --threads 1 || { bad "server start (bundled model)"; exit 1; }
  ask ba "$P" true
  ask bu "$U" true
  ask bd "$P" true
  [ "$(src_of bd)" = "cache 512" ] && same ba bd && ok "bundled model: 512 cached tokens, the answer bit for bit" || bad "bundled model: $(src_of bd)"
  stop_server
  start_server --parallel 1 --ctx 2048 --threads 1 --cache-block 16 || { bad "server start (bundled model, block 16)"; exit 1; }
  ask bu16 "$U" true
  ask bd16 "$P" true # U's blocks only: nothing
  ask bu16 "$U" true
  ask bd16 "$P" true
  [ "$(src_of bd16)" = "cache 592" ] && greedy_same bd16 ba && ok "bundled model, block 16: greedy ids = the cold run (tie-aware)"     || bad "bundled model block 16: $(src_of bd16)"
  stop_server
else
  echo "skip bundled model: models/muser-default.gguf is absent"
fi
out=$("$MUSER" serve -m "$MODEL" --cache-bytes 12X 2>&1); [ $? != 0 ] && echo "$out" | grep -q "cache-bytes must be" && ok "bad --cache-bytes refused" || bad "bad --cache-bytes: $out"

echo "test_serve_prefix: $npass passed, $nfail failed"
exit $fail
