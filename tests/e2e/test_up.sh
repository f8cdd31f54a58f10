#!/usr/bin/env bash
# test_up.sh: `muser up` against a local HTTP server (tests/e2e/up_server.py)
# that serves a generated model, drops connections midway, corrupts a byte,
# refuses Range requests and serves a short file. Verdicts come from exit
# codes, the one-line errors and the bytes the server counts, never timing.
set -u
cd "$(dirname "$0")/../.."
MUSER=${MUSER_BIN:-$PWD/muser}
if [ ! -x "$MUSER" ]; then echo "up: skipped: no muser binary at $MUSER"; exit 0; fi
command -v python3 >/dev/null || { echo "up: skipped: python3 is missing"; exit 0; }
command -v curl >/dev/null || { echo "up: skipped: curl is missing"; exit 0; }
T=$(mktemp -d)
SRV_PID= UP_PID=
cleanup() {
  [ -n "$UP_PID" ] && kill "$UP_PID" 2>/dev/null && wait "$UP_PID" 2>/dev/null
  [ -n "$SRV_PID" ] && kill "$SRV_PID" 2>/dev/null && wait "$SRV_PID" 2>/dev/null
  rm -rf "$T"
}
trap cleanup EXIT
fail=0 npass=0 nfail=0
ok() { echo "ok   $*"; npass=$((npass + 1)); }
bad() { echo "FAIL $*"; fail=1; nfail=$((nfail + 1)); }

mkdir -p "$T/files" "$T/home/models"
"$MUSER" gen -o "$T/files/tiny.gguf" --preset tiny --type q8_0 --seed 3 --name up-test >"$T/gen.log" 2>&1 ||
  { echo "up: muser gen failed: $(tail -1 "$T/gen.log")"; exit 1; }
F=$T/files/tiny.gguf
SIZE=$(stat -c %s "$F")
SHA=$(sha256sum "$F" | cut -d' ' -f1)
K=$((SIZE / 3 + 1))

python3 tests/e2e/up_server.py "$T/files" "$T/port" 2>"$T/srv.log" &
SRV_PID=$!
while [ ! -s "$T/port" ] && kill -0 "$SRV_PID" 2>/dev/null; do sleep 0.05; done
[ -s "$T/port" ] || { echo "up: the test server did not start: $(tail -1 "$T/srv.log")"; exit 1; }
B=http://127.0.0.1:$(cat "$T/port")
stats() { curl -s "$B/_stats" | python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }
reset() { curl -s "$B/_reset" >/dev/null; }

C=$T/catalog.tsv
{
  printf 'ok\t%s\t%s\ttest-license\t%s/ok/tiny.gguf\n' "$SIZE" "$SHA" "$B"
  printf 'drop\t%s\t%s\tx\t%s/drop/%s/tiny.gguf\n' "$SIZE" "$SHA" "$B" "$K"
  printf 'corrupt\t%s\t%s\tx\t%s/corrupt/tiny.gguf\n' "$SIZE" "$SHA" "$B"
  printf 'short\t%s\t%s\tx\t%s/short/tiny.gguf\n' "$SIZE" "$SHA" "$B"
  printf 'norange\t%s\t%s\tx\t%s/norange/tiny.gguf\n' "$SIZE" "$SHA" "$B"
  printf 'huge\t1000000000000000\t%s\tx\t%s/ok/tiny.gguf\n' "$SHA" "$B"
  printf 'resume\t%s\t%s\tx\t%s/ok/tiny.gguf\n' "$SIZE" "$SHA" "$B"
  printf 'badpart\t%s\t%s\tx\t%s/ok/tiny.gguf\n' "$SIZE" "$SHA" "$B"
  printf 'full\t%s\t%s\tx\t%s/ok/tiny.gguf\n' "$SIZE" "$SHA" "$B"
  printf 'missing\t%s\t%s\tx\t%s/ok/nothere.gguf\n' "$SIZE" "$SHA" "$B"
  printf 'fallback\t%s\t%s\tx\t%s/short/tiny.gguf %s/ok/tiny.gguf\n' "$SIZE" "$SHA" "$B" "$B"
  printf 'busy\t%s\t%s\tx\t%s/ok/tiny.gguf\n' "$SIZE" "$SHA" "$B"
} >"$C"
export MUSER_HOME=$T/home MUSER_CATALOG=$C
unset MUSER_MODEL
M=$T/home/models

# up ARGS...: runs muser up (no browser, any port, stop once serving); sets rc
up() {
  "$MUSER" up "$@" --no-open --port 0 --exit-after-start >"$T/out" 2>"$T/err"
  rc=$?
}
# expect_fail WHAT PATTERN: exit 1 and the last stderr line matches
expect_fail() {
  local last
  last=$(tail -1 "$T/err")
  if [ "$rc" = 1 ] && [[ $last == *$2* ]] && ! grep -q '^dashboard:' "$T/out"; then ok "$1: $last"
  else bad "$1: rc=$rc, last line: $last"; fi
}
served() { grep -q '^dashboard: http://127\.0\.0\.1:[0-9]*/$' "$T/out"; }

# 1. a plain download: verified, renamed into place, served
reset
up ok
if [ $rc = 0 ] && served && cmp -s "$F" "$M/ok.gguf" && [ ! -e "$M/ok.gguf.part" ] && [ "$(stats 'd["body_bytes"]')" = "$SIZE" ] &&
  grep -q 'SHA-256 verified' "$T/err" && grep -q 'downloading ok: 100%' "$T/err"; then
  ok "download: $SIZE bytes served once, verified, progress lines without a terminal, dashboard printed"
else bad "download: rc=$rc $(tail -2 "$T/err")"; fi

# 2. a second start trusts the stamp and downloads nothing
reset
up ok
[ $rc = 0 ] && served && [ "$(stats 'd["requests"]')" = 0 ] && ok "second start: no request to the server" ||
  bad "second start: rc=$rc requests=$(stats 'd["requests"]')"

# 2b. a --host list (llama-server's "127.0.0.1,::1"): the dashboard is the first address's
if python3 -c 'import socket; socket.socket(socket.AF_INET6).bind(("::1", 0))' 2>/dev/null; then
  up ok --host 127.0.0.1,::1
  [ $rc = 0 ] && served && ok "--host 127.0.0.1,::1: served, the dashboard at the first address" ||
    bad "--host list: rc=$rc $(cat "$T/out") $(tail -1 "$T/err")"
fi

# 3. a changed file is hashed again and refused
python3 -c "import sys; f=open(sys.argv[1],'r+b'); f.seek(100); b=f.read(1); f.seek(100); f.write(bytes([b[0]^1]))" "$M/ok.gguf"
up ok
expect_fail "changed file refused" "wrong SHA-256 in $M/ok.gguf"

# 4. connections dropped every K bytes: resumed with Range until complete
reset
up drop
ranges=$(stats 'd["ranges"]')
if [ $rc = 0 ] && served && cmp -s "$F" "$M/drop.gguf" && [ "$(stats 'd["body_bytes"]')" = "$SIZE" ] &&
  [ "$ranges" = "[0, $K, $((2 * K))]" ] && [ "$(grep -c 'connection ended' "$T/err")" = 2 ]; then
  ok "dropped connections: 3 requests from offsets $ranges, $SIZE bytes in all"
else bad "dropped connections: rc=$rc ranges=$ranges bytes=$(stats 'd["body_bytes"]') $(tail -1 "$T/err")"; fi

# 5. one flipped byte: the hash fails, nothing is kept
up corrupt
expect_fail "corrupt byte" "corrupt: wrong SHA-256: expected $SHA, got"
[ ! -e "$M/corrupt.gguf" ] && [ ! -e "$M/corrupt.gguf.part" ] && ok "corrupt byte: no file left" ||
  bad "corrupt byte: a file was kept"

# 6. a server whose file is shorter than the catalog says
up short
expect_fail "short file" "short file: the server has $((SIZE - 1000)) bytes, expected $SIZE: $B/short/tiny.gguf"

# 7. no Range support: a fresh download works, a resume is refused
reset
up norange
[ $rc = 0 ] && cmp -s "$F" "$M/norange.gguf" && ok "no Range support: a fresh download works" ||
  bad "no Range support, fresh: rc=$rc $(tail -1 "$T/err")"
rm -f "$M/norange.gguf" "$M/norange.gguf.sha256"
head -c 1000 "$F" >"$M/norange.gguf.part"
up norange
expect_fail "no Range support, resume" "does not support resuming"
[ -f "$M/norange.gguf.part" ] && [ ! -e "$M/norange.gguf" ] && ok "no Range support: nothing renamed into place" ||
  bad "no Range support: wrong files"

# 8. not enough space for the size the catalog gives: refused before any request
reset
up huge
expect_fail "disk space" "not enough disk space in $M"
[ "$(stats 'd["requests"]')" = 0 ] && ok "disk space: no request made" || bad "disk space: requests were made"

# 9. a full disk while writing (the partial file is /dev/full)
if [ -w /dev/full ]; then
  ln -s /dev/full "$M/full.gguf.part"
  up full
  expect_fail "disk full while writing" "disk full writing $M/full.gguf.part"
else echo "skip disk full while writing: no /dev/full"; fi

# 10. a partial file from an earlier run is resumed, and only the rest is sent
head -c "$K" "$F" >"$M/resume.gguf.part"
reset
up resume
if [ $rc = 0 ] && cmp -s "$F" "$M/resume.gguf" && [ "$(stats 'd["body_bytes"]')" = $((SIZE - K)) ] &&
  [ "$(stats 'd["ranges"]')" = "[$K]" ] && grep -q 'resuming the partial download' "$T/err"; then
  ok "resume across runs: $((SIZE - K)) bytes sent from offset $K"
else bad "resume across runs: rc=$rc bytes=$(stats 'd["body_bytes"]') $(tail -1 "$T/err")"; fi

# 11. a partial file with a wrong byte is resumed, never trusted
head -c "$K" "$F" | python3 -c "import sys; b=bytearray(sys.stdin.buffer.read()); b[10]^=0xff; sys.stdout.buffer.write(b)" >"$M/badpart.gguf.part"
up badpart
expect_fail "bad partial file" "badpart: wrong SHA-256"
[ ! -e "$M/badpart.gguf.part" ] && [ ! -e "$M/badpart.gguf" ] && ok "bad partial file: removed" || bad "bad partial file: kept"
reset
up badpart
[ $rc = 0 ] && cmp -s "$F" "$M/badpart.gguf" && [ "$(stats 'd["body_bytes"]')" = "$SIZE" ] &&
  ok "bad partial file: the next run downloads it whole" || bad "bad partial file, again: rc=$rc"

# 12. a partial larger than the model is discarded
head -c $((SIZE + 5)) /dev/zero >"$M/resume.gguf.part"
rm -f "$M/resume.gguf" "$M/resume.gguf.sha256"
up resume
[ $rc = 0 ] && cmp -s "$F" "$M/resume.gguf" && grep -q 'larger than the model' "$T/err" &&
  ok "oversized partial: discarded and downloaded again" || bad "oversized partial: rc=$rc"

# 12b. a partial file another process holds (its lock) is left alone
if command -v flock >/dev/null; then
  exec 9>>"$M/busy.gguf.part"
  flock -n 9
  reset
  up busy
  expect_fail "partial file in use" "busy: another process is downloading $M/busy.gguf.part"
  [ "$(stats 'd["requests"]')" = 0 ] && ok "partial file in use: no request made" || bad "partial file in use: requests made"
  exec 9>&-
  up busy
  [ $rc = 0 ] && cmp -s "$F" "$M/busy.gguf" && ok "partial file released: downloaded" || bad "partial file released: rc=$rc"
fi

# 13. errors of the server and of the catalog
up missing
expect_fail "HTTP 404" "missing: HTTP 404 from $B/ok/nothere.gguf"
up fallback
[ $rc = 0 ] && cmp -s "$F" "$M/fallback.gguf" && grep -q 'trying the next URL' "$T/err" &&
  ok "second URL after a short file" || bad "second URL: rc=$rc $(tail -1 "$T/err")"
up nosuch
expect_fail "unknown name" "unknown model 'nosuch' (the catalog has: ok, drop,"
printf 'ok\t12\tabc\tx\thttp://h/x\n' >"$T/bad.tsv"
MUSER_CATALOG=$T/bad.tsv up ok
expect_fail "malformed catalog" "catalog: line 1: sha256 must be 64 hex digits"

# 14. a URL: needs --sha256; downloaded under its file name
up "$B/ok/tiny.gguf"
expect_fail "URL without --sha256" "a URL needs --sha256"
up "$B/ok/tiny.gguf" --sha256 "$SHA"
[ $rc = 0 ] && served && cmp -s "$F" "$M/tiny.gguf" && ok "URL with --sha256" || bad "URL: rc=$rc $(tail -1 "$T/err")"

# 15. a local file, with and without a hash to check
up "$F"
[ $rc = 0 ] && served && ok "local file" || bad "local file: rc=$rc $(tail -1 "$T/err")"
up "$F" --sha256 "$(printf '0%.0s' $(seq 64))"
expect_fail "local file, wrong --sha256" "wrong SHA-256: expected 0000"
up "$T/nothere.gguf"
expect_fail "missing local file" "cannot open $T/nothere.gguf"

# 16. no argument: the bundled model, checked against the repository's catalog
if [ -f models/muser-default.gguf ]; then
  MUSER_CATALOG= up
  [ $rc = 0 ] && served && grep -q 'muser-default: 22897632 bytes' "$T/err" && ok "bundled default model" ||
    bad "bundled default: rc=$rc $(tail -1 "$T/err")"
fi

# 16b. a LAN bind: refused before any download without TLS and a key; with
# them (a self-signed certificate) the dashboard URL is https
reset
rm -f "$M"/ok.gguf*
up ok --host 0.0.0.0
expect_fail "LAN bind without TLS" "refusing to bind a non-loopback address without TLS and an API key"
[ "$(stats 'd["requests"]')" = 0 ] && ok "LAN bind without TLS: no request made" || bad "LAN bind without TLS: requests made"
if command -v openssl >/dev/null &&
  openssl req -x509 -newkey rsa:2048 -nodes -keyout "$T/tls.key" -out "$T/tls.crt" -days 1 -subj /CN=localhost >/dev/null 2>&1; then
  printf 'up-test-key-0123456789\n' >"$T/api.key" && chmod 600 "$T/api.key"
  up "$F" --host 0.0.0.0 --tls-cert "$T/tls.crt" --tls-key "$T/tls.key" --api-key-file "$T/api.key"
  [ $rc = 0 ] && grep -q '^dashboard: https://127\.0\.0\.1:[0-9]*/$' "$T/out" && ok "LAN bind with --tls-cert, --tls-key, --api-key-file: https dashboard" ||
    bad "LAN bind with TLS: rc=$rc $(tail -1 "$T/err")"
else echo "test_up: openssl is missing: the TLS case is skipped"; fi

# 17. the server keeps running without --exit-after-start and answers
"$MUSER" up drop --no-open --port 0 >"$T/out" 2>"$T/err" &
UP_PID=$!
while ! grep -q '^dashboard:' "$T/out" 2>/dev/null && kill -0 "$UP_PID" 2>/dev/null; do sleep 0.05; done
url=$(sed -n 's/^dashboard: //p' "$T/out")
if [ -n "$url" ] && [ "$(curl -s "${url}health")" = '{"status":"ok"}' ]; then ok "serving at $url"
else bad "serving: $(tail -1 "$T/err")"; fi
kill "$UP_PID" 2>/dev/null
wait "$UP_PID"
UP_PID=

# 18. on a desktop the URL goes to xdg-open (a stand-in here that records it)
mkdir -p "$T/bin"
printf '#!/bin/sh\necho "$1" >"%s/opened.tmp" && mv "%s/opened.tmp" "%s/opened"\n' "$T" "$T" "$T" >"$T/bin/xdg-open"
chmod +x "$T/bin/xdg-open"
PATH=$T/bin:$PATH DISPLAY=:99 "$MUSER" up drop --port 0 --exit-after-start >"$T/out" 2>"$T/err"
rc=$?
url=$(sed -n 's/^dashboard: //p' "$T/out")
# xdg-open runs detached; wait for its record (the loop ends when it appears)
i=0
while [ ! -f "$T/opened" ] && [ $i -lt 6000 ]; do sleep 0.05; i=$((i + 1)); done
[ $rc = 0 ] && [ -n "$url" ] && [ "$(cat "$T/opened" 2>/dev/null)" = "$url" ] && ok "xdg-open called with $url" ||
  bad "xdg-open: rc=$rc url=$url opened=$(cat "$T/opened" 2>/dev/null)"

echo "up: $npass passed, $nfail failed"
exit $fail
