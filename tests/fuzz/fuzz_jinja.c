/* fuzz_jinja.c: template bytes -> the Jinja lexer, parser and evaluator with a
 * fixed small chat context and tight limits; the same bytes also go through
 * the assistant-output parser in three chunks. Any crash, sanitizer report or
 * hang is a bug: bad templates must come back as an error status. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/chat/chat.h"
#include "../../src/chat/jinja.h"

static const char CTX[] =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": \"h\\u00e9llo\"},"
    " {\"role\": \"assistant\", \"content\": null, \"tool_calls\": [{\"type\": \"function\", \"function\":"
    " {\"name\": \"f\", \"arguments\": {\"a\": 1, \"b\": [1.5, \"x\"]}}}]}, {\"role\": \"tool\", \"content\": \"r\"}],"
    " \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {\"type\": \"object\"}}}],"
    " \"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\", \"n\": 3, \"x\": 2.5}";

static int sink(void *user, const mu_chat_event *ev) {
    (void)user;
    (void)ev;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static json_t *ctx;
    if (!ctx) ctx = json_loads(CTX, 0, NULL);
    mu_jinja_opts o = {.max_output_bytes = 1 << 20, .max_memory_bytes = 32 << 20, .max_steps = 200000,
                       .max_depth = 32, .now_unix = 0};
    char *out = NULL;
    size_t n = 0;
    mu_err err = {0};
    if (mu_jinja_render_opts((const char *)data, size, ctx, &o, &out, &n, &err) == 0) free(out);

    mu_chat_parser *p;
    if (mu_chat_parser_new(&p, &err) == 0) {
        size_t a = size / 3, b = 2 * size / 3;
        mu_chat_parser_feed(p, (const char *)data, a, sink, NULL, &err);
        mu_chat_parser_feed(p, (const char *)data + a, b - a, sink, NULL, &err);
        mu_chat_parser_feed(p, (const char *)data + b, size - b, sink, NULL, &err);
        mu_chat_parser_finish(p, sink, NULL, &err);
        mu_chat_parser_free(p);
    }
    return 0;
}
