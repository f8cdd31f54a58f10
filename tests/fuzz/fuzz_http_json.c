/* fuzz_http_json.c: request bodies through the strict parser and every
 * route's schema; raw bytes through the UTF-8 boundary and repair helpers
 * used for output text. None may crash, leak or read out of bounds. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/http/api.h"
#include "../../src/http/jcheck.h"

static const char *const paths[] = {
    "/v1/chat/completions", "/v1/completions", "/completion", "/tokenize", "/detokenize",
    "/apply-template",      "/api/generate",   "/api/chat",   "/api/show",
    "/v1/embeddings",       "/embedding",      "/api/embed",  "/api/embeddings",
    "/v1/messages",         "/v1/messages/count_tokens",      "/v1/responses",
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    mu_err err;
    json_t *j = NULL;
    if (mu_jc_parse((const char *)data, size, &j, &err) == 0) {
        for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) mu_jc_check(j, api_schema(paths[i]), &err);
        json_decref(j);
    }
    json_decref(api_json_text((const char *)data, size));
    (void)api_utf8_complete((const char *)data, size);
    return 0;
}
