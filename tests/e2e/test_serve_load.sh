#!/usr/bin/env bash
# test_serve_load.sh: a short load test of `muser serve` on loopback (CI
# size): load_serve.py with 12 streaming clients, 5 rounds of 12 requests
# each (720 requests) over the three protocols, a quarter hanging up
# mid-stream. Counts, not a clock, decide the run's length and every verdict
# (see load_serve.py). The documented soak run (32 clients, several minutes)
# is in docs/api.md.
SERVE_TEST_NAME=test_serve_load
source "$(dirname "$0")/serve_lib.sh"
# An ASan build keeps freed blocks in a quarantine (256 MiB by default), which
# RSS counts; a small one keeps the memory check about leaks (no-op otherwise).
ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}quarantine_size_mb=16 \
  start_server --parallel 4 --queue 8 --ctx 256 --threads 1 || { echo "FAIL server start"; exit 1; }
python3 tests/e2e/load_serve.py "$PORT" "$SERVER_PID" --clients "${LOAD_CLIENTS:-12}" \
  --rounds "${LOAD_ROUNDS:-5}" --requests "${LOAD_REQUESTS:-12}" --max-tokens 16
