#!/usr/bin/env bash
# test_serve_images.sh: images on every route, with curl against a real
# `muser serve` (issue 19): OpenAI content parts (image_url with a data URL
# or bare base64) on /v1/chat/completions and llama.cpp's /chat/completions,
# Anthropic image blocks (base64 sources; also inside a tool_result) on
# /v1/messages and its count_tokens, Responses input_image parts (data URLs),
# Ollama's images on /api/chat and /api/generate, llama.cpp's /completion
# {prompt_string, multimodal_data} with its "<__media__>" marker. Without a
# projector every image is a 400 that names --mmproj; remote and file URLs,
# bad base64, non-image data URLs, a marker count that does not match and
# text parts without text are 400s that name the field, with or without a
# projector. Capabilities: /props modalities.vision and media_marker,
# /api/show "vision", /v1/models "multimodal", each only with a projector
# (muser gen --mmproj). A file that is not a projector stops serve with a
# one-line error. With a projector, images reach generation on every route
# (/completion's greedy tokens equal `muser run --image`'s), an image that
# does not decode is a 400 that says why, and n > 1 with images is a 400.
# Encodes run off the connection threads: while one is held the server
# answers other requests on its single HTTP thread.
SERVE_TEST_NAME=test_serve_images
source "$(dirname "$0")/serve_lib.sh"

J='Content-Type: application/json'
req() { # req METHOD PATH BODY -> $T/out, prints status
  curl -s -o "$T/out" -w '%{http_code}' -X "$1" "$BASE$2" -H "$J" ${3:+--data-binary "$3"}
}
py() { jget "$T/out" "$1"; }
expect() { # expect NAME STATUS PYEXPR METHOD PATH BODY
  local name=$1 st=$2 ex=$3 got
  shift 3
  got=$(req "$@")
  if [ "$got" = "$st" ] && [ "$(py "$ex")" = True ]; then ok "$name"; else bad "$name: $got $(head -c 400 "$T/out")"; fi
}
# the error text of any protocol's error body
ERR="(j['error']['message'] if isinstance(j.get('error'), dict) else j['error'])"

# a 2x2 RGB PNG, base64
PNG=$(python3 -c '
import base64, struct, zlib
def chunk(t, d): return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d))
raw = b"".join(b"\0" + bytes([x * 100, y * 100, 50] * 1) * 1 + bytes([x * 100 + 50, y * 100, 50]) for y in range(2) for x in range(1))
png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 2, 2, 8, 2, 0, 0, 0)) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")
print(base64.b64encode(png).decode())')
URL="data:image/png;base64,$PNG"
chat() { # chat URL -> an OpenAI chat body with one text part and one image part
  printf '{"messages":[{"role":"user","content":[{"type":"text","text":"What is this?"},{"type":"image_url","image_url":{"url":"%s"}}]}],"max_tokens":2}' "$1"
}
anth() { # anth BASE64 -> an Anthropic Messages body with an image block and a text block
  printf '{"max_tokens":2,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"%s"}},{"type":"text","text":"What is this?"}]}]}' "$1"
}
anth_tool() { # anth_tool BASE64 -> an Anthropic body whose tool_result holds text and an image
  printf '{"max_tokens":2,"messages":[{"role":"user","content":"Look"},{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"read","input":{"f":"a.png"}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"File: a.png"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"%s"}}]}]}]}' "$1"
}
resp() { # resp URL -> a Responses body with an input_text and an input_image part
  printf '{"max_output_tokens":2,"input":[{"role":"user","content":[{"type":"input_text","text":"What is this?"},{"type":"input_image","image_url":"%s"}]}]}' "$1"
}

start_server --parallel 1 --ctx 256 --threads 1 || { bad "server start"; exit 1; }

# ---- no projector: every route refuses images, naming --mmproj
for p in /v1/chat/completions /chat/completions; do
  expect "$p: an image without a projector -> 400 naming --mmproj" 400 "'--mmproj' in $ERR" POST $p "$(chat "$URL")"
done
expect "/v1/chat/completions: bare base64 in image_url.url is an image too -> 400 naming --mmproj" 400 "'--mmproj' in $ERR" POST /v1/chat/completions "$(chat "$PNG")"
expect "/api/chat: images without a projector -> 400 naming --mmproj" 400 "'--mmproj' in $ERR" POST /api/chat \
  "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\",\"images\":[\"$PNG\"]}],\"stream\":false}"
expect "/api/generate: images without a projector -> 400 naming --mmproj" 400 "'--mmproj' in $ERR" POST /api/generate \
  "{\"prompt\":\"hi\",\"images\":[\"$PNG\"],\"stream\":false}"
expect "/completion: multimodal_data without a projector -> 400 naming --mmproj" 400 "'--mmproj' in $ERR" POST /completion \
  "{\"prompt\":{\"prompt_string\":\"<__media__> what is it?\",\"multimodal_data\":[\"$PNG\"]},\"n_predict\":2}"
expect "/v1/messages: an image block without a projector -> 400 in Anthropic's shape naming --mmproj" 400 "j['type'] == 'error' and 'image input is not supported' in $ERR and '--mmproj' in $ERR" POST /v1/messages "$(anth "$PNG")"
expect "/v1/messages: an image in a tool_result without a projector -> 400 naming --mmproj" 400 "'--mmproj' in $ERR" POST /v1/messages "$(anth_tool "$PNG")"
expect "/v1/responses: an input_image without a projector -> 400 naming --mmproj" 400 "'--mmproj' in $ERR" POST /v1/responses "$(resp "$URL")"

# ---- bad image references: 400s that name the field and the problem
bad_refs() { # the same checks with and without a projector
  local tag=$1
  expect "$tag remote https URL -> 400: not fetched" 400 "'not fetched' in $ERR and 'image_url.url' in $ERR" POST /v1/chat/completions "$(chat https://example.com/cat.png)"
  expect "$tag remote http URL on llama.cpp's chat route -> 400: not fetched" 400 "'not fetched' in $ERR" POST /chat/completions "$(chat http://127.0.0.1:1/x.png)"
  expect "$tag file URL -> 400: not read" 400 "'file URLs are not read' in $ERR" POST /v1/chat/completions "$(chat file:///etc/passwd)"
  expect "$tag data URL with bad base64 -> 400 naming the offset" 400 "'invalid base64' in $ERR and 'offset 3' in $ERR" POST /v1/chat/completions "$(chat 'data:image/png;base64,iVB*ORw0')"
  expect "$tag data URL that is not an image -> 400" 400 "'not an image data URL' in $ERR" POST /v1/chat/completions "$(chat 'data:text/plain;base64,aGk=')"
  expect "$tag data URL without base64 -> 400" 400 "'base64-encoded' in $ERR" POST /v1/chat/completions "$(chat 'data:image/png,abc')"
  expect "$tag empty image -> 400" 400 "'empty' in $ERR" POST /v1/chat/completions "$(chat 'data:image/png;base64,')"
  expect "$tag text part without text -> 400" 400 "'content[0].text' in $ERR" POST /v1/chat/completions \
    '{"messages":[{"role":"user","content":[{"type":"text"}]}]}'
  expect "$tag image_url part without image_url -> 400" 400 "'required for an image_url part' in $ERR" POST /v1/chat/completions \
    '{"messages":[{"role":"user","content":[{"type":"image_url"}]}]}'
  expect "$tag image_url without url -> 400 (schema)" 400 "'url' in $ERR" POST /v1/chat/completions \
    '{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{}}]}]}'
  expect "$tag Ollama images with bad base64 -> 400 naming messages[0].images[1]" 400 "'messages[0].images[1]' in $ERR and 'invalid base64' in $ERR" POST /api/chat \
    "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\",\"images\":[\"$PNG\",\"%%%\"]}],\"stream\":false}"
  expect "$tag Ollama generate with bad base64 -> 400 naming images[0]" 400 "'images[0]' in $ERR" POST /api/generate \
    '{"prompt":"hi","images":["a"],"stream":false}'
  expect "$tag /completion: fewer markers than images -> 400" 400 "'1 image but prompt_string holds 0' in $ERR" POST /completion \
    "{\"prompt\":{\"prompt_string\":\"what is it?\",\"multimodal_data\":[\"$PNG\"]},\"n_predict\":2}"
  expect "$tag /completion: bad base64 in multimodal_data -> 400" 400 "'prompt.multimodal_data[0]' in $ERR" POST /completion \
    '{"prompt":{"prompt_string":"<__media__>","multimodal_data":["@@"]},"n_predict":2}'
  expect "$tag text-only content parts still generate" 200 "j['choices'][0]['message']['role'] == 'assistant'" POST /v1/chat/completions \
    '{"messages":[{"role":"user","content":[{"type":"text","text":"Hi"},{"type":"text","text":"there"}]}],"max_tokens":2}'
  expect "$tag /v1/messages: a url image source -> 400: not fetched" 400 "'not fetched' in $ERR and 'source.url' in $ERR" POST /v1/messages \
    '{"max_tokens":2,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"url","url":"https://example.com/a.png"}}]}]}'
  expect "$tag /v1/messages: a file image source -> 400 naming source.type" 400 "'source.type' in $ERR" POST /v1/messages \
    '{"max_tokens":2,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"file","file_id":"f1"}}]}]}'
  expect "$tag /v1/messages: bad base64 -> 400 naming source.data" 400 "'messages[0].content[0].source.data' in $ERR and 'invalid base64' in $ERR" POST /v1/messages "$(anth 'iV*B')"
  expect "$tag /v1/responses: a remote image_url -> 400: not fetched" 400 "'input[0].content[1].image_url' in $ERR and 'not fetched' in $ERR" POST /v1/responses "$(resp https://example.com/a.png)"
  expect "$tag /v1/responses: an input_image by file_id -> 400" 400 "'files are not stored' in $ERR" POST /v1/responses \
    '{"input":[{"role":"user","content":[{"type":"input_image","file_id":"file-1"}]}]}'
  expect "$tag /v1/responses: an input_file part -> 400" 400 "'input_file' in $ERR" POST /v1/responses \
    '{"input":[{"role":"user","content":[{"type":"input_file","file_id":"file-1"}]}]}'
  expect "$tag /completion with empty multimodal_data is text" 200 "'content' in j" POST /completion \
    '{"prompt":{"prompt_string":"Hi","multimodal_data":[]},"n_predict":2}'
}
bad_refs "no projector:"

# ---- capabilities without a projector
expect "/props: modalities.vision false, media_marker <__media__>" 200 "j['modalities']['vision'] is False and j['media_marker'] == '<__media__>'" GET /props ""
expect "/api/show: no vision capability" 200 "'vision' not in j['capabilities']" POST /api/show '{"model":"serve-test-model"}'
expect "/v1/models: no multimodal capability" 200 "'multimodal' not in j['models'][0]['capabilities']" GET /v1/models ""
stop_server

# ---- a file that is not a projector stops serve with one line
if "$MUSER" serve -m "$MODEL" --port 0 --mmproj "$MODEL" >"$T/o" 2>"$T/e"; then bad "serve --mmproj MODEL started"
elif [ "$(wc -l <"$T/e")" = 1 ] && grep -q "not a projector" "$T/e"; then ok "serve --mmproj with a text model GGUF: one-line error ($(cat "$T/e"))"
else bad "serve --mmproj with a text model GGUF: $(cat "$T/e")"; fi

# ---- with a projector
if "$MUSER" gen --mmproj "$T/proj.gguf" --preset tiny >"$T/gen2.log" 2>&1; then
  start_server --parallel 1 --ctx 256 --threads 1 --mmproj "$T/proj.gguf" || { bad "server start with --mmproj"; exit 1; }
  expect "/props with a projector: modalities.vision true" 200 "j['modalities']['vision'] is True" GET /props ""
  expect "/api/show with a projector: capabilities holds vision" 200 "'vision' in j['capabilities']" POST /api/show '{"model":"serve-test-model"}'
  expect "/v1/models with a projector: capabilities holds multimodal" 200 "'multimodal' in j['models'][0]['capabilities']" GET /v1/models ""
  bad_refs "projector:"
  # images reach generation on every route
  python3 -c 'import base64,sys; open(sys.argv[2],"wb").write(base64.b64decode(open(sys.argv[1]).read()))' <(echo "$PNG") "$T/img.png"
  want=$("$MUSER" run -m "$MODEL" --mmproj "$T/proj.gguf" --image "$T/img.png" -p "Look: <__media__> What is it?" -n 6 --temp 0 --json 2>/dev/null |
    python3 -c 'import json,sys; print([json.loads(l)["id"] for l in sys.stdin if l.strip()])')
  expect "/completion with an image: the greedy tokens of muser run --image ($want)" 200 "str(j['tokens']) == '$want' and j['prompt'] == 'Look: <__media__> What is it?'" POST /completion \
    "{\"prompt\":{\"prompt_string\":\"Look: <__media__> What is it?\",\"multimodal_data\":[\"$PNG\"]},\"n_predict\":6,\"temperature\":0,\"return_tokens\":true}"
  for p in /v1/chat/completions /chat/completions; do
    expect "$p with an image generates" 200 "j['choices'][0]['finish_reason'] == 'length' and j['usage']['prompt_tokens'] > 10" POST $p "$(chat "$URL")"
  done
  expect "/v1/chat/completions/input_tokens counts the image's rows" 200 "j['input_tokens'] > 10" POST /v1/chat/completions/input_tokens "$(chat "$URL")"
  expect "/apply-template shows the marker where the image goes" 200 "j['prompt'].count('<__media__>') == 1 and 'What is this?<__media__>' in j['prompt']" POST /apply-template "$(chat "$URL" | sed 's/,"max_tokens":2//')"
  expect "/v1/messages with an image block generates; input_tokens counts its rows" 200 "j['type'] == 'message' and j['usage']['input_tokens'] > 10" POST /v1/messages "$(anth "$PNG")"
  expect "/v1/messages with an image in a tool_result generates" 200 "j['type'] == 'message' and j['usage']['input_tokens'] > 10" POST /v1/messages "$(anth_tool "$PNG")"
  expect "/v1/messages/count_tokens counts the image's rows" 200 "j['input_tokens'] > 10" POST /v1/messages/count_tokens "$(anth "$PNG" | sed 's/"max_tokens":2,//')"
  expect "/v1/responses with an input_image generates" 200 "j['object'] == 'response' and j['usage']['input_tokens'] > 10" POST /v1/responses "$(resp "$URL")"
  st=$(req POST /v1/messages "$(anth "$PNG" | sed 's/"max_tokens":2/"max_tokens":2,"stream":true/')")
  [ "$st" = 200 ] && grep -q 'event: message_stop' "$T/out" && ok "streamed /v1/messages with an image ends with message_stop" || bad "anthropic stream: $st $(head -c 300 "$T/out")"
  expect "/api/chat with images generates" 200 "j['done'] is True and j['prompt_eval_count'] > 10" POST /api/chat \
    "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\",\"images\":[\"$PNG\"]}],\"stream\":false,\"options\":{\"num_predict\":2}}"
  expect "/api/generate with images generates" 200 "j['done'] is True and j['prompt_eval_count'] > 10" POST /api/generate \
    "{\"prompt\":\"hi\",\"images\":[\"$PNG\"],\"stream\":false,\"options\":{\"num_predict\":2}}"
  expect "/api/generate raw with an image generates" 200 "j['done'] is True" POST /api/generate \
    "{\"prompt\":\"hi\",\"raw\":true,\"images\":[\"$PNG\"],\"stream\":false,\"options\":{\"num_predict\":2}}"
  expect "an image that does not decode -> 400 naming why" 400 "'PNG is corrupt' in $ERR" POST /v1/chat/completions "$(chat 'data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAA')"
  expect "a GIF -> 400: unsupported format" 400 "'unsupported format: GIF' in $ERR" POST /api/generate \
    '{"prompt":"hi","images":["R0lGODlhAQABAAAAACw="],"stream":false}'
  expect "n = 2 with an image -> 400" 400 "'one choice' in $ERR" POST /v1/chat/completions \
    "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":{\"url\":\"$URL\"}}]}],\"n\":2,\"max_tokens\":2}"
  expect "/completion: two prompts, one with an image" 200 "len(j) == 2 and j[1]['prompt'] == '<__media__>'" POST /completion \
    "{\"prompt\":[\"Hi\",{\"prompt_string\":\"<__media__>\",\"multimodal_data\":[\"$PNG\"]}],\"n_predict\":2}"
  st=$(req POST /v1/chat/completions "$(chat "$URL" | sed 's/"max_tokens":2/"max_tokens":2,"stream":true/')")
  [ "$st" = 200 ] && grep -q '\[DONE\]' "$T/out" && ok "streamed chat with an image ends with [DONE]" || bad "stream: $st $(head -c 300 "$T/out")"
  stop_server
  # an encode runs off the connection threads: with one HTTP thread and an
  # encode held (MUSER_TEST_ENCODE_HOLD), other requests are answered, the
  # image request waits, and it completes once the encode goes on
  export MUSER_TEST_ENCODE_HOLD=$T/hold
  start_server --parallel 1 --ctx 256 --threads 1 --http-threads 1 --mmproj "$T/proj.gguf" || { bad "server start (encode hold)"; exit 1; }
  curl -s -o "$T/held.out" -w '%{http_code}' -X POST "$BASE/v1/chat/completions" -H "$J" --data-binary "$(chat "$URL")" >"$T/held.st" &
  held_pid=$!
  for ((i = 0; i < 3000; i++)); do [ -e "$T/hold.held" ] && break; sleep 0.1; done
  if [ -e "$T/hold.held" ]; then
    st=$(curl -s -m 120 -o "$T/out" -w '%{http_code}' "$BASE/v1/models")
    st2=$(req POST /v1/chat/completions '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":2}')
    if [ "$st" = 200 ] && [ "$st2" = 200 ] && kill -0 $held_pid 2>/dev/null; then ok "while an encode is held, /v1/models and a text chat are answered on the one HTTP thread"
    else bad "during a held encode: /v1/models $st, text chat $st2, image request still waiting: $(kill -0 $held_pid 2>/dev/null && echo yes || echo no)"; fi
  else
    bad "the held encode never started"
  fi
  # a client that gives up while its encode is queued behind the held one
  # (curl's -m ends it; the encode cannot finish while held): the server goes on
  curl -s -m 3 -o /dev/null -X POST "$BASE/api/generate" -H "$J" \
    --data-binary "{\"prompt\":\"hi\",\"images\":[\"$PNG\"],\"stream\":false}"
  touch "$T/hold"
  wait $held_pid
  [ "$(cat "$T/held.st")" = 200 ] && jget "$T/held.out" "j['choices'][0]['finish_reason'] == 'length'" | grep -q True &&
    ok "the image request completes once the encode goes on" || bad "held image request: $(cat "$T/held.st") $(head -c 300 "$T/held.out")"
  unset MUSER_TEST_ENCODE_HOLD
  expect "after a client hung up mid-wait, an image request still completes" 200 "j['done'] is True" POST /api/generate \
    "{\"prompt\":\"hi\",\"images\":[\"$PNG\"],\"stream\":false,\"options\":{\"num_predict\":2}}"
  expect "/completion: two prompts, each with an image (each waits for its own encode)" 200 "len(j) == 2 and j[0]['prompt'] == '<__media__>' and j[1]['prompt'] == 'And <__media__>'" POST /completion \
    "{\"prompt\":[{\"prompt_string\":\"<__media__>\",\"multimodal_data\":[\"$PNG\"]},{\"prompt_string\":\"And <__media__>\",\"multimodal_data\":[\"$PNG\"]}],\"n_predict\":2}"
  stop_server
else
  echo "skip the projector half: muser gen --mmproj failed: $(tail -1 "$T/gen2.log")"
fi

echo "test_serve_images: $npass passed, $nfail failed"
exit $fail
