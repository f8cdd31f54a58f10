#!/usr/bin/env bash
# test_serve_compat.sh: `muser serve` with curl: the routes and fields
# clients of llama.cpp, OpenAI, Ollama and Anthropic send (issue 17):
# GET /, /v1/models/{id} and --alias, /api/ps, embeddings on every route
# (pooling mean and none, base64, batches), llama.cpp's
# exceed_context_size_error, batch prompts, response_fields, accepted and
# refused fields, lazy grammars, the prompt cache (timings.cache_n, cached_tokens), /slots
# and /props shapes, /completion stream chunks (a token each, with its
# text), id_slot with n choices, a forced tool call, Anthropic
# Messages and OpenAI Responses (plain and streamed, "type" first in every
# event), X-Api-Key, --any-model, CORS, several --host addresses, /infill's
# and /rerank's checks before their 501, and the
# default queue (64 requests wait; the next one is answered 429).
SERVE_TEST_NAME=test_serve_compat
source "$(dirname "$0")/serve_lib.sh"

J='Content-Type: application/json'
req() { # req METHOD PATH BODY [HEADER...] -> $T/out, prints status
  local m=$1 p=$2 b=$3
  shift 3
  curl -s -o "$T/out" -w '%{http_code}' -X "$m" "$BASE$p" -H "$J" "$@" ${b:+--data-binary "$b"}
}
# py EXPR: a Python check on $T/out (j = its JSON); prints True/False
py() { jget "$T/out" "$1"; }
expect() { # expect NAME STATUS PYEXPR METHOD PATH BODY [HEADER...]
  local name=$1 st=$2 ex=$3
  shift 3
  local got
  got=$(req "$@")
  if [ "$got" = "$st" ] && [ "$(py "$ex")" = True ]; then ok "$name"; else bad "$name: $got $(head -c 400 "$T/out")"; fi
}

start_server --parallel 1 --ctx 256 --threads 1 --pooling mean --alias comp-alias || { bad "server start"; exit 1; }
ID=comp-alias
GGUF_ID=$("$MUSER" info -m "$MODEL" | sed -n 's/^name *//p')

# ---- routes
# GET / is the dashboard page (as llama.cpp serves its web UI there; test_dashboard.sh checks the page)
[ "$(curl -s -o "$T/root" -w '%{http_code} %{content_type}' "http://127.0.0.1:$PORT/")" = "200 text/html; charset=utf-8" ] && ok "GET / serves the dashboard page" || bad "GET /: $(head -c 200 "$T/root")"
expect "GET /v1/models: the alias is the id (as llama.cpp)" 200 "j['data'][0]['id'] == 'comp-alias' and j['data'][0]['aliases'] == ['comp-alias']" GET /v1/models ""
expect "GET /v1/models: llama.cpp's Ollama-shaped models list with capabilities" 200 "j['models'][0]['model'] == 'comp-alias' and 'completion' in j['models'][0]['capabilities']" GET /v1/models ""
expect "GET /v1/health" 200 "j['status'] == 'ok'" GET /v1/health ""
expect "POST /chat/completions/input_tokens counts the prompt" 200 "j['input_tokens'] > 3" POST /chat/completions/input_tokens '{"messages":[{"role":"user","content":"Hi there"}]}'
expect "POST /rerank -> 501 not_supported_error (no classification head)" 501 "j['error']['type'] == 'not_supported_error'" POST /rerank '{"query":"a","documents":["b"]}'
expect "POST /rerank: documents [] -> 400 before the 501" 400 "'documents' in j['error']['message']" POST /rerank '{"query":"a","documents":[]}'
expect "POST /rerank: documents of numbers -> 400" 400 "'documents[0]' in j['error']['message']" POST /v1/rerank '{"query":"a","documents":[1,2,3]}'
expect "POST /rerank: documents null -> 400" 400 "'documents' in j['error']['message']" POST /reranking '{"query":"a","documents":null}'
expect "POST /rerank: neither documents nor texts -> 400" 400 "'documents' in j['error']['message']" POST /rerank '{"query":"a"}'
expect "POST /rerank: TEI's texts -> 501 (checked, no reranking model)" 501 "j['error']['type'] == 'not_supported_error'" POST /v1/reranking '{"query":"a","texts":["b"],"return_text":true}'
IF='"input_prefix":"int main() {\\n","input_suffix":"}\\n","prompt":"  int n = "'
expect "POST /infill -> 501 not_supported_error (the vocabulary has no FIM tokens)" 501 "j['error']['type'] == 'not_supported_error' and 'Infill is not supported' in j['error']['message']" POST /infill "{$IF,\"input_extra\":[{\"filename\":\"a.h\",\"text\":\"int f();\"}]}"
expect "POST /infill: an input_extra chunk without text -> 400 naming it, before the model's 501" 400 "'input_extra[0]' in j['error']['message']" POST /infill "{$IF,\"input_extra\":[{\"filename\":\"ok\"}]}"
expect "POST /infill: a non-string input_extra filename -> 400" 400 "'filename' in j['error']['message']" POST /infill "{$IF,\"input_extra\":[{\"filename\":123,\"text\":\"abc\"}]}"
expect "POST /infill: no input_suffix -> 400" 400 "'input_suffix' in j['error']['message']" POST /infill '{"input_prefix":"a"}'
expect "POST /infill: an unknown field -> 400" 400 "'input_extras' in j['error']['message']" POST /infill "{$IF,\"input_extras\":[]}"
expect "GET /lora-adapters: none loaded" 200 "j == []" GET /lora-adapters ""
expect "POST /props -> 501" 501 "j['error']['type'] == 'not_supported_error'" POST /props '{}'
expect "/completion generation_settings: ignore_eos biases the end-of-generation tokens to -inf (null)" 200 "len(j['generation_settings']['logit_bias']) >= 1 and all(b['bias'] is None for b in j['generation_settings']['logit_bias']) and j['generation_settings']['samplers'][0] == 'penalties'" POST /completion '{"prompt":"Hi","n_predict":2,"ignore_eos":true}'
expect "/completion n_cmpl 2 over two prompts: four results, indexed p*n+k, prompts as their tokens' text" 200 "[r['index'] for r in j] == [0,1,2,3] and j[0]['content'] == j[1]['content'] and j[2]['prompt'].endswith('Yo')" POST /completion '{"prompt":["Hi","Yo"],"n_cmpl":2,"n_predict":3,"temperature":0}'
expect "/completion JSON prompt {prompt_string} equals the plain prompt" 200 "j[0]['content'] == j[1]['content']" POST /completion '{"prompt":["Hi there",{"prompt_string":"Hi there"}],"n_predict":3,"temperature":0}'
expect "/completion JSON prompt with multimodal_data -> 400" 400 "'multimodal' in j['error']['message']" POST /completion '{"prompt":{"prompt_string":"Hi","multimodal_data":["iVBO"]}}'
expect "chat: two assistant messages at the end -> 400" 400 "'assistant' in j['error']['message']" POST /v1/chat/completions '{"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"},{"role":"assistant","content":"c"}]}'
expect "chat: add_generation_prompt and continue_final_message both true -> 400" 400 "'error' in j" POST /v1/chat/completions '{"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"}],"add_generation_prompt":true,"continue_final_message":true}'
expect "chat verbose: __verbose.prompt ends with the continued assistant text" 200 "j['__verbose']['prompt'].endswith('Once upon')" POST /v1/chat/completions '{"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"Once upon"}],"max_tokens":2,"verbose":true,"model":null}'
expect "apply-template: add_generation_prompt false renders no generation prompt" 200 "not j['prompt'].endswith('assistant')" POST /apply-template '{"messages":[{"role":"user","content":"a"}],"add_generation_prompt":false}'
expect "GET /v1/models/{the GGUF name}" 200 "j['id'] == '$GGUF_ID' and j['object'] == 'model'" GET "/v1/models/$GGUF_ID" ""
expect "GET /v1/models/{alias}" 200 "j['id'] == 'comp-alias'" GET /v1/models/comp-alias ""
expect "GET /v1/models/{unknown} -> 404 model_not_found" 404 "j['error']['code'] == 'model_not_found'" GET /v1/models/gpt-4o ""
expect "the alias is served" 200 "j['object'] == 'chat.completion'" POST /v1/chat/completions '{"model":"comp-alias","messages":[{"role":"user","content":"Hi"}],"max_tokens":2}'
expect "GET /api/ps" 200 "j['models'][0]['name'] == '$ID:latest'" GET /api/ps ""

# ---- embeddings (--pooling mean)
expect "POST /v1/embeddings: a batch, L2-normalized, usage" 200 \
  "len(j['data']) == 2 and j['data'][1]['index'] == 1 and abs(sum(x*x for x in j['data'][0]['embedding']) - 1) < 1e-5 and j['usage']['prompt_tokens'] > 0" \
  POST /v1/embeddings '{"input":["The tar command","ls"]}'
cp "$T/out" "$T/emb_float"
expect "POST /v1/embeddings base64 = float" 200 \
  "__import__('struct').unpack('<%df' % (len(__import__('base64').b64decode(j['data'][0]['embedding'])) // 4), __import__('base64').b64decode(j['data'][0]['embedding'])) == tuple(__import__('struct').unpack('<%df' % len(json.load(open('$T/emb_float'))['data'][0]['embedding']), __import__('struct').pack('<%df' % len(json.load(open('$T/emb_float'))['data'][0]['embedding']), *json.load(open('$T/emb_float'))['data'][0]['embedding'])))" \
  POST /v1/embeddings '{"input":"The tar command","encoding_format":"base64"}'
expect "POST /embedding (llama.cpp: [{index, embedding: [row]}], raw with embd_normalize -1)" 200 \
  "len(j) == 1 and len(j[0]['embedding']) == 1 and abs(sum(x*x for x in j[0]['embedding'][0]) - 1) > 1e-3" \
  POST /embedding '{"content":"The tar command","embd_normalize":-1}'
expect "POST /embeddings with token ids and a batch of id arrays" 200 "len(j) == 2" POST /embeddings '{"input":[[1,2,3],[4,5]]}'
expect "POST /api/embed (Ollama)" 200 "len(j['embeddings']) == 2 and j['prompt_eval_count'] > 0" POST /api/embed '{"input":["a","b"]}'
expect "POST /api/embeddings (Ollama, older)" 200 "len(j['embedding']) > 8" POST /api/embeddings '{"prompt":"a"}'
expect "embeddings: dimensions other than the model's -> 400" 400 "'dimensions' in j['error']['message']" POST /v1/embeddings '{"input":"a","dimensions":3}'
expect "embeddings: a batch with ids mixed with strings (llama.cpp's mixed prompt)" 200 "len(j['data']) == 2" POST /v1/embeddings '{"input":["a",[1,"x",2]]}'
expect "embeddings: one input of ids mixed with strings" 200 "len(j['data']) == 1" POST /v1/embeddings '{"input":[1,"x",2]}'
expect "embeddings: an object in a prompt -> 400 naming it" 400 "'input[1][0]' in j['error']['message']" POST /v1/embeddings '{"input":["a",[{"b":1}]]}'
expect "embeddings: empty input -> 400" 400 "'empty' in j['error']['message']" POST /v1/embeddings '{"input":[]}'
LONG=$(python3 -c "print('{\"input\":[' + ','.join(['5'] * 600) + ']}')")
expect "embeddings: mean pooling over more than a batch -> 400" 400 "'too large' in j['error']['message']" POST /v1/embeddings "$LONG"

# ---- context overflow: llama.cpp's exceed_context_size_error
OVER=$(python3 -c "print('{\"prompt\":[' + ','.join(['5'] * 300) + '],\"n_predict\":1}')")
expect "/completion: exceed_context_size_error with n_prompt_tokens and n_ctx" 400 \
  "j['error']['type'] == 'exceed_context_size_error' and j['error']['n_prompt_tokens'] == 300 and j['error']['n_ctx'] == 256" \
  POST /completion "$OVER"
expect "/v1/completions: the same error" 400 "j['error']['type'] == 'exceed_context_size_error'" POST /v1/completions "$OVER"
OVERO=$(python3 -c "print('{\"prompt\":\"' + 'a b ' * 300 + '\",\"raw\":true,\"stream\":false}')")
expect "/api/generate: Ollama's plain error" 400 "'exceeds the available context' in j['error']" POST /api/generate "$OVERO"

# ---- batch prompts, response_fields
expect "/completion with [\"a\",\"b\"]: an array of results with index" 200 \
  "[x['index'] for x in j] == [0, 1] and all(x['tokens_predicted'] == 2 for x in j)" \
  POST /completion '{"prompt":["Once","Twice"],"n_predict":2,"temperature":0}'
expect "/completion with [[ids],[ids]]" 200 "len(j) == 2" POST /completion '{"prompt":[[1,2,3],[4,5]],"n_predict":1}'
expect "/v1/completions with 2 prompts x n=2: 4 choices, prompts counted once each" 200 \
  "[c['index'] for c in j['choices']] == [0,1,2,3] and j['choices'][0]['text'] == j['choices'][1]['text']" \
  POST /v1/completions '{"prompt":["Once","Twice"],"n":2,"max_tokens":2,"temperature":0}'
expect "/completion response_fields (nested a/b)" 200 "sorted(j) == ['content', 'timings/prompt_n']" \
  POST /completion '{"prompt":"Once","n_predict":2,"response_fields":["content","timings/prompt_n"]}'

# ---- fields: accepted, refused precisely, unknown
expect "OpenAI store/metadata/service_tier/user and llama.cpp extensions accepted on /v1/chat/completions" 200 "j['object'] == 'chat.completion'" \
  POST /v1/chat/completions '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":2,"store":false,"metadata":{"k":"v"},"service_tier":"auto","user":"u","parallel_tool_calls":true,"n_predict":3,"cache_prompt":false,"id_slot":-1,"timings_per_token":false,"return_progress":false,"chat_template_kwargs":{"reasoning_effort":"low"},"stream_options":null}'
expect "id_slot with n 2: both choices answered (only the first is pinned, as llama.cpp's child tasks)" 200 "len(j['choices']) == 2 and all(c['finish_reason'] == 'length' for c in j['choices'])" \
  POST /chat/completions '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":2,"n":2,"id_slot":0}'
curl -s "$BASE/completion" -H "$J" -d '{"prompt":"Once upon a time","n_predict":24,"temperature":0,"stream":true}' >"$T/lc_sse"
if python3 - "$T/lc_sse" "$BASE" <<'EOF'
import json, sys, urllib.request
chunks = [json.loads(l[6:]) for l in open(sys.argv[1]) if l.startswith("data: ")]
assert chunks[-1]["stop"] is True and chunks[-1]["content"] == "", chunks[-1]
parts = chunks[:-1]
assert len(parts) == 24 and all(len(c["tokens"]) == 1 for c in parts), [c["tokens"] for c in parts]
def piece(t):
    rq = urllib.request.Request(sys.argv[2] + "/detokenize", json.dumps({"tokens": [t]}).encode(), {"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(rq))["content"]
prev_ascii, n_eq = True, 0
for c in parts: # a token after one that left bytes of a character pending may carry them
    p = piece(c["tokens"][0])
    if p.isascii() and prev_ascii: assert c["content"] == p, (c, p); n_eq += 1
    prev_ascii = p.isascii()
assert n_eq >= 8, n_eq
EOF
then ok "/completion stream: one token per chunk, each chunk with the text its token released"; else bad "/completion stream chunks: $(head -c 600 "$T/lc_sse")"; fi
expect "llama.cpp json_schema on /v1/chat/completions" 200 "j['choices'][0]['message']['content'].lstrip()[:1] in '{'" \
  POST /v1/chat/completions '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":30,"temperature":0,"json_schema":{"type":"object"}}'
expect "GBNF grammar on /completion: exactly its text, then the end token" 200 "j['content'] == 'aaaaa' and j['stop_type'] == 'eos'" \
  POST /completion '{"prompt":"x","n_predict":8,"temperature":0,"grammar":"root ::= \"a\"{5,5}"}'
expect "GBNF grammar on /v1/chat/completions (sampled)" 200 "j['choices'][0]['message']['content'] in ('yes', 'no')" \
  POST /v1/chat/completions '{"messages":[{"role":"user","content":"Is it?"}],"max_tokens":8,"seed":3,"grammar":"root ::= \"yes\" | \"no\""}'
expect "a bad grammar -> 400 naming line and column" 400 "j['error']['message'] == \"grammar: expecting ')' at line 1 column 33: end of input\"" \
  POST /v1/chat/completions '{"messages":[{"role":"user","content":"x"}],"grammar":"root ::= this is (not valid GBNF"}'
expect "llama.cpp's lazy-grammar fields off / empty: accepted" 200 "j['content'] == 'aaa'" \
  POST /completion '{"prompt":"x","n_predict":8,"temperature":0,"grammar":"root ::= \"aaa\"","grammar_lazy":false,"grammar_triggers":[],"preserved_tokens":[]}'
# lazy grammars: the greedy text is the plain one up to the trigger, the
# grammar's from the trigger on (tests/e2e/lazy_grammar.py picks triggers
# from the plain greedy text of the test model)
while IFS= read -r l; do
  case $l in ok\ *) ok "${l#ok }" ;; *) bad "${l#FAIL }" ;; esac
done < <(python3 "$(dirname "$0")/lazy_grammar.py" "$BASE" 2>&1 || echo "FAIL lazy_grammar.py exited $?")
expect "lazy fields on chat have no effect (llama.cpp's template sets them): the grammar applies from the first token" 200 "j['choices'][0]['message']['content'] in ('yes', 'no')" \
  POST /v1/chat/completions '{"messages":[{"role":"user","content":"Is it?"}],"max_tokens":8,"seed":3,"grammar":"root ::= \"yes\" | \"no\"","grammar_lazy":true,"grammar_triggers":[]}'
expect "a one-token trigger word not in preserved_tokens -> 400 (as llama.cpp)" 400 "j['error']['message'].startswith(\"field 'grammar_triggers[0]'\") and 'preserved_tokens' in j['error']['message']" \
  POST /completion '{"prompt":"x","grammar":"root ::= \"a\"","grammar_lazy":true,"grammar_triggers":[{"type":1,"value":"<|message|>"}]}'
expect "a preserved one-token trigger word becomes a token trigger" 200 "'content' in j" \
  POST /completion '{"prompt":"x","n_predict":2,"temperature":0,"grammar":"root ::= \"a\"","grammar_lazy":true,"grammar_triggers":[{"type":1,"value":"<|message|>"}],"preserved_tokens":["<|message|>"]}'
# <|image_start|>: a control token (not an end token) in the Muse vocabulary
CTL=$(curl -s "$BASE/tokenize" -H "$J" -d '{"content":"<|image_start|>","parse_special":true}' | python3 -c 'import json,sys; print(json.load(sys.stdin)["tokens"][0])')
expect "/completion: a control token's text is not in content" 200 "j['content'] == 'a'" \
  POST /completion "{\"prompt\":\"x\",\"n_predict\":4,\"grammar\":\"root ::= <[$CTL]> \\\"a\\\"\"}"
expect "/completion: a preserved control token's text is in content (as llama.cpp)" 200 "j['content'] == '<|image_start|>a'" \
  POST /completion "{\"prompt\":\"x\",\"n_predict\":4,\"grammar\":\"root ::= <[$CTL]> \\\"a\\\"\",\"preserved_tokens\":[\"<|image_start|>\"]}"
expect "/completion generation_settings: the lazy fields as llama.cpp writes them (a preserved one-token word as its token trigger)" 200 \
  "(lambda g: g['grammar_lazy'] is True and g['grammar_triggers'] == [{'type': 0, 'value': '<|image_start|>', 'token': $CTL}, {'type': 2, 'value': '(zqzq)'}] and g['preserved_tokens'] == [$CTL])(j['generation_settings'])" \
  POST /completion '{"prompt":"x","n_predict":2,"temperature":0,"grammar":"root ::= \"a\"","grammar_lazy":true,"grammar_triggers":[{"type":1,"value":"<|image_start|>"},{"type":2,"value":"(zqzq)"}],"preserved_tokens":["<|image_start|>"]}'
expect "a lazy grammar with an empty trigger list -> 400" 400 "'no triggers' in j['error']['message']" \
  POST /completion '{"prompt":"x","grammar":"root ::= \"a\"","grammar_lazy":true,"grammar_triggers":[]}'
expect "a trigger pattern outside the regex dialect -> 400 naming it" 400 "j['error']['message'] == 'grammar: trigger 0: regex: lookbehind and named groups are not supported: at byte 1'" \
  POST /completion '{"prompt":"x","grammar":"root ::= \"a\"","grammar_lazy":true,"grammar_triggers":[{"type":2,"value":"(?<=a)b"}]}'
expect "a type 0 trigger without its token id -> 400" 400 "\"'token'\" in j['error']['message']" \
  POST /completion '{"prompt":"x","grammar":"root ::= \"a\"","grammar_lazy":true,"grammar_triggers":[{"type":0,"value":"a"}]}'
expect "grammar_lazy with a JSON schema -> 400 (lazy applies to a grammar here)" 400 "j['error']['message'].startswith(\"field 'grammar_lazy'\")" \
  POST /completion '{"prompt":"x","json_schema":{"type":"integer"},"grammar_lazy":true,"grammar_triggers":[{"type":1,"value":"you are"}]}'
expect "grammar and json_schema together on chat -> 400" 400 "j['error']['param'] == 'grammar'" \
  POST /v1/chat/completions '{"messages":[{"role":"user","content":"x"}],"grammar":"root ::= \"a\"","json_schema":{}}'
expect "post_sampling_probs: prob and top_probs of the final candidates" 200 \
  "all(0 < t['prob'] <= 1 and 0 < len(t['top_probs']) <= 3 and abs(sum(p['prob'] for p in t['top_probs']) - 1) < 1e-5 for t in j['completion_probabilities'])" \
  POST /completion '{"prompt":"Once upon","n_predict":3,"n_probs":3,"top_k":3,"temperature":1,"seed":5,"post_sampling_probs":true}'
expect "OpenAI prediction, verbosity, prompt_cache_key, safety_identifier, modalities [text], audio null: accepted" 200 "j['object'] == 'chat.completion'" \
  POST /v1/chat/completions '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":2,"prediction":{"type":"content","content":"x"},"verbosity":"low","prompt_cache_key":"k","safety_identifier":"s","modalities":["text"],"audio":null,"web_search_options":null}'
expect "an assistant message sent back as OpenAI returned it (refusal, annotations, audio, function_call null)" 200 "j['object'] == 'chat.completion'" \
  POST /v1/chat/completions '{"messages":[{"role":"user","content":"Hi"},{"role":"assistant","content":"yo","refusal":null,"annotations":[],"audio":null,"function_call":null,"tool_calls":null},{"role":"user","content":"x"}],"max_tokens":2}'
expect "modalities with audio -> 400 saying text output only" 400 "j['error']['param'] == 'modalities[1]' and 'text output only' in j['error']['message']" \
  POST /v1/chat/completions '{"messages":[{"role":"user","content":"x"}],"modalities":["text","audio"]}'
for f in web_search_options audio; do
  expect "$f set -> 400 saying why" 400 "j['error']['param'] == '$f' and ('not supported' in j['error']['message'] or 'deprecated' in j['error']['message'])" \
    POST /v1/chat/completions "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"$f\":{}}"
done
expect "Responses conversation/prompt null and top_logprobs 0 accepted, no logprobs" 200 "j['object'] == 'response' and j['output'][-1]['content'][0]['logprobs'] == []" \
  POST /v1/responses '{"input":"Hi","max_output_tokens":2,"conversation":null,"prompt":null,"top_logprobs":0}'
expect "Responses logprobs (include message.output_text.logprobs, top_logprobs 2) join to the text" 200 \
  "(lambda p: len(p['logprobs']) > 0 and ''.join(e['token'] for e in p['logprobs']) == p['text'] and all(len(e['top_logprobs']) == 2 for e in p['logprobs']))(j['output'][-1]['content'][0])" \
  POST /v1/responses '{"input":"Hello","max_output_tokens":8,"temperature":0,"top_logprobs":2,"include":["message.output_text.logprobs"]}'
expect "Responses conversation set -> 400: not stored" 400 "'not stored' in j['error']['message']" POST /v1/responses '{"input":"Hi","conversation":"conv_1"}'
expect "Anthropic container/context_management/mcp_servers null accepted" 200 "j['type'] == 'message'" \
  POST /v1/messages '{"max_tokens":2,"messages":[{"role":"user","content":"Hi"}],"container":null,"context_management":null,"mcp_servers":null}'
expect "Anthropic mcp_servers set -> 400 saying why" 400 "'MCP servers are not supported' in j['error']['message']" \
  POST /v1/messages '{"max_tokens":2,"messages":[{"role":"user","content":"Hi"}],"mcp_servers":[{"type":"url","url":"https://x","name":"x"}]}'
expect "Ollama runner options (num_thread, num_gpu, main_gpu, num_batch, use_mmap, numa, low_vram, num_keep) accepted" 200 "j['done'] is True" \
  POST /api/chat '{"messages":[{"role":"user","content":"Hi"}],"stream":false,"options":{"num_predict":2,"num_thread":4,"num_gpu":1,"main_gpu":0,"num_batch":512,"use_mmap":true,"use_mlock":false,"numa":false,"low_vram":false,"num_keep":5}}'
expect "Ollama num_ctx above the server's context: served with the server's (as Ollama caps it)" 200 "j['done'] is True" \
  POST /api/chat '{"messages":[{"role":"user","content":"Hi"}],"stream":false,"options":{"num_predict":2,"num_ctx":131072}}'
expect "Ollama num_ctx below the prompt -> 400 saying the context is too small" 400 "'context' in j['error']" \
  POST /api/generate '{"prompt":"Hi there, how are you doing today my friend?","raw":true,"stream":false,"options":{"num_ctx":4}}'
expect "Ollama num_ctx bounds the generation (prompt + output <= num_ctx)" 200 "j['done_reason'] == 'length' and j['prompt_eval_count'] + j['eval_count'] <= 24" \
  POST /api/generate '{"prompt":"Hi","raw":true,"stream":false,"options":{"num_ctx":24,"temperature":0,"num_predict":-1}}'
expect "Ollama generate template \"\" accepted" 200 "j['done'] is True" \
  POST /api/generate '{"prompt":"Hi","stream":false,"template":"","options":{"num_predict":1}}'
# Ollama's deprecated context: the answer's tokens (prompt and output, the
# end token left out); sent back, its text comes before the next prompt's
expect "Ollama generate: context = the prompt's and the answer's tokens" 200 \
  "len(j['context']) == j['prompt_eval_count'] + j['eval_count'] - (j['done_reason'] == 'stop')" \
  POST /api/generate '{"prompt":"Hi","stream":false,"options":{"num_predict":4,"temperature":0}}'
CTX1=$(jget "$T/out" "j['context']")
curl -s "$BASE/detokenize" -H "$J" -d "{\"tokens\":$CTX1}" > "$T/ctx1text"
req POST /api/generate '{"prompt":"Again","stream":false,"options":{"num_predict":1,"temperature":0}}' >/dev/null
N_AGAIN=$(jget "$T/out" "j['prompt_eval_count']")
expect "Ollama generate with a context: the earlier conversation's text before the new prompt" 200 \
  "j['prompt_eval_count'] > $N_AGAIN" \
  POST /api/generate "{\"prompt\":\"Again\",\"stream\":false,\"context\":$CTX1,\"options\":{\"num_predict\":4,\"temperature\":0}}"
curl -s "$BASE/detokenize" -H "$J" -d "{\"tokens\":$(jget "$T/out" "j['context']")}" > "$T/ctx2text"
[ "$(jget "$T/ctx2text" "j['content'].startswith(json.load(open('$T/ctx1text'))['content'][:-3]) and 'Again' in j['content'] and j['content'].count('<|begin_of_text|>') <= 1")" = True ] &&
  ok "Ollama generate: the new context's text is the earlier one, then the new turn (one BOS, at the front)" || bad "context text: $(head -c 300 "$T/ctx2text")"
req POST /api/generate '{"prompt":"Hi","options":{"num_predict":2,"temperature":0}}' >/dev/null
[ "$(python3 -c "import json,sys; l=[json.loads(x) for x in open(sys.argv[1]) if x.strip()]; print(l[-1]['done'] and len(l[-1]['context']) > 2 and all('context' not in x for x in l[:-1]))" "$T/out")" = True ] &&
  ok "Ollama generate stream: context only in the done record" || bad "stream context: $(tail -c 300 "$T/out")"
expect "Ollama generate raw: no context in the answer, a sent one ignored (as Ollama)" 200 "'context' not in j" \
  POST /api/generate '{"prompt":"Hi","raw":true,"stream":false,"context":[1,2],"options":{"num_predict":2}}'
expect "Ollama generate: a context id outside the vocabulary -> 400 naming it" 400 "j['error'] == \"field 'context[1]': not a token id of this model\"" \
  POST /api/generate '{"prompt":"Hi","stream":false,"context":[1,99999999]}'
expect "Ollama think \"high\" (a reasoning level) accepted" 200 "j['done'] is True" \
  POST /api/chat '{"messages":[{"role":"user","content":"Hi"}],"stream":false,"think":"high","options":{"num_predict":2}}'
expect "Ollama think \"max\" -> 400 naming the levels" 400 "'low' in j['error'] and 'think' in j['error']" \
  POST /api/chat '{"messages":[{"role":"user","content":"Hi"}],"stream":false,"think":"max"}'
STOPS='["<fim_prefix>","<fim_suffix>","<fim_middle>","<file_sep>","<|endoftext|>","</fim_middle>","</code>","\n\n\n","/src/","#- coding","```","<|im_end|>"]'
expect "12 stop strings (an editor's autocompletion) on /v1/completions" 200 "j['object'] == 'text_completion'" \
  POST /v1/completions "{\"prompt\":\"def f(\",\"max_tokens\":3,\"stop\":$STOPS}"
expect "12 stop strings in Ollama options" 200 "j['done'] is True" \
  POST /api/generate "{\"prompt\":\"def f(\",\"raw\":true,\"stream\":false,\"options\":{\"num_predict\":3,\"stop\":$STOPS}}"
expect "a name nobody defines still -> 400 naming it" 400 "j['error']['param'] == 'stor'" POST /v1/chat/completions '{"messages":[{"role":"user","content":"x"}],"stor":true}'

# ---- prompt cache: the second identical request keeps the prefix
CP='{"prompt":[1,2,3,4,5,6,7,8,9,10],"n_predict":2,"temperature":0,"cache_prompt":true}'
req POST /completion "$CP" >/dev/null
expect "cache_prompt: timings.cache_n = the kept prefix" 200 "j['timings']['cache_n'] == 9 and j['timings']['prompt_n'] == 1" POST /completion "$CP"
expect "without cache_prompt: cache_n 0, usage.prompt_tokens_details.cached_tokens 0" 200 \
  "j['timings']['cache_n'] == 0 and j['usage']['prompt_tokens_details']['cached_tokens'] == 0" \
  POST /v1/completions '{"prompt":[1,2,3,4,5,6,7,8,9,10],"max_tokens":2}'

# ---- /slots and /props in llama.cpp's shapes
expect "/slots: an idle slot has no task fields" 200 "j[0]['id'] == 0 and j[0]['is_processing'] is False and 'next_token' not in j[0]" GET /slots ""
expect "/props: params under llama.cpp's names" 200 "all(k in j['default_generation_settings']['params'] for k in ('temperature','repeat_penalty','samplers','n_predict'))" GET /props ""

# ---- a forced tool call (tool_choice named): the answer is that call
TOOLS='[{"type":"function","function":{"name":"get_time","parameters":{"type":"object"}}},{"type":"function","function":{"name":"search","parameters":{"type":"object"}}}]'
expect "tool_choice named: a call of that function" 200 \
  "(j['choices'][0]['message'].get('tool_calls') or [{'function':{'name':''}}])[0]['function']['name'] == 'search' or (j['choices'][0]['message']['content'] or '').startswith('<atem:function_calls><atem:invoke name=\"search\">')" \
  POST /v1/chat/completions "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"tools\":$TOOLS,\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"search\"}},\"max_tokens\":120,\"temperature\":0}"
FNS='[{"name":"get_time","parameters":{"type":"object"}},{"name":"search","parameters":{"type":"object"}}]'
expect "deprecated functions + function_call named: a call of that function (as message.function_call)" 200 \
  "(j['choices'][0]['message'].get('function_call') or {'name':''})['name'] == 'search' and j['choices'][0]['finish_reason'] == 'function_call' or (j['choices'][0]['message']['content'] or '').startswith('<atem:function_calls><atem:invoke name=\"search\">')" \
  POST /v1/chat/completions "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"functions\":$FNS,\"function_call\":{\"name\":\"search\"},\"max_tokens\":120,\"temperature\":0}"
expect "deprecated functions: a function_call and a function message in the history" 200 "j['object'] == 'chat.completion'" \
  POST /v1/chat/completions "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"},{\"role\":\"assistant\",\"content\":null,\"function_call\":{\"name\":\"search\",\"arguments\":\"{\\\"q\\\":1}\"}},{\"role\":\"function\",\"name\":\"search\",\"content\":\"42\"}],\"functions\":$FNS,\"function_call\":\"none\",\"max_tokens\":2}"
expect "functions and tools together -> 400" 400 "j['error']['param'] == 'functions'" \
  POST /v1/chat/completions "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"functions\":$FNS,\"tools\":$TOOLS}"
expect "tool_choice naming no tool -> 400" 400 "'tool_choice' in j['error']['message']" POST /v1/chat/completions "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"tools\":$TOOLS,\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"nope\"}}}"

# ---- Anthropic Messages
expect "/v1/messages" 200 "j['type'] == 'message' and j['content'][0]['type'] == 'text' and j['stop_reason'] in ('end_turn','max_tokens') and j['usage']['output_tokens'] <= 5" \
  POST /v1/messages '{"max_tokens":5,"system":"Be brief.","messages":[{"role":"user","content":"Hi"}],"temperature":0}'
cp "$T/out" "$T/an_plain"
curl -s "$BASE/v1/messages" -H "$J" -d '{"max_tokens":5,"system":"Be brief.","messages":[{"role":"user","content":"Hi"}],"temperature":0,"stream":true}' >"$T/an_sse"
if python3 - "$T/an_sse" "$T/an_plain" <<'EOF'
import json, sys
evs = []
for block in open(sys.argv[1]).read().split("\n\n"):
    lines = block.strip().split("\n")
    if len(lines) == 2 and lines[0].startswith("event: ") and lines[1].startswith("data: "):
        d = json.loads(lines[1][6:]); assert d["type"] == lines[0][7:] and list(d)[0] == "type"; evs.append(d)
kinds = [e["type"] for e in evs]
assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"], kinds
text = "".join(e["delta"]["text"] for e in evs if e["type"] == "content_block_delta")
plain = json.load(open(sys.argv[2]))["content"][0]["text"]
assert text == plain, (text, plain)
EOF
then ok "/v1/messages stream: event sequence, text equals the plain answer"; else bad "/v1/messages stream: $(head -c 600 "$T/an_sse")"; fi
expect "/v1/messages with tool_use and tool_result history" 200 "j['type'] == 'message'" POST /v1/messages \
  '{"max_tokens":3,"messages":[{"role":"user","content":"Hi"},{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f","input":{"a":1}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"42"}]}],"tools":[{"name":"f","input_schema":{"type":"object"}}]}'
expect "/v1/messages errors in Anthropic's shape" 400 "j['type'] == 'error' and j['error']['type'] == 'invalid_request_error' and 'contnt' in j['error']['message']" \
  POST /v1/messages '{"max_tokens":3,"messages":[{"role":"user","contnt":"x"}]}'
expect "/v1/messages/count_tokens" 200 "j['input_tokens'] > 0" POST /v1/messages/count_tokens '{"messages":[{"role":"user","content":"Hi"}]}'

# ---- OpenAI Responses
expect "/v1/responses" 200 "j['object'] == 'response' and j['output'][-1]['content'][0]['type'] == 'output_text' and j['usage']['output_tokens'] <= 5" \
  POST /v1/responses '{"input":"Hi","max_output_tokens":5,"temperature":0}'
cp "$T/out" "$T/rs_plain"
curl -s "$BASE/responses" -H "$J" -d '{"input":"Hi","max_output_tokens":5,"temperature":0,"stream":true}' >"$T/rs_sse"
if python3 - "$T/rs_sse" "$T/rs_plain" <<'EOF'
import json, sys
evs = []
for block in open(sys.argv[1]).read().split("\n\n"):
    lines = block.strip().split("\n")
    if len(lines) == 2 and lines[0].startswith("event: "):
        d = json.loads(lines[1][6:]); assert d["type"] == lines[0][7:] and list(d)[0] == "type"; evs.append(d)
assert [e["sequence_number"] for e in evs] == list(range(len(evs)))
assert evs[0]["type"] == "response.created" and evs[-1]["type"] in ("response.completed", "response.incomplete")
text = "".join(e["delta"] for e in evs if e["type"] == "response.output_text.delta")
plain = json.load(open(sys.argv[2]))["output"][-1]["content"][0]["text"]
assert text == plain, (text, plain)
EOF
then ok "/responses stream: typed events in sequence, text equals the plain answer"; else bad "/responses stream: $(head -c 600 "$T/rs_sse")"; fi
stop_server

# ---- pooling none (the default, as llama.cpp for this architecture)
start_server --parallel 1 --ctx 256 --threads 1 || { bad "server start"; exit 1; }
expect "pooling none: /embedding gives one row per token" 200 "len(j[0]['embedding']) == 3" POST /embedding '{"content":[1,2,3]}'
expect "pooling none: /v1/embeddings -> 400 naming --pooling" 400 "'--pooling' in j['error']['message']" POST /v1/embeddings '{"input":"a"}'
expect "pooling none: /api/embed takes the last token's row" 200 "len(j['embeddings']) == 1" POST /api/embed '{"input":"a"}'
stop_server

# ---- a key (X-Api-Key as well as Bearer), --any-model, CORS
umask 077
echo "k3y-for-compat" >"$T/key"
start_server --parallel 1 --ctx 256 --threads 1 --api-key-file "$T/key" --any-model --cors "http://app.example,localhost" || { bad "server start"; exit 1; }
expect "X-Api-Key is accepted" 200 "j['object'] == 'list'" GET /v1/models "" -H "X-Api-Key: k3y-for-compat"
expect "a wrong X-Api-Key -> 401" 401 "'error' in j" GET /v1/models "" -H "X-Api-Key: nope"
expect "Anthropic with X-Api-Key and a hard-coded model name (--any-model)" 200 "j['type'] == 'message'" \
  POST /v1/messages '{"model":"claude-sonnet-4-5","max_tokens":2,"messages":[{"role":"user","content":"Hi"}]}' -H "X-Api-Key: k3y-for-compat"
code=$(curl -s -o /dev/null -D "$T/hdr" -w '%{http_code}' -X OPTIONS "$BASE/v1/chat/completions" -H "Origin: http://app.example" -H "Access-Control-Request-Method: POST")
if [ "$code" = 200 ] && grep -qi '^Access-Control-Allow-Origin: http://app.example' "$T/hdr" && grep -qi '^Access-Control-Allow-Headers:.*Authorization' "$T/hdr"; then
  ok "CORS preflight from an allowed origin: 200 without a key"; else bad "CORS preflight: $code $(cat "$T/hdr")"; fi
code=$(curl -s -o /dev/null -D "$T/hdr" -w '%{http_code}' -X OPTIONS "$BASE/v1/chat/completions" -H "Origin: http://app.example" -H "Access-Control-Request-Method: POST" -H "Access-Control-Request-Headers: authorization, content-type, x-stainless-os, x-stainless-retry-count")
if [ "$code" = 200 ] && grep -qi '^Access-Control-Allow-Headers: authorization, content-type, x-stainless-os, x-stainless-retry-count' "$T/hdr"; then
  ok "CORS preflight: the headers an SDK asks for are allowed (echoed)"; else bad "CORS preflight headers: $code $(cat "$T/hdr")"; fi
curl -s -o /dev/null -D "$T/hdr" "$BASE/v1/models" -H "Authorization: Bearer k3y-for-compat" -H "Origin: http://evil.example"
grep -qi '^Access-Control-Allow-Origin' "$T/hdr" && bad "CORS header for an origin not listed" || ok "no CORS header for an origin not listed"
curl -s -o /dev/null -D "$T/hdr" "$BASE/v1/models" -H "Authorization: Bearer k3y-for-compat" -H "Origin: http://[::1]:5173"
grep -qi '^Access-Control-Allow-Origin: http://\[::1\]:5173' "$T/hdr" && ok "CORS 'localhost' entry: a local origin with a port is allowed" || bad "CORS localhost entry: $(cat "$T/hdr")"
curl -s -o /dev/null -D "$T/hdr" "$BASE/v1/models" -H "Authorization: Bearer k3y-for-compat" -H "Origin: http://localhost.evil.example"
grep -qi '^Access-Control-Allow-Origin' "$T/hdr" && bad "CORS localhost entry let http://localhost.evil.example in" || ok "CORS 'localhost' entry: http://localhost.evil.example is not local"
stop_server

# ---- several addresses in one --host (llama-server's "127.0.0.1,::1"):
# one listener each, on the same port, the same key
if python3 -c 'import socket; socket.socket(socket.AF_INET6).bind(("::1", 0))' 2>/dev/null; then
  start_server --parallel 1 --ctx 256 --threads 1 --api-key-file "$T/key" --host "127.0.0.1,::1" || { bad "server start"; exit 1; }
  for h in 127.0.0.1 '[::1]'; do
    [ "$(curl -s -o /dev/null -w '%{http_code}' "http://$h:$PORT/health")" = 200 ] && ok "--host 127.0.0.1,::1: /health on $h" || bad "/health on $h"
    [ "$(curl -s -o /dev/null -w '%{http_code}' "http://$h:$PORT/v1/completions" -H "$J" -d '{}')" = 401 ] && ok "--host list: no key on $h -> 401" || bad "401 on $h"
    [ "$(curl -s -o "$T/out" -w '%{http_code}' "http://$h:$PORT/v1/completions" -H "$J" -H "Authorization: Bearer k3y-for-compat" -d '{"prompt":"Once","max_tokens":2}')" = 200 ] &&
      [ "$(py "j['object'] == 'text_completion'")" = True ] && ok "--host list: a completion on $h" || bad "completion on $h: $(head -c 300 "$T/out")"
  done
  stop_server
else ok "--host list: skipped (no IPv6 loopback here)"; fi
for hl in "127.0.0.1,,::1" "127.0.0.1,::1,127.0.0.2,127.0.0.3,127.0.0.4"; do
  if "$MUSER" serve -m "$MODEL" --port 0 --host "$hl" >"$T/hl.log" 2>&1; then bad "--host $hl started"
  else grep -q 'comma-separated addresses' "$T/hl.log" && ok "--host $hl: refused, saying why" || bad "--host $hl: $(cat "$T/hl.log")"; fi
done

# ---- the default queue: 64 requests wait for the one slot, the next is
# 429. MUSER_TEST_STALL_AFTER=1 keeps the first job in the slot after one
# token (until it is cancelled), so the slot stays busy and the queue fills:
# of 66 concurrent requests exactly one is refused (counted, not timed).
metric() { curl -s "$BASE/metrics" | sed -n "s/^llamacpp:$1 //p" | cut -d. -f1; }
wait_metric() { # NAME VALUE: until the metric has the value (a hang detector, 600 s)
  for _ in $(seq 1 3000); do [ "$(metric "$1")" = "$2" ] && return 0; sleep 0.2; done; return 1; }
MUSER_TEST_STALL_AFTER=1 start_server --parallel 1 --ctx 64 --threads 1 || { bad "server start"; exit 1; }
bpids=()
for i in $(seq 1 66); do
  curl -s -o /dev/null -w '%{http_code}\n' "$BASE/completion" -H "$J" -d '{"prompt":[1,2],"n_predict":4}' >"$T/burst$i" &
  bpids+=($!)
done
if wait_metric requests_rejected_busy_total 1 && wait_metric requests_deferred 64 && wait_metric requests_processing 1 &&
   [ "$(cat "$T"/burst* | grep -c 429)" = 1 ]; then
  ok "default queue: 1 running + 64 waiting of 66 concurrent requests, exactly one 429"
else bad "burst: busy $(metric requests_rejected_busy_total) deferred $(metric requests_deferred) processing $(metric requests_processing)"; fi
expect "/slots: a busy slot has llama.cpp's task fields (next_token an array of one)" 200 \
  "j[0]['is_processing'] is True and j[0]['next_token'][0]['n_decoded'] == 1 and 'params' in j[0] and j[0]['n_prompt_tokens'] == 2" GET /slots ""
stop_server
wait "${bpids[@]}" 2>/dev/null

echo "test_serve_compat: $npass passed, $nfail failed"
exit $fail
