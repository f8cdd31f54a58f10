#!/usr/bin/env bash
# test_lane.sh: remote prefill end to end with real processes on loopback
# and real mutual TLS 1.3 (docs/lane.md): a producer with --enroll, node add
# (enrollment, pinning, three qualification handoffs), remote answers equal
# local answers bit for bit (several prompt lengths, run and serve with 1
# and 2 slots, the bundled model too when MUSER_LANE_DEFAULT=1, engine
# chunks below the step), a delta handoff from the server's prefix cache
# equal to the full one, deltas on a live slot (chat's second turn, a
# server conversation) equal to local and tampered ones refused, the tamper
# hook (flip, truncate, drop, duplicate, reorder at many frames and
# offsets, replay, stale generation, wrong epoch) each refused with its
# reason while auto falls back to the right answer, a wrong model refused
# by identity, unpinned certificates refused at the handshake (both ways),
# the replay ledger across decoder restarts, a producer SIGKILLed mid-stream
# (tamper kill: deterministic), the circuit breaker, the busy answer, the
# single-use token, and a producer of another kernel class (relabelled by a
# test hook): qualified under the tie-aware rule, its rows kept out of the
# prefix cache and slot saves. No verdict depends on timing.
set -u
cd "$(dirname "$0")/../.."
MUSER=${MUSER_BIN:-$PWD/muser}
[ -x "$MUSER" ] || { echo "test_lane: skipped: no muser binary at $MUSER"; exit 0; }
T=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$T"; }
trap cleanup EXIT
fail=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=1; }
export MUSER_HOME=$T/dec
PHOME=$T/prod

"$MUSER" gen -o "$T/m.gguf" --preset tiny --type q8_0 --seed 3 2>/dev/null || { bad "gen"; exit 1; }
"$MUSER" gen -o "$T/other.gguf" --preset tiny --type q8_0 --seed 4 2>/dev/null || { bad "gen other"; exit 1; }
ids() { python3 -c "import sys; print(','.join(str((i * 37 + int(sys.argv[2])) % 1000) for i in range(int(sys.argv[1]))))" "$1" "$2"; }

# start_producer TAMPER [extra args]: sets PPID_ and PORT (the first start picks a port, later ones reuse it)
PORT=0
start_producer() {
  local tamper=$1; shift
  : >"$T/prod.out"; : >"$T/prod.err"
  MUSER_HOME=$PHOME MUSER_LANE_TAMPER=$tamper "$MUSER" producer -m "$T/m.gguf" --listen 127.0.0.1:$PORT "$@" \
    >"$T/prod.out" 2>"$T/prod.err" &
  PPID_=$!
  PIDS+=("$PPID_")
  for _ in $(seq 300); do
    grep -q ' on 127.0.0.1:' "$T/prod.err" && break
    kill -0 "$PPID_" 2>/dev/null || break
    sleep 0.1
  done
  PORT=$(sed -n 's/.* on 127\.0\.0\.1:\([0-9]*\) .*/\1/p' "$T/prod.err" | head -1)
  [ -n "$PORT" ] || { bad "producer did not start: $(cat "$T/prod.err")"; exit 1; }
}
stop_producer() { kill "$PPID_" 2>/dev/null; wait "$PPID_" 2>/dev/null; }

# ---- tls init / issue: never overwrite ----------------------------------------------
"$MUSER" tls init --dir "$T/ca" >/dev/null 2>&1 && "$MUSER" tls issue --name gpu --san 127.0.0.1 --dir "$T/ca" >/dev/null 2>&1 \
  && [ "$(stat -c %a "$T/ca/ca.key")" = 600 ] && [ "$(stat -c %a "$T/ca/gpu.key")" = 600 ] \
  && openssl x509 -in "$T/ca/gpu.pem" -noout -ext subjectAltName 2>/dev/null | grep -q 'IP Address:127.0.0.1' \
  && ok "tls init and issue (keys 0600, the SAN as an IP address)" || bad "tls init/issue"
k0=$(sha256sum "$T/ca/ca.key" "$T/ca/gpu.key")
out=$("$MUSER" tls init --dir "$T/ca" 2>&1) && bad "tls init overwrote" || echo "$out" | grep -q 'never overwritten' || bad "tls init: $out"
out=$("$MUSER" tls issue --name gpu --san 127.0.0.1 --dir "$T/ca" 2>&1) && bad "tls issue overwrote" || echo "$out" | grep -q 'never overwritten' || bad "tls issue: $out"
[ "$k0" = "$(sha256sum "$T/ca/ca.key" "$T/ca/gpu.key")" ] && ok "tls init and issue refuse to overwrite" || bad "keys changed"

# ---- enrollment ----------------------------------------------------------------
start_producer "" --enroll
for _ in $(seq 100); do grep -q '^muser-enroll-token: ' "$T/prod.out" && break; sleep 0.1; done
TOKEN=$(sed -n 's/^muser-enroll-token: //p' "$T/prod.out")
[ "$(wc -l <"$T/prod.out")" = 1 ] && [ -n "$TOKEN" ] && ok "producer --enroll prints one token line" || bad "token line: $(cat "$T/prod.out")"
if "$MUSER" node add gpu1 127.0.0.1:$PORT --token "$TOKEN" -m "$T/m.gguf" --qualify-tokens 300 >"$T/add.out" 2>&1; then
  [ "$(grep -c 'rows and logits bit-identical' "$T/add.out")" = 3 ] && ok "node add: enrolled, three qualification handoffs bit-identical" \
    || bad "node add output: $(cat "$T/add.out")"
else bad "node add: $(cat "$T/add.out")"; fi
[ "$(stat -c %a "$MUSER_HOME/lane/nodes/gpu1.json")" = 600 ] && [ "$(stat -c %a "$MUSER_HOME/lane/nodes")" = 700 ] \
  && [ "$(stat -c %a "$MUSER_HOME/lane")" = 700 ] && [ "$(stat -c %a "$PHOME/lane/peers")" = 600 ] && ok "registry files 0600 in 0700 directories" || bad "registry modes"
out=$("$MUSER" node add gpu2 127.0.0.1:$PORT --token "$TOKEN" -m "$T/m.gguf" --qualify-tokens 300 2>&1) && bad "token reused: $out" \
  || { echo "$out" | grep -q 'auth:' && ok "the token is single use: $out" || bad "reuse message: $out"; }
[ -f "$MUSER_HOME/lane/nodes/gpu2.json" ] && bad "a refused enrollment left a registry entry" || ok "a refused enrollment registers nothing"
"$MUSER" node status --json >"$T/st" 2>&1
python3 -c "
import json,sys; a=json.load(open(sys.argv[1])); n=a[0]
assert n['name']=='gpu1' and n['registry']['state']=='healthy' and 'key' not in n['registry']
assert n['probe']['reachable'] and n['probe']['identity']==n['registry']['identity']" "$T/st" \
  && ok "node status --json: registry and live probe, no key shown" || bad "node status: $(cat "$T/st")"

# ---- remote == local ------------------------------------------------------------
for n in 10 100 513 700 1100; do
  P=$(ids $n 11)
  "$MUSER" run -m "$T/m.gguf" --prompt-ids "$P" --temp 0 --json --top 5 -n 8 >"$T/l$n" 2>"$T/le"
  "$MUSER" run -m "$T/m.gguf" --prompt-ids "$P" --temp 0 --json --top 5 -n 8 --prefill remote >"$T/r$n" 2>"$T/re" \
    || bad "remote run of $n tokens: $(cat "$T/re")"
  shipped=$(sed -n 's/.* \([0-9]*\) prompt tokens prefilled by the node/\1/p' "$T/re")
  want=$(( (n - 1) / 512 * 512 ))
  if [ "$want" = 0 ]; then [ -z "$shipped" ] || bad "$n tokens: shipped $shipped"; else [ "$shipped" = "$want" ] || bad "$n tokens: shipped '$shipped', want $want"; fi
  [ -s "$T/r$n" ] && cmp -s "$T/l$n" "$T/r$n" && ok "run --prefill remote, $n-token prompt (${shipped:-0} shipped): ids and probabilities equal local" \
    || bad "$n tokens: remote differs from local"
done

# ---- chat: the first turn's prompt from the node, the second turn local ------------------
MSG=$(python3 -c "print(' '.join('word%d' % (i % 50) for i in range(700)))")
printf '%s\nsecond turn\n' "$MSG" | "$MUSER" chat -m "$T/m.gguf" --temp 0 -n 10 >"$T/cl" 2>&1
h0=$(grep -c 'handoff ok' "$T/prod.err")
printf '%s\nsecond turn\n' "$MSG" | "$MUSER" chat -m "$T/m.gguf" --temp 0 -n 10 --prefill remote >"$T/cr" 2>&1
h1=$(grep -c 'handoff ok' "$T/prod.err")
[ -s "$T/cr" ] && cmp -s "$T/cl" "$T/cr" && [ $((h1 - h0)) = 1 ] && ok "chat --prefill remote: two turns equal local, one handoff (a short second turn stays local)" \
  || bad "chat --prefill remote ($((h1 - h0)) handoffs): $(head -c 300 "$T/cr")"
# a long second turn: a delta on the session's kept prefix (the node replays the forwards that made it)
MSG1=$(python3 -c "print(' '.join('word%d' % (i % 50) for i in range(150)))")
MSG2=$(python3 -c "print(' '.join('term%d' % (i % 70) for i in range(200)))")
printf '%s\n%s\n' "$MSG1" "$MSG2" | "$MUSER" chat -m "$T/m.gguf" --temp 0 -n 10 >"$T/cl2" 2>&1
h0=$(grep -c 'handoff ok' "$T/prod.err"); d0=$(grep -c 'a delta: ' "$T/prod.err")
printf '%s\n%s\n' "$MSG1" "$MSG2" | "$MUSER" chat -m "$T/m.gguf" --temp 0 -n 10 --prefill remote >"$T/cr2" 2>&1
h1=$(grep -c 'handoff ok' "$T/prod.err"); d1=$(grep -c 'a delta: ' "$T/prod.err")
[ -s "$T/cr2" ] && cmp -s "$T/cl2" "$T/cr2" && [ $((h1 - h0)) = 2 ] && [ $((d1 - d0)) = 1 ] \
  && ok "chat --prefill remote: a long second turn is a delta on the kept session ($(grep 'a delta: ' "$T/prod.err" | tail -1 | sed 's/.*a delta: \([0-9]*\) held.*/\1/') positions held), both turns equal local" \
  || bad "chat delta turn ($((h1 - h0)) handoffs, $((d1 - d0)) deltas): $(diff "$T/cl2" "$T/cr2" | head -c 300)"

# ---- serve: 1 and 2 slots, concurrent requests ------------------------------------
serve_check() {
  local slots=$1
  "$MUSER" serve -m "$T/m.gguf" --port 0 --parallel $slots --ctx 2048 --prefill remote >/dev/null 2>"$T/srv$slots.err" &
  local sp=$!; PIDS+=("$sp")
  for _ in $(seq 300); do grep -q 'http://' "$T/srv$slots.err" && break; sleep 0.1; done
  local sport=$(sed -n 's|.*http://127\.0\.0\.1:\([0-9]*\) .*|\1|p' "$T/srv$slots.err")
  python3 - "$sport" "$T" <<'EOF' && ok "serve --parallel $slots --prefill remote: 4 concurrent completions equal local runs" || bad "serve $slots slots"
import json, sys, threading, urllib.request, subprocess, os
port, T = sys.argv[1], sys.argv[2]
lens = [600, 777, 1030, 530]
def ids(n, s): return [(i * 37 + s) % 1000 for i in range(n)]
res = {}
def go(k, n):
    body = json.dumps({"prompt": ids(n, k), "n_predict": 6, "temperature": 0, "return_tokens": True}).encode()
    r = urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{port}/completion", body, {"Content-Type": "application/json"}))
    res[k] = json.load(r)["tokens"]
th = [threading.Thread(target=go, args=(k, n)) for k, n in enumerate(lens)]
[t.start() for t in th]; [t.join() for t in th]
for k, n in enumerate(lens):
    out = subprocess.run([os.environ.get("MUSER_BIN", "./muser"), "run", "-m", f"{T}/m.gguf", "--prompt-ids", ",".join(map(str, ids(n, k))),
                          "--temp", "0", "--json", "-n", "6", "--ctx", "2048"], capture_output=True, text=True).stdout
    local = [json.loads(l)["id"] for l in out.splitlines() if l.startswith('{"id"')]
    assert res[k] == local, (k, res[k], local)
m = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
assert "muser:lane_remote_total 4" in m, m
lane = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/snapshot"))["remote_prefill"]
assert lane["handoffs"] == {"value": 4, "tag": "measured"}, lane
assert lane["breaker_open"]["value"] == 0 and lane["failed"]["value"] == 0, lane
EOF
  kill $sp; wait $sp 2>/dev/null
}
export MUSER_BIN=$MUSER
serve_check 1
serve_check 2

# ---- delta: the server's prefix cache holds a prefix, the node ships the rest -------------------
"$MUSER" serve -m "$T/m.gguf" --port 0 --ctx 2048 --prefill remote >/dev/null 2>"$T/srvd.err" &
SP=$!; PIDS+=("$SP")
for _ in $(seq 300); do grep -q 'http://' "$T/srvd.err" && break; sleep 0.1; done
SPORT=$(sed -n 's|.*http://127\.0\.0\.1:\([0-9]*\) .*|\1|p' "$T/srvd.err")
h0=$(grep -c 'a delta: 512 held by the decoder' "$T/prod.err")
python3 - "$SPORT" <<'EOF' && ok "delta handoff: the cache's 512 positions are not shipped, the answer equals the full handoff's bit for bit, fewer bytes; a prompt the cache holds is left to it" || bad "delta handoff"
import json, sys, urllib.request
port = sys.argv[1]
def post(body):
    return json.load(urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{port}/completion", json.dumps(body).encode(), {"Content-Type": "application/json"})))
def metric(name):
    m = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
    return int(float([l for l in m.splitlines() if l.startswith(name + " ")][0].split()[1]))
a0 = [(i * 37 + 21) % 1000 for i in range(512)]
b = a0 + [(i * 53 + 5) % 1000 for i in range(1200)]
post({"prompt": a0, "n_predict": 4, "temperature": 0, "cache_prompt": True})  # one step: prefilled here, cached
post({"prompt": [7] * 40, "n_predict": 1, "temperature": 0})  # the slot now holds another prompt: a0 is the cache's only
assert metric("muser:lane_local_short_total") == 2 and metric("muser:lane_remote_total") == 0
q = {"prompt": b, "n_predict": 6, "temperature": 0, "n_probs": 5, "return_tokens": True}
by0 = metric("muser:lane_bytes_total")
rd = post(dict(q, cache_prompt=True))
by1 = metric("muser:lane_bytes_total")
assert metric("muser:lane_delta_total") == 1 and metric("muser:lane_delta_held_positions_total") == 512, "no delta"
assert metric("muser:lane_delta_slot_total") == 0, "a slot delta"
rf = post(dict(q, cache_prompt=False))
by2 = metric("muser:lane_bytes_total")
assert metric("muser:lane_delta_total") == 1 and metric("muser:lane_remote_total") == 2
assert rd["tokens"] == rf["tokens"], (rd["tokens"], rf["tokens"])
assert rd["completion_probabilities"] == rf["completion_probabilities"]
assert 0 < by1 - by0 < by2 - by1, (by1 - by0, by2 - by1)
post({"prompt": a0 + b[512:612], "n_predict": 2, "temperature": 0, "cache_prompt": True})  # 612: the slot holds its one step
assert metric("muser:lane_local_cached_total") == 1 and metric("muser:lane_remote_total") == 2
print(f"delta {by1 - by0} bytes, full {by2 - by1} bytes", file=sys.stderr)
EOF
[ $(( $(grep -c 'a delta: 512 held by the decoder' "$T/prod.err") - h0 )) = 1 ] && ok "the producer reports the delta handoff" || bad "producer delta line: $(grep handoff "$T/prod.err" | tail -3)"
kill $SP; wait $SP 2>/dev/null

# ---- delta on a live slot: a conversation's next request; tampered deltas refused ---------------
# handoffs from here: 0 the first request A, 1 its continuation B (a delta on the slot), 2..7 B's
# continuations, tampered (another split replayed and said so, a frame dropped, a row flipped, two
# frames swapped, the last LAYER twice, a frame cut short), 8 a continuation of B again (a delta:
# the refusals left the slot as it was); the delta's frames: 0 BEGIN, 1..4 LAYER, 5 SEAL
stop_producer
start_producer "none,none,runs:0,drop:1,flip:2:40,reorder:2,duplicate:4,truncate:3:100,none"
"$MUSER" serve -m "$T/m.gguf" --port 0 --ctx 2048 --prefill remote >/dev/null 2>"$T/srvs.err" &
SP=$!; PIDS+=("$SP")
"$MUSER" serve -m "$T/m.gguf" --port 0 --ctx 2048 >/dev/null 2>"$T/srvl.err" &
LP=$!; PIDS+=("$LP")
for f in srvs srvl; do for _ in $(seq 300); do grep -q 'http://' "$T/$f.err" && break; sleep 0.1; done; done
SPORT=$(sed -n 's|.*http://127\.0\.0\.1:\([0-9]*\) .*|\1|p' "$T/srvs.err")
LPORT=$(sed -n 's|.*http://127\.0\.0\.1:\([0-9]*\) .*|\1|p' "$T/srvl.err")
python3 - "$SPORT" "$LPORT" >"$T/slotd" 2>&1 <<'EOF'
import json, sys, urllib.request, urllib.error
rport, lport = sys.argv[1], sys.argv[2]
def post(port, body):
    try:
        return json.load(urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{port}/completion", json.dumps(body).encode(), {"Content-Type": "application/json"})))
    except urllib.error.HTTPError as e:
        return {"status": e.code, "error": e.read().decode()}
def metric(name):
    m = urllib.request.urlopen(f"http://127.0.0.1:{rport}/metrics").read().decode()
    return int(float([l for l in m.splitlines() if l.startswith(name + " ")][0].split()[1]))
A = [(i * 37 + 5) % 1000 for i in range(700)]
def more(seed): return [(i * 53 + seed) % 1000 for i in range(600)]
q = {"n_predict": 6, "temperature": 0, "n_probs": 5, "return_tokens": True, "cache_prompt": True}
for port in (rport, lport):
    post(port, dict(q, prompt=A))
assert metric("muser:lane_remote_total") == 1 and metric("muser:lane_delta_total") == 0
r, l = post(rport, dict(q, prompt=A + more(1))), post(lport, dict(q, prompt=A + more(1)))
assert r.get("tokens") and r["tokens"] == l["tokens"] and r["completion_probabilities"] == l["completion_probabilities"], (r, l)
assert metric("muser:lane_delta_slot_total") == 1 and metric("muser:lane_delta_held_positions_total") == 700
print("serve: a conversation's next request is a delta on the slot (700 positions held), equal to the local server's answer")
B = A + more(1)
for k, want in ((2, "request"), (3, "order"), (4, "digest"), (5, "order"), (6, "order"), (7, "io")):
    r = post(rport, dict(q, prompt=B + more(k)))
    assert r.get("status") == 500 and f"lane: {want}:" in r["error"], (k, r)
    print(f"tampered slot delta refused: {want}: " + r["error"].split(f"lane: {want}: ")[1][:80].split('"')[0])
r, l = post(rport, dict(q, prompt=B + more(8))), post(lport, dict(q, prompt=B + more(8)))
assert r.get("tokens") and r["tokens"] == l["tokens"] and r["completion_probabilities"] == l["completion_probabilities"], (r, l)
assert metric("muser:lane_delta_slot_total") == 2 and metric("muser:lane_failed_total") == 6
assert metric("muser:lane_delta_held_positions_total") == 700 + 1300
print("after the refusals the slot serves a delta again, equal to the local server's answer")
EOF
[ $? = 0 ] && while read -r line; do ok "$line"; done <"$T/slotd" || bad "slot delta: $(tail -5 "$T/slotd")"
kill $SP $LP; wait $SP $LP 2>/dev/null

# ---- identity: another model on the decoder ------------------------------------------------
P=$(ids 700 11)
out=$("$MUSER" run -m "$T/other.gguf" --prompt-ids "$P" --temp 0 --json -n 4 --prefill remote 2>&1) && bad "other model accepted" \
  || { echo "$out" | grep -q 'lane: identity:' && ok "another model refused before any KV moves: ${out##*: lane: }" || bad "identity message: $out"; }

# ---- a step of several engine chunks (MUSER_UBATCH below the step, on both ends: it is part of the
# identity): each layer's frame of a step leaves at the layer's callback of the step's last chunk ----
stop_producer
export MUSER_UBATCH=128
start_producer ""
PU=$(ids 1100 17)
"$MUSER" run -m "$T/m.gguf" --prompt-ids "$PU" --temp 0 --json --top 5 -n 8 >"$T/lu" 2>"$T/le"
"$MUSER" run -m "$T/m.gguf" --prompt-ids "$PU" --temp 0 --json --top 5 -n 8 --prefill remote >"$T/ru" 2>"$T/re"
[ -s "$T/ru" ] && cmp -s "$T/lu" "$T/ru" && grep -q '1024 prompt tokens prefilled by the node' "$T/re" \
  && ok "engine chunks of 128 in steps of 512: the layers stream per step, remote equals local" || bad "ubatch 128: $(cat "$T/re")"
unset MUSER_UBATCH

# ---- tampering: every case refused with its reason; auto falls back to the right answer ----
# frames: 0 BEGIN, 1..N LAYER, N+1 SEAL (700 tokens, tiny model: 512 shipped, 4 layers)
cases=(
  "flip:0:1 frame" "flip:0:20 seal" "flip:0:150 seal" "flip:1:12 order" "flip:1:16 order" "flip:1:28 digest"
  "flip:1:4000 digest" "flip:2:99999 digest" "flip:3:13 order" "flip:4:700 digest" "flip:5:40 seal" "flip:5:200 seal"
  "truncate:1:5 io" "truncate:2:100 io" "truncate:5:30 io" "drop:1 order" "drop:3 order"
  "duplicate:1 order" "duplicate:4 order" "reorder:1 order" "reorder:3 order" "epoch:0 request"
)
spec="none"
for c in "${cases[@]}"; do spec="$spec,${c%% *},${c%% *}"; done
stop_producer
start_producer "$spec"
"$MUSER" run -m "$T/m.gguf" --prompt-ids "$P" --temp 0 --json --top 5 -n 8 --prefill remote >"$T/first" 2>&1 || bad "untampered handoff: $(cat "$T/first")"
for c in "${cases[@]}"; do
  t=${c%% *}; want=${c##* }
  out=$("$MUSER" run -m "$T/m.gguf" --prompt-ids "$P" --temp 0 --json --top 5 -n 8 --prefill remote 2>&1 >/dev/null) && { bad "$t accepted"; continue; }
  reason=$(echo "$out" | sed -n 's/.*remote prefill failed: lane: \([a-z]*\):.*/\1/p')
  [ "$reason" = "$want" ] && ok "tamper $t refused: $reason" || bad "tamper $t: want $want, got: $out"
  "$MUSER" run -m "$T/m.gguf" --prompt-ids "$P" --temp 0 --json --top 5 -n 8 --prefill auto >"$T/auto" 2>"$T/ae"
  cmp -s "$T/auto" "$T/l700" && grep -q 'prefilling locally' "$T/ae" || bad "tamper $t: auto did not fall back to the local answer"
done
ok "auto fell back to the local answer after each of the ${#cases[@]} tampered handoffs"

# ---- replay and the ledger across decoder restarts (each run is a new decoder process) ----
stop_producer
start_producer "none,replay,none,stale"
"$MUSER" run -m "$T/m.gguf" --prompt-ids "$P" --temp 0 --json -n 2 --prefill remote >/dev/null 2>&1 || bad "handoff before replay"
out=$("$MUSER" run -m "$T/m.gguf" --prompt-ids "$P" --temp 0 --json -n 2 --prefill remote 2>&1) && bad "replayed stream accepted" \
  || { echo "$out" | grep -q 'lane: request:' && ok "a replayed handoff is refused: ${out##*: lane: }" || bad "replay: $out"; }
"$MUSER" run -m "$T/m.gguf" --prompt-ids "$P" --temp 0 --json -n 2 --prefill remote >/dev/null 2>&1 || bad "handoff before stale"
out=$("$MUSER" run -m "$T/m.gguf" --prompt-ids "$P" --temp 0 --json -n 2 --prefill remote 2>&1) && bad "stale generation accepted" \
  || { echo "$out" | grep -q 'lane: stale:' && ok "a stale generation is refused by the ledger after a decoder restart: ${out##*: lane: }" || bad "stale: $out"; }

# ---- pinning: an unpinned decoder certificate, an unpinned producer certificate -------------
mkdir -p "$T/dec2/lane/nodes" && chmod 700 "$T/dec2" "$T/dec2/lane" "$T/dec2/lane/nodes"
cp "$MUSER_HOME/lane/nodes/gpu1.json" "$T/dec2/lane/nodes/"
out=$(MUSER_HOME=$T/dec2 "$MUSER" run -m "$T/m.gguf" --prompt-ids "$P" -n 2 --json --prefill remote 2>&1) && bad "unpinned decoder accepted" \
  || { echo "$out" | grep -q 'lane: \(auth\|io\):' && ok "a decoder certificate the producer has not pinned fails the handshake: ${out##*: lane: }" || bad "unpinned decoder: $out"; }
cp -r "$MUSER_HOME" "$T/dec3"
python3 -c "
import json,sys; p=sys.argv[1]; j=json.load(open(p)); j['producer_fp']='00'*32; json.dump(j,open(p,'w'))" "$T/dec3/lane/nodes/gpu1.json"
out=$(MUSER_HOME=$T/dec3 "$MUSER" run -m "$T/m.gguf" --prompt-ids "$P" -n 2 --json --prefill remote 2>&1) && bad "unpinned producer accepted" \
  || { echo "$out" | grep -q 'lane: auth:' && ok "a producer certificate the decoder has not pinned fails the handshake: ${out##*: lane: }" || bad "unpinned producer: $out"; }

# ---- busy: one worker held by a silent connection, a queue of one --------------------------
stop_producer
start_producer "" --workers 1 --queue 1
python3 - "$PORT" "$MUSER_HOME/tls" <<'EOF' && ok "a full queue answers ABORT 429 busy" || bad "busy answer"
import socket, ssl, struct, sys
port, d = int(sys.argv[1]), sys.argv[2]
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT); ctx.check_hostname = False; ctx.verify_mode = ssl.CERT_NONE
ctx.minimum_version = ssl.TLSVersion.TLSv1_3
ctx.load_cert_chain(d + "/decoder.pem", d + "/decoder.key")
def conn():
    s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", port)))
    return s
# one worker and a queue of one: of three silent connections, b or c must be
# answered busy (a is in the worker or the queue when b arrives)
a, b, c = conn(), conn(), conn()
import select
r, _, _ = select.select([b, c], [], [], 60)
assert r, "no busy answer"
s = r[0]
h = b""
while len(h) < 12: h += s.recv(12 - len(h))
assert h[:4] == b"MUL1" and h[4] == 5, h
n = struct.unpack("<I", h[8:12])[0]
p = b""
while len(p) < n: p += s.recv(n - len(p))
code = struct.unpack("<I", p[:4])[0]
assert code == 429, (code, p)
EOF

# ---- SIGKILL mid-stream, the breaker, the decoder keeps serving ---------------------------------
stop_producer
start_producer "kill:3"
out=$("$MUSER" run -m "$T/m.gguf" --prompt-ids "$P" --temp 0 --json --top 5 -n 8 --prefill remote 2>&1 >/dev/null) && bad "remote succeeded with the producer killed" \
  || { echo "$out" | grep -q 'lane: \(io\|timeout\):' && ok "producer SIGKILLed mid-stream: remote fails cleanly: ${out##*: lane: }" || bad "killed: $out"; }
kill -0 "$PPID_" 2>/dev/null && bad "the producer is still alive" || ok "the producer died at the tamper hook (SIGKILL)"
"$MUSER" serve -m "$T/m.gguf" --port 0 --ctx 2048 --prefill auto --breaker 2:86400 >/dev/null 2>"$T/srvb1.err" &
SP=$!; PIDS+=("$SP")
for _ in $(seq 300); do grep -q 'http://' "$T/srvb1.err" && break; sleep 0.1; done
SPORT=$(sed -n 's|.*http://127\.0\.0\.1:\([0-9]*\) .*|\1|p' "$T/srvb1.err")
python3 - "$SPORT" "$T" <<'EOF' && ok "serve --prefill auto with the node dead: right answers, breaker opens after 2 failures, 3rd request skips the node" || bad "auto serve with a dead node"
import json, sys, urllib.request, subprocess, os
port, T = sys.argv[1], sys.argv[2]
ids = [(i * 37 + 11) % 1000 for i in range(700)]
out = subprocess.run([os.environ["MUSER_BIN"], "run", "-m", f"{T}/m.gguf", "--prompt-ids", ",".join(map(str, ids)), "--temp", "0", "--json", "-n", "6", "--ctx", "2048"], capture_output=True, text=True).stdout
local = [json.loads(l)["id"] for l in out.splitlines() if l.startswith('{"id"')]
for k in range(3):
    body = json.dumps({"prompt": ids, "n_predict": 6, "temperature": 0, "return_tokens": True}).encode()
    r = json.load(urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{port}/completion", body, {"Content-Type": "application/json"})))
    assert r["tokens"] == local, (k, r["tokens"], local)
m = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
for want in ("muser:lane_failed_total 2", "muser:lane_fallback_total 2", "muser:lane_skipped_open_total 1", "muser:lane_breaker_open 1", "muser:lane_remote_total 0"):
    assert want in m, (want, m)
lane = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/snapshot"))["remote_prefill"]
assert lane["breaker_open"]["value"] == 1 and lane["failed"]["value"] == 2 and lane["fallbacks"]["value"] == 2, lane
EOF
kill $SP; wait $SP 2>/dev/null
"$MUSER" serve -m "$T/m.gguf" --port 0 --ctx 2048 --prefill remote >/dev/null 2>"$T/srvb2.err" &
SP=$!; PIDS+=("$SP")
for _ in $(seq 300); do grep -q 'http://' "$T/srvb2.err" && break; sleep 0.1; done
SPORT=$(sed -n 's|.*http://127\.0\.0\.1:\([0-9]*\) .*|\1|p' "$T/srvb2.err")
python3 - "$SPORT" <<'EOF' && ok "serve --prefill remote with the node dead: a clear 500 error, and the server keeps serving" || bad "remote serve with a dead node"
import json, sys, urllib.request, urllib.error
port = sys.argv[1]
ids = [(i * 37 + 11) % 1000 for i in range(700)]
try:
    urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{port}/completion", json.dumps({"prompt": ids, "n_predict": 4}).encode(), {"Content-Type": "application/json"}))
    raise SystemExit("no error")
except urllib.error.HTTPError as e:
    body = e.read().decode()
    assert e.code == 500 and "lane: io:" in body, (e.code, body)
r = json.load(urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{port}/completion", json.dumps({"prompt": ids[:50], "n_predict": 4, "temperature": 0, "return_tokens": True}).encode(), {"Content-Type": "application/json"})))
assert len(r["tokens"]) == 4
EOF
kill $SP; wait $SP 2>/dev/null

# ---- the bundled default model: its own producer and decoder homes ------------------
DEF=$PWD/models/muser-default.gguf
if [ -f "$DEF" ]; then
  MUSER_HOME=$T/pdef "$MUSER" producer -m "$DEF" --listen 127.0.0.1:0 --enroll >"$T/pdef.out" 2>"$T/pdef.err" &
  DP=$!; PIDS+=("$DP")
  for _ in $(seq 300); do grep -q '^muser-enroll-token: ' "$T/pdef.out" && break; sleep 0.1; done
  DPORT=$(sed -n 's/.* on 127\.0\.0\.1:\([0-9]*\) .*/\1/p' "$T/pdef.err")
  DTOK=$(sed -n 's/^muser-enroll-token: //p' "$T/pdef.out")
  MUSER_HOME=$T/ddef "$MUSER" node add def 127.0.0.1:$DPORT --token "$DTOK" -m "$DEF" --qualify-tokens 600 >"$T/dadd" 2>&1 \
    && ok "default model: node add qualified" || bad "default model: node add: $(cat "$T/dadd")"
  for n in 600 1500; do
    P=$(ids $n 7)
    MUSER_HOME=$T/ddef "$MUSER" run -m "$DEF" --prompt-ids "$P" --temp 0 --json --top 5 -n 8 >"$T/dl" 2>&1
    MUSER_HOME=$T/ddef "$MUSER" run -m "$DEF" --prompt-ids "$P" --temp 0 --json --top 5 -n 8 --prefill remote >"$T/dr" 2>"$T/dre"
    [ -s "$T/dr" ] && cmp -s "$T/dl" "$T/dr" && grep -q 'prefilled by the node' "$T/dre" \
      && ok "default model: run --prefill remote, $n tokens: equal to local" || bad "default model $n tokens: $(cat "$T/dre")"
  done
  kill $DP; wait $DP 2>/dev/null
else
  echo "skip default model: $DEF is absent"
fi

# ---- across kernel classes: a producer of another class (the test hook relabels) ------------
# MUSER_LANE_TEST_CLASS=NAME labels the producer's rows with class NAME (a
# stand-in for a CUDA producer on this CPU-only machine); ":perturb" also
# flips one bit of each handoff's rows, as another class's numerics would.
# The decoder accepts the other class only from a node qualified for it,
# and qualifies it by greedy ids under the tie-aware rule; the same class
# keeps the bit-for-bit check.
XH=$T/xprod XD=$T/xdec
start_x() { # start_x CLASS_HOOK [args]
  local hook=$1; shift
  : >"$T/x.out"; : >"$T/x.err"
  MUSER_HOME=$XH MUSER_LANE_TEST_CLASS=$hook "$MUSER" producer -m "$T/m.gguf" --listen 127.0.0.1:${XPORT:-0} "$@" >"$T/x.out" 2>"$T/x.err" &
  XP=$!; PIDS+=("$XP")
  for _ in $(seq 300); do grep -q ' on 127.0.0.1:' "$T/x.err" && break; kill -0 $XP 2>/dev/null || break; sleep 0.1; done
  XPORT=$(sed -n 's/.* on 127\.0\.0\.1:\([0-9]*\) .*/\1/p' "$T/x.err" | head -1)
  [ -n "$XPORT" ] || { bad "x producer did not start: $(cat "$T/x.err")"; exit 1; }
}
stop_x() { kill $XP 2>/dev/null; wait $XP 2>/dev/null; }
# greedy_tie A B: B's greedy ids equal A's (muser run --json --top 8 lines) under the tie-aware rule
greedy_tie() { python3 - "$1" "$2" <<'EOF'
import json, math, sys
a = [json.loads(l) for l in open(sys.argv[1]) if l.startswith('{"id"')]
b = [json.loads(l) for l in open(sys.argv[2]) if l.startswith('{"id"')]
assert a and len(a) == len(b), (len(a), len(b))
for k, (x, y) in enumerate(zip(a, b)):
    ref = dict((i, p) for i, p in x["top"])
    ours = dict((i, p) for i, p in y["top"])
    for i, p in x["top"]:
        assert abs(ours.get(i, 0.0) - p) <= 2e-3, (k, i, p, ours.get(i))
    if x["id"] != y["id"]:
        assert y["id"] in ref and math.log(ref[x["id"]] / ref[y["id"]]) < 0.02, (k, x["id"], y["id"])
        break
EOF
}
OWN=$(sed -n 's/.*kernel class \([a-z0-9._-]*\),.*/\1/p' "$T/prod.err" | head -1)
[ -n "$OWN" ] || bad "the producer's start line names no kernel class: $(cat "$T/prod.err")"
start_x xclass --enroll
for _ in $(seq 100); do grep -q '^muser-enroll-token: ' "$T/x.out" && break; sleep 0.1; done
XTOK=$(sed -n 's/^muser-enroll-token: //p' "$T/x.out")
grep -q 'kernel class xclass' "$T/x.err" && ok "the test hook relabels the producer's kernel class (xclass; this engine's: $OWN)" || bad "x start: $(cat "$T/x.err")"
if MUSER_HOME=$XD "$MUSER" node add x 127.0.0.1:$XPORT --token "$XTOK" -m "$T/m.gguf" --qualify-tokens 300 >"$T/xadd" 2>&1; then
  [ "$(grep -c 'node class xclass: rows bit-identical, 16 greedy ids equal under the tie-aware rule' "$T/xadd")" = 3 ] \
    && grep -q 'healthy (another kernel class' "$T/xadd" && ok "node add of another class: qualified by greedy ids under the tie-aware rule" \
    || bad "x node add output: $(cat "$T/xadd")"
else bad "x node add: $(cat "$T/xadd")"; fi
python3 -c "
import json,sys; j=json.load(open(sys.argv[1]))
assert j['kernel_class']=='xclass' and j['decoder_class']==sys.argv[2], j
q=j['qualification']; assert q['rule']=='tie-aware' and q['node_class']=='xclass' and q['ok'], q" \
  "$XD/lane/nodes/x.json" "$OWN" && ok "the registry records the node's class, this decoder's and the rule" || bad "x registry: $(cat "$XD/lane/nodes/x.json")"
P=$(ids 700 11)
MUSER_HOME=$XD "$MUSER" run -m "$T/m.gguf" --prompt-ids "$P" --temp 0 --json --top 8 -n 8 >"$T/xl" 2>/dev/null
MUSER_HOME=$XD "$MUSER" run -m "$T/m.gguf" --prompt-ids "$P" --temp 0 --json --top 8 -n 8 --prefill remote >"$T/xr" 2>"$T/xre" \
  && grep -q 'prefilled by the node (kernel class xclass: the answer equals local prefill.s under the tie-aware rule)' "$T/xre" \
  && greedy_tie "$T/xl" "$T/xr" && ok "run --prefill remote from another class: accepted, said so, greedy ids equal local" \
  || bad "x remote run: $(cat "$T/xre")"
printf '%s\n' "$MSG" | MUSER_HOME=$XD "$MUSER" chat -m "$T/m.gguf" --temp 0 -n 4 --prefill remote >"$T/xc" 2>&1 \
  && grep -q '\[prefilled by the node, kernel class xclass: the answers equal local prefill.s under the tie-aware rule\]' "$T/xc" \
  && ok "chat says when the node's rows are of another kernel class" || bad "x chat: $(head -c 300 "$T/xc")"
# the server: counted, labelled, never filed in the prefix cache, never saved as a pack
mkdir -p "$T/xslots"
MUSER_HOME=$XD "$MUSER" serve -m "$T/m.gguf" --port 0 --ctx 2048 --prefill remote --slot-save-path "$T/xslots" >/dev/null 2>"$T/xsrv.err" &
SP=$!; PIDS+=("$SP")
for _ in $(seq 300); do grep -q 'http://' "$T/xsrv.err" && break; sleep 0.1; done
SPORT=$(sed -n 's|.*http://127\.0\.0\.1:\([0-9]*\) .*|\1|p' "$T/xsrv.err")
python3 - "$SPORT" "$OWN" <<'EOF' && ok "serve: a cross-class handoff is counted and labelled in /metrics, its rows never enter the prefix cache, a slot save refuses them; a local prompt's rows do enter" || bad "x serve"
import json, sys, urllib.request, urllib.error
port, own = sys.argv[1], sys.argv[2]
def post(path, body):
    return urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{port}{path}", json.dumps(body).encode(), {"Content-Type": "application/json"}))
def metric(name):
    m = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
    for l in m.splitlines():
        if l.startswith(name + " ") or l.startswith(name + "{"):
            return l
    raise SystemExit(f"no {name} in {m}")
ids = [(i * 37 + 11) % 1000 for i in range(700)]
r = json.load(post("/completion", {"prompt": ids, "n_predict": 4, "temperature": 0, "return_tokens": True}))
assert len(r["tokens"]) == 4
assert metric("muser:lane_cross_class_total") == "muser:lane_cross_class_total 1", metric("muser:lane_cross_class_total")
assert metric("muser:lane_node_info") == f'muser:lane_node_info{{node_class="xclass",decoder_class="{own}"}} 1', metric("muser:lane_node_info")
assert metric("llamacpp:prefix_cache_inserted_total").endswith(" 0"), metric("llamacpp:prefix_cache_inserted_total")
try:
    post("/slots/0?action=save", {"filename": "x"})
    raise SystemExit("a slot of another class's rows was saved")
except urllib.error.HTTPError as e:
    body = e.read().decode()
    assert e.code == 400 and "kernel class xclass" in body, (e.code, body)
# a prompt of one step is prefilled locally: its rows are this engine's and enter the cache
r = json.load(post("/completion", {"prompt": ids[:512], "n_predict": 4, "temperature": 0, "return_tokens": True}))
assert not metric("llamacpp:prefix_cache_inserted_total").endswith(" 0"), metric("llamacpp:prefix_cache_inserted_total")
j = json.load(post("/slots/0?action=save", {"filename": "y"}))
assert j["n_saved"] >= 512, j
EOF
kill $SP; wait $SP 2>/dev/null
# rows that really differ (one bit per V row), still another class: qualified by the tie-aware rule
stop_x
start_x xclass:perturb
MUSER_HOME=$XD "$MUSER" node qualify x -m "$T/m.gguf" --qualify-tokens 300 >"$T/xq" 2>&1 \
  && [ "$(grep -c 'node class xclass: rows differ, ' "$T/xq")" = 3 ] && ok "node qualify: rows that differ from another class pass the tie-aware rule" \
  || bad "x qualify perturbed: $(cat "$T/xq")"
MUSER_HOME=$XD "$MUSER" run -m "$T/m.gguf" --prompt-ids "$P" --temp 0 --json --top 8 -n 8 --prefill remote >"$T/xr2" 2>"$T/xre2" \
  && greedy_tie "$T/xl" "$T/xr2" \
  && ok "run --prefill remote with rows that differ: greedy ids equal local under the tie-aware rule" \
  || bad "x perturbed run: $(cat "$T/xre2")"
# the producer's class changed since the qualification: refused before any KV moves
stop_x
start_x ""
out=$(MUSER_HOME=$XD "$MUSER" run -m "$T/m.gguf" --prompt-ids "$P" --temp 0 --json -n 2 --prefill remote 2>&1) && bad "a class the node was not qualified for was accepted" \
  || { echo "$out" | grep -q "lane: identity: .*kernel class $OWN, the decoder accepts xclass" && ok "a producer whose class changed is refused until qualified again: ${out##*: lane: }" || bad "x class changed: $out"; }
# the same class with rows that differ: the bit-for-bit check refuses the node
stop_x
start_x ":perturb"
MUSER_HOME=$XD "$MUSER" node qualify x -m "$T/m.gguf" --qualify-tokens 300 >"$T/xq2" 2>&1 && bad "same class, differing rows qualified: $(cat "$T/xq2")" \
  || { grep -q "rows from the node differ from local prefill" "$T/xq2" && python3 -c "
import json,sys; j=json.load(open(sys.argv[1])); assert j['state']=='failed' and j['kernel_class']==sys.argv[2] and j['qualification']['rule']=='bit-identical', j" "$XD/lane/nodes/x.json" "$OWN" \
    && ok "node qualify of the same class keeps the bit-for-bit check: differing rows fail it" || bad "x same-class perturbed: $(cat "$T/xq2")"; }
stop_x

# ---- remove ----------------------------------------------------------------------------------
"$MUSER" node remove gpu1 >/dev/null 2>&1 && [ ! -f "$MUSER_HOME/lane/nodes/gpu1.json" ] && ok "node remove" || bad "node remove"
out=$("$MUSER" run -m "$T/m.gguf" --prompt-ids "$P" -n 2 --prefill remote 2>&1) && bad "remote without a node" || ok "no node registered: $out"
exit $fail
