#!/usr/bin/env bash
# test_dashboard.sh: the dashboard (/, /snapshot) in a real browser: Debian's
# chromium driven by puppeteer-core (pinned in tests/e2e/browser/package-lock.json,
# installed with `npm ci` when node_modules is absent). Three servers: a
# plain one (page, chat streaming, rendered values = /snapshot, tags,
# screenshot), one whose jobs stall after 5 tokens (the page while a request
# runs), one with an API key on 0.0.0.0 with TLS (the page asks for the key
# and works after it). Also checks /snapshot's
# shape with curl, so a machine without chromium still tests the data.
SERVE_TEST_NAME=test_dashboard
source "$(dirname "$0")/serve_lib.sh"
[ -f models/muser-default.gguf ] && MODEL=$PWD/models/muser-default.gguf

# /snapshot without a browser
start_server --threads 1 || { echo "FAIL server start"; exit 1; }
curl -s "$BASE/snapshot" >"$T/snap.json"
if [ "$(jget "$T/snap.json" "j['version'], j['requests']['total']['value'], j['requests']['total']['tag'], j['throughput']['ttft_s']['tag'], j['model']['n_slots']")" = "1 0 measured unavailable 1" ]; then
  ok "/snapshot: tagged numbers, unmeasured ones unavailable"
else bad "/snapshot: $(head -c 300 "$T/snap.json")"; fi
untagged() {
  python3 - "$1" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
bad = []
def walk(o, path):
    if isinstance(o, dict):
        if "tag" in o:
            t = o["tag"]
            if t not in ("measured", "target", "unavailable") or (t == "unavailable") != (o["value"] is None) \
               or (t == "unavailable" and not o.get("why")):
                bad.append(path)
            return
        for k, v in o.items(): walk(v, path + "." + k)
    elif isinstance(o, list):
        for i, v in enumerate(o): walk(v, path + "." + str(i))
    elif isinstance(o, (int, float)) and not isinstance(o, bool) and path not in (".version", ".model.n_ctx", ".model.n_slots") \
         and not path.endswith((".id", ".seq", ".slot")):
        bad.append(path)
walk(j, "")
print(len(bad), " ".join(bad))
PY
}
n_untagged=$(untagged "$T/snap.json")
[ "${n_untagged%% *}" = 0 ] && ok "/snapshot: every measurement has a tag, every unavailable one a reason" ||
  bad "/snapshot: untagged or inconsistent: $n_untagged"
# /telemetry: one event per tick, each a whole snapshot; a stream stays open
# until the client leaves, and does not hold up the server's stop
python3 - "$BASE" >"$T/sse.out" 2>&1 <<'PY'
import http.client, json, sys, urllib.parse
u = urllib.parse.urlparse(sys.argv[1])
c = http.client.HTTPConnection(u.hostname, u.port)
c.request("GET", "/telemetry")
r = c.getresponse()
assert r.status == 200 and r.getheader("Content-Type").startswith("text/event-stream"), r.status
ups = []
while len(ups) < 3:
    line = r.readline().decode()
    if line.startswith("data: "):
        ups.append(json.loads(line[6:])["uptime_s"]["value"])
assert ups == sorted(ups) and len(set(ups)) == 3, ups
print("events", len(ups))
PY
grep -q "^events 3$" "$T/sse.out" && ok "/telemetry: 3 snapshots as server-sent events, uptime rising" ||
  bad "/telemetry: $(tail -2 "$T/sse.out")"
# /metrics: Prometheus text format: every sample's family has HELP and TYPE
# before it (a TYPE line per sample name, as llama.cpp's clients parse it),
# valid names, the TTFT counts per bound cumulative up to +Inf = the total
curl -s "$BASE/v1/chat/completions" -H 'Content-Type: application/json' \
  -d '{"messages":[{"role":"user","content":"hi"}],"max_tokens":4}' >/dev/null
curl -s "$BASE/metrics" >"$T/metrics.txt"
prom=$(python3 - "$T/metrics.txt" <<'PY'
import re, sys
help_, type_, bad, n = {}, {}, [], 0
buckets, counts = {}, {}
name_re = re.compile(r'^[a-zA-Z_:][a-zA-Z0-9_:]*$')
for line in open(sys.argv[1]):
    line = line.rstrip("\n")
    if line.startswith("# HELP "):
        name, _, text = line[7:].partition(" ")
        if name in help_ or not text: bad.append("HELP " + name)
        help_[name] = text
        continue
    if line.startswith("# TYPE "):
        name, _, t = line[7:].partition(" ")
        if name in type_ or t not in ("counter", "gauge", "histogram", "summary", "untyped"): bad.append("TYPE " + name)
        type_[name] = t
        continue
    m = re.match(r'^([^{ ]+)(\{[^}]*\})? (\S+)$', line)
    if not m: bad.append("line " + line); continue
    name, labels, val = m.group(1), m.group(2) or "", float(m.group(3))
    # llama.cpp's clients want a # TYPE line per sample name: no histograms
    if not name_re.match(name) or name not in help_ or name not in type_: bad.append("family " + name)
    if name == "llamacpp:time_to_first_token_requests_within":
        le = re.search(r'le="([^"]+)"', labels).group(1)
        buckets.setdefault(name, []).append((float(le), val))
    if name == "llamacpp:time_to_first_token_requests_total": counts["llamacpp:time_to_first_token_requests_within"] = val
    n += 1
for fam, b in buckets.items():
    les = [x[0] for x in b]; vals = [x[1] for x in b]
    if les != sorted(les) or les[-1] != float("inf") or vals != sorted(vals) or vals[-1] != counts.get(fam):
        bad.append("cumulative counts " + fam)
if "llamacpp:time_to_first_token_requests_within" not in buckets: bad.append("no TTFT counts per bound")
print(n, len(bad), " ".join(bad[:5]))
PY
)
set -- $prom
[ "${2:-1}" = 0 ] && [ "${1:-0}" -gt 30 ] && grep -q '^llamacpp:time_to_first_token_requests_total 1$' "$T/metrics.txt" &&
  grep -q '^llamacpp:kv_cache_used_bytes [1-9]' "$T/metrics.txt" && grep -q '^llamacpp:prefix_cache_bytes_max ' "$T/metrics.txt" &&
  ok "/metrics: $1 samples, HELP and TYPE for each sample name, time to first token counted per bound, KV use, the prefix cache's series" ||
  bad "/metrics: $prom"
curl -s "$BASE/snapshot" >"$T/snap2.json"
n_untagged=$(untagged "$T/snap2.json")
n_recent=$(jget "$T/snap2.json" "len(j['recent'])")
[ "${n_untagged%% *}" = 0 ] && [ "$n_recent" = 1 ] && ok "/snapshot after a request: its log entry and every number tagged" ||
  bad "/snapshot after a request: recent $n_recent, untagged: $n_untagged"
page=$(curl -s "$BASE/")
[[ $page == "<!doctype html>"* ]] && ! grep -qE '(src|href)="https?:' <<<"$page" &&
  ok "/ serves the page with no outside resources" || bad "/: not the page, or it loads outside resources"
[ "$(curl -s -o /dev/null -w '%{http_code}' "$BASE/dashboard")" = 200 ] && ok "/dashboard serves the page" || bad "/dashboard"
curl -s -D "$T/page.h" -o /dev/null "$BASE/"
grep -qi "^content-security-policy: .*connect-src 'self'; .*frame-ancestors 'none'" "$T/page.h" &&
  ok "the page's CSP: own origin only, never framed" || bad "the page's CSP: $(grep -i '^content-security' "$T/page.h")"

curl -sN "$BASE/telemetry" >"$T/stream.out" &
CURL_PID=$!
while ! grep -q '^data: ' "$T/stream.out" && kill -0 $CURL_PID 2>/dev/null; do sleep 0.05; done
kill "$SERVER_PID" && wait "$SERVER_PID"
src=$?
wait $CURL_PID
SERVER_PID=
[ $src = 0 ] && grep -q '^data: ' "$T/stream.out" && ok "server stops with a /telemetry stream open (exit 0)" ||
  bad "stop with a stream open: exit $src"
start_server --threads 1 || { echo "FAIL server start"; exit 1; }

CHROMIUM=${CHROMIUM:-$(command -v chromium || command -v chromium-browser || true)}
if [ -z "$CHROMIUM" ]; then echo "test_dashboard: browser part skipped: chromium is missing"; exit $fail; fi
command -v node >/dev/null && command -v npm >/dev/null || { echo "test_dashboard: browser part skipped: node/npm unavailable"; exit $fail; }
B=tests/e2e/browser
if [ ! -d $B/node_modules/puppeteer-core ]; then
  (cd $B && npm ci --no-audit --no-fund >"$T/npm.log" 2>&1) ||
    { echo "test_dashboard: browser part skipped: npm ci failed: $(tail -2 "$T/npm.log")"; exit $fail; }
fi
export CHROMIUM
OUT=${TEST_OUT:-$PWD/build/test-out}/dashboard
node $B/dash_test.mjs chat "$BASE" "$OUT" || fail=1
stop_server

MUSER_TEST_STALL_AFTER=5 start_server --threads 1 || { echo "FAIL server start (stall)"; exit 1; }
node $B/dash_test.mjs live "$BASE" "$OUT" 5 || fail=1
stop_server

# with an API key: a LAN-style bind (0.0.0.0, TLS) when openssl can make a
# certificate, else loopback
printf 'dash-test-key-0123456789\n' >"$T/key" && chmod 600 "$T/key"
lan=()
if command -v openssl >/dev/null &&
  openssl req -x509 -newkey rsa:2048 -nodes -keyout "$T/tls.key" -out "$T/tls.crt" -days 1 -subj /CN=localhost >/dev/null 2>&1; then
  lan=(--host 0.0.0.0 --tls-cert "$T/tls.crt" --tls-key "$T/tls.key")
else echo "test_dashboard: openssl is missing: the key test binds loopback without TLS"; fi
start_server --threads 1 --api-key-file "$T/key" "${lan[@]}" || { echo "FAIL server start (key)"; exit 1; }
NODE_NO_WARNINGS=1 node $B/dash_test.mjs key "$BASE" "$OUT" "$T/key" || fail=1
# wrong keys from one address: the 10th within the window blocks it (429
# with Retry-After), right key or not, login or bearer. The browser test
# tried one wrong key: 8 more logins, then the 10th as a bearer key.
KEY=$(cat "$T/key")
login() { curl -sk -o /dev/null -D "$T/login.h" -w '%{http_code}' -H 'Content-Type: application/json' -d "{\"key\":\"$1\"}" "$BASE/login"; }
codes=""
for i in 2 3 4 5 6 7 8 9; do codes+="$(login wrong-$i) "; done
codes+="$(curl -sk -o /dev/null -w '%{http_code}' -H 'Authorization: Bearer wrong-10' "$BASE/snapshot") "
codes+="$(login "$KEY") $(curl -sk -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $KEY" "$BASE/snapshot")"
ra=$(sed -n 's/^Retry-After: *\([0-9]*\).*/\1/ip' "$T/login.h")
[ "$codes" = "401 401 401 401 401 401 401 401 401 429 429" ] && [ "${ra:-0}" -ge 1 ] && [ "${ra:-0}" -le 60 ] &&
  ok "10 wrong keys (login and bearer): the address gets 429, Retry-After $ra s, even with the right key" ||
  bad "wrong-key throttle: $codes, Retry-After ${ra:-none}"
stop_server
exit $fail
