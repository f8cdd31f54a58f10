/* fuzz_jsonc.c: the structured-output recognizer (src/gen/jsonc.h).
 * Input: a schema line, then the text. The first line is a JSON Schema, or
 * empty (any value), or "object" (json_object mode). The schema goes
 * through the compiler (refusals must be clean errors); the text is fed in
 * two chunkings, which must agree; when the recognizer calls the text a
 * complete value it must parse (jansson) and validate against the schema
 * (tests/unit/jsonc_check.h). None may crash, leak or read out of bounds. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/gen/jsonc.h"
#include "../unit/jsonc_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *p = (const char *)data;
    const char *nl = memchr(p, '\n', size);
    if (!nl) return 0;
    size_t hl = (size_t)(nl - p);
    const char *text = nl + 1;
    size_t n = size - hl - 1;
    json_t *schema = NULL;
    bool object_only = hl == 6 && !memcmp(p, "object", 6);
    if (hl && !object_only) {
        schema = json_loadb(p, hl, 0, NULL);
        if (!schema) return 0;
    }
    mu_err err;
    mu_jsonc_schema *s = NULL;
    if (mu_jsonc_schema_new(schema, object_only, "schema", &s, &err)) {
        json_decref(schema);
        return 0;
    }
    mu_jsonc *a = NULL, *b = NULL;
    if (mu_jsonc_new(s, &a, &err) || mu_jsonc_new(s, &b, &err)) abort();
    bool ra = mu_jsonc_feed(a, text, n);
    bool rb = true;
    for (size_t i = 0; i < n && rb; i += 3) rb = mu_jsonc_feed(b, text + i, n - i < 3 ? n - i : 3);
    if (ra != rb || mu_jsonc_complete(a) != mu_jsonc_complete(b) || mu_jsonc_closed(a) != mu_jsonc_closed(b)) abort();
    if (ra && mu_jsonc_complete(a)) {
        json_t *v = json_loadb(text, n, JSON_DECODE_ANY | JSON_DECODE_INT_AS_REAL | JSON_ALLOW_NUL, NULL);
        if (!v) abort();
        if (object_only && !json_is_object(v)) abort();
        if (schema && !jv_valid(schema, schema, v, 0)) abort();
        json_decref(v);
    }
    if (ra) {
        uint64_t set[4];
        mu_jsonc_next_bytes(a, b, set);
        if (!mu_jsonc_closed(a) && !(set[0] | set[1] | set[2] | set[3])) abort(); /* stuck */
    }
    mu_jsonc_free(a);
    mu_jsonc_free(b);
    mu_jsonc_schema_unref(s);
    json_decref(schema);
    return 0;
}
