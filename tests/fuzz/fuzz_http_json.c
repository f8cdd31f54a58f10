/* fuzz_http_json.c: request bodies through the strict parser and every
 * route's schema (the sessions' too), and the bodies a route accepts through its sampling
 * fields (api_sample_params: logit_bias forms, DRY breakers) into a
 * sampler; raw bytes through the UTF-8 boundary and repair helpers used for
 * output text. None may crash, leak or read out of bounds. */
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
    "/v1/sessions/{id}/continue", "/v1/sessions", "/v1/sessions/{id}/save", "/infill", "/rerank",
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    mu_err err;
    json_t *j = NULL;
    if (mu_jc_parse((const char *)data, size, &j, &err) == 0) {
        static const mu_model_info info = {.n_vocab = 300};
        mu_http_app app = {.info = &info}; /* no tokenizer: text keys of logit_bias are skipped */
        for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
            if (mu_jc_check(j, api_schema(paths[i]), &err) || (i > 2 && i != 16)) continue;
            mu_sample_params p = api_sample_params(&app, j, "seed");
            mu_sampler *s = NULL;
            if (mu_sampler_new(&p, info.n_vocab, &s, &err) == 0) {
                float l[300];
                for (int k = 0; k < 300; k++) l[k] = (float)((k * 37) % 101) / 10.0f;
                for (int k = 0; k < 8; k++) mu_sampler_accept(s, (k * 53) % 300);
                (void)mu_sampler_sample(s, l);
                mu_sampler_free(s);
            }
        }
        json_decref(j);
    }
    json_decref(api_json_text((const char *)data, size));
    (void)api_utf8_complete((const char *)data, size);
    return 0;
}
