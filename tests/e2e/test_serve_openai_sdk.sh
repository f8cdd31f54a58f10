#!/usr/bin/env bash
# test_serve_openai_sdk.sh: the official `openai` npm SDK (pinned in
# tests/e2e/client/package-lock.json, installed with `npm ci` when
# node_modules is absent) against `muser serve` on loopback: models, chat,
# streaming chat, completions, streaming completions, structured output
# (json_schema, json_object with n=2), error classes; models.retrieve (id
# and --alias), embeddings (base64 and float, batched), chat logprobs that
# join to the content, responses (plain and streamed); fields the API
# defines with no effect here (prediction, verbosity, prompt_cache_key,
# modalities) and a sent-back answer message; web_search_options and an
# input_image without a projector refused saying why; Responses logprobs;
# the deprecated functions API.
SERVE_TEST_NAME=test_serve_openai_sdk
source "$(dirname "$0")/serve_lib.sh"
command -v node >/dev/null && command -v npm >/dev/null || { echo "test_serve_openai_sdk: skipped: node/npm unavailable"; exit 0; }
C=tests/e2e/client
if [ ! -d $C/node_modules/openai ]; then
  (cd $C && npm ci --no-audit --no-fund >"$T/npm.log" 2>&1) || { echo "test_serve_openai_sdk: skipped: npm ci failed: $(tail -2 "$T/npm.log")"; exit 0; }
fi
start_server --parallel 2 --ctx 512 --threads 1 --pooling mean --alias sdk-alias || { echo "FAIL server start"; exit 1; }
ID=$(curl -s "$BASE/v1/models" | python3 -c "import json,sys; print(json.load(sys.stdin)['data'][0]['id'])")
node $C/sdk_test.mjs "$BASE" "$ID"
