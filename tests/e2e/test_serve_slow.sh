#!/usr/bin/env bash
# test_serve_slow.sh: idle and slow clients cannot shut others out
# (issue 21). With slow_clients.py:
#  1. 1000 idle connections + 50 clients sending one byte a second, on a
#     server whose head deadline and idle timeout (600 s) cannot fire during
#     the run: /health and a chat completion succeed while all 1050 stay
#     open, and again after they leave;
#  2. the same on a server with --head-timeout 2: every slow (and idle)
#     connection is closed by the head deadline (counted, not timed), then
#     /health and chat succeed;
#  3. --body-timeout 2: 20 clients trickling a body one byte a second are
#     all closed by the body deadline;
#  4. --max-conns 20: 25 connections, 5 closed at once, 20 stay open;
#  5. --max-conns-per-ip 10: 12 connections from 127.0.0.2, 2 closed, and
#     127.0.0.1 is served meanwhile.
# Counts decide; every wait ends on its condition (600 s hang detectors).
SERVE_TEST_NAME=test_serve_slow
source "$(dirname "$0")/serve_lib.sh"
# this process's own descriptors: 1050 client sockets (the server raises its
# own limit to the hard one)
hard=$(ulimit -Hn)
if [ "$hard" != unlimited ] && [ "$hard" -lt 1200 ]; then
  echo "test_serve_slow: skipped: the hard open-file limit ($hard) is below 1200"
  exit 0
fi
ulimit -n "$hard" 2>/dev/null || true

phase() {
  local what=$1
  shift
  start_server --threads 1 --ctx 256 "$@" || { bad "server start ($what)"; return; }
  local out
  out=$(python3 tests/e2e/slow_clients.py "$PORT" "${PHASE_ARGS[@]}" 2>&1)
  local rc=$?
  echo "$out" | sed "s/^\(ok  \|FAIL\) /\1 [$what] /"
  npass=$((npass + $(echo "$out" | grep -c '^ok ')))
  nfail=$((nfail + $(echo "$out" | grep -c '^FAIL')))
  [ $rc -eq 0 ] || fail=1
  kill -0 "$SERVER_PID" 2>/dev/null && ok "[$what] server alive" || bad "[$what] server died: $(tail -3 "$T/server.log")"
  stop_server
}

PHASE_ARGS=(hold);          phase hold --head-timeout 600 --idle-timeout 600
PHASE_ARGS=(deadline);      phase deadline --head-timeout 2
PHASE_ARGS=(body);          phase body --body-timeout 2 --head-timeout 600
PHASE_ARGS=(limit 20 25);   phase limit --max-conns 20 --head-timeout 600 --idle-timeout 600
PHASE_ARGS=(perip 10 12);   phase perip --max-conns-per-ip 10 --head-timeout 600 --idle-timeout 600

echo "test_serve_slow: $npass passed, $nfail failed"
exit $fail
