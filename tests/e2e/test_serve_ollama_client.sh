#!/usr/bin/env bash
# test_serve_ollama_client.sh: the `ollama` npm package (Ollama's JavaScript
# client, pinned in tests/e2e/client/package-lock.json, installed with
# `npm ci` when absent) against `muser serve` on loopback: list, ps, show,
# version, generate and chat (streamed and not, equal when greedy),
# generate's deprecated context (returned and continued from), chat
# logprobs, a format schema, embed and embeddings, an unknown model, a
# client's usual options (num_ctx above --ctx, runner settings, a dozen
# stops) with think "low".
SERVE_TEST_NAME=test_serve_ollama_client
source "$(dirname "$0")/serve_lib.sh"
command -v node >/dev/null && command -v npm >/dev/null || { echo "test_serve_ollama_client: skipped: node/npm unavailable"; exit 0; }
C=tests/e2e/client
if [ ! -d $C/node_modules/ollama ]; then
  (cd $C && npm ci --no-audit --no-fund >"$T/npm.log" 2>&1) || { echo "test_serve_ollama_client: skipped: npm ci failed: $(tail -2 "$T/npm.log")"; exit 0; }
fi
start_server --parallel 2 --ctx 512 --threads 1 || { echo "FAIL server start"; exit 1; }
ID=$(curl -s "$BASE/v1/models" | python3 -c "import json,sys; print(json.load(sys.stdin)['data'][0]['id'])")
node $C/ollama_test.mjs "$BASE" "$ID"
