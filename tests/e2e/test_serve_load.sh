#!/usr/bin/env bash
# test_serve_load.sh: a short load test of `muser serve` on loopback (CI
# size): load_serve.py with 12 streaming clients for 30 s over the three
# protocols, a quarter hanging up mid-stream. The documented full run
# (32 clients, several minutes) is in docs/api.md.
SERVE_TEST_NAME=test_serve_load
source "$(dirname "$0")/serve_lib.sh"
start_server --parallel 4 --queue 8 --ctx 256 --threads 1 || { echo "FAIL server start"; exit 1; }
python3 tests/e2e/load_serve.py "$PORT" "$SERVER_PID" --clients "${LOAD_CLIENTS:-12}" --seconds "${LOAD_SECONDS:-30}" --max-tokens 16
