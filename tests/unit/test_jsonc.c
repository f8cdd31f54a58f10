/* test_jsonc.c: the constrained-decoding JSON recognizer (src/gen/jsonc.h):
 * schema compilation (accepted and refused keywords), accepted and rejected
 * texts, completeness, and random walks that only ever pick allowed bytes:
 * the recognizer must never get stuck, and every walk it calls closed must
 * parse (jansson) and validate against the schema (tests/unit/jsonc_check.h,
 * an independent validator). No model needed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/gen/jsonc.h"
#include "jsonc_check.h"

enum { DEAD = 0, ALIVE = 1, COMPLETE = 2, CLOSED = 3 };

static mu_jsonc_schema *compile_text(const char *schema, bool object_only) {
    json_t *j = NULL;
    if (schema) {
        j = json_loads(schema, 0, NULL);
        assert_non_null(j);
    }
    mu_jsonc_schema *s = NULL;
    mu_err err = {0};
    int rc = mu_jsonc_schema_new(j, object_only, "schema", &s, &err);
    if (rc) fprintf(stderr, "compile failed: %s\n", err.msg);
    assert_int_equal(rc, 0);
    json_decref(j);
    return s;
}

static int run(const char *schema, bool object_only, const char *text) {
    mu_jsonc_schema *s = compile_text(schema, object_only);
    mu_jsonc *r = NULL;
    assert_int_equal(mu_jsonc_new(s, &r, NULL), 0);
    bool alive = mu_jsonc_feed(r, text, strlen(text));
    int res = !alive ? DEAD : mu_jsonc_closed(r) ? CLOSED : mu_jsonc_complete(r) ? COMPLETE : ALIVE;
    /* byte-by-byte feeding gives the same answer */
    mu_jsonc_reset(r);
    bool a2 = true;
    for (size_t i = 0; text[i]; i++) a2 = mu_jsonc_feed(r, text + i, 1);
    assert_int_equal(a2, alive);
    mu_jsonc_free(r);
    mu_jsonc_schema_unref(s);
    return res;
}

static void refused(const char *schema, const char *needle) {
    json_t *j = json_loads(schema, 0, NULL);
    assert_non_null(j);
    mu_jsonc_schema *s = NULL;
    mu_err err = {0};
    assert_int_equal(mu_jsonc_schema_new(j, false, "response_format.json_schema.schema", &s, &err), MU_E_ARG);
    if (!strstr(err.msg, needle)) fail_msg("message '%s' lacks '%s'", err.msg, needle);
    json_decref(j);
}

static void test_any_json(void **st) {
    (void)st;
    assert_int_equal(run(NULL, false, "{\"a\": [1, 2.5e-3, true, null, \"x\\u00e9\\n\"]}"), CLOSED);
    assert_int_equal(run(NULL, false, "[]"), CLOSED);
    assert_int_equal(run(NULL, false, "[ ]"), CLOSED);
    assert_int_equal(run(NULL, false, "\"caf\xc3\xa9\""), CLOSED);
    assert_int_equal(run(NULL, false, "12"), COMPLETE);
    assert_int_equal(run(NULL, false, "-0.5E+7"), COMPLETE);
    assert_int_equal(run(NULL, false, "tru"), ALIVE);
    assert_int_equal(run(NULL, false, "true"), CLOSED);
    assert_int_equal(run(NULL, false, "{\"a\":"), ALIVE);
    assert_int_equal(run(NULL, false, "{\n  \"a\": {\n    \"b\": []\n  }\n}\n"), CLOSED);
    /* rejected */
    assert_int_equal(run(NULL, false, "{,"), DEAD);
    assert_int_equal(run(NULL, false, "[1,]"), DEAD);
    assert_int_equal(run(NULL, false, "01"), DEAD);
    assert_int_equal(run(NULL, false, "1."), ALIVE);
    assert_int_equal(run(NULL, false, "1.e"), DEAD);
    assert_int_equal(run(NULL, false, "{\"a\":1}x"), DEAD);
    assert_int_equal(run(NULL, false, "\"a\x01\""), DEAD);       /* control character */
    assert_int_equal(run(NULL, false, "\"\xc0\xaf\""), DEAD);    /* overlong */
    assert_int_equal(run(NULL, false, "\"\xed\xa0\x80\""), DEAD); /* UTF-8 surrogate */
    assert_int_equal(run(NULL, false, "\"\\ud800\""), DEAD);      /* escaped surrogate */
    assert_int_equal(run(NULL, false, "\"\\q\""), DEAD);
    assert_int_equal(run(NULL, false, "  1"), DEAD);              /* two spaces: not canonical whitespace */
    assert_int_equal(run(NULL, false, "\n\t\t1"), COMPLETE);
    /* json_object: the value must be an object */
    assert_int_equal(run(NULL, true, "[1]"), DEAD);
    assert_int_equal(run(NULL, true, "{}"), CLOSED);
}

static const char *person =
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"age\":{\"type\":\"integer\"},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"a\",\"ab\",1]},\"maxItems\":2},"
    "\"nick\":{\"anyOf\":[{\"type\":\"string\"},{\"type\":\"null\"}]}},"
    "\"required\":[\"name\",\"age\"],\"additionalProperties\":false}";

static void test_schema(void **st) {
    (void)st;
    assert_int_equal(run(person, false, "{\"name\":\"x\",\"age\":3}"), CLOSED);
    assert_int_equal(run(person, false, "{\"age\": -3, \"name\": \"\", \"nick\": null, \"tags\": [\"ab\", 1]}"), CLOSED);
    assert_int_equal(run(person, false, "{\"name\":\"x\"}"), DEAD);                /* age required */
    assert_int_equal(run(person, false, "{\"name\":\"x\",\"age\":3.5"), DEAD);     /* integer */
    assert_int_equal(run(person, false, "{\"name\":\"x\",\"name\""), DEAD);        /* duplicate */
    assert_int_equal(run(person, false, "{\"nam\":"), DEAD);                       /* undeclared */
    assert_int_equal(run(person, false, "{\"n"), ALIVE);
    assert_int_equal(run(person, false, "{\"tags\":[\"a\",\"a\",\"a\"]"), DEAD);  /* maxItems */
    assert_int_equal(run(person, false, "{\"tags\":[\"abc\"]"), DEAD);            /* enum */
    assert_int_equal(run(person, false, "{\"tags\":[1"), ALIVE);
    assert_int_equal(run(person, false, "{\"nick\":nul"), ALIVE);
    assert_int_equal(run(person, false, "{\"nick\":5"), DEAD);
    /* const, enum numbers (1 vs 12), type arrays, minItems */
    assert_int_equal(run("{\"const\":{\"k\":[1,2]}}", false, "{\"k\":[1,2]}"), CLOSED);
    assert_int_equal(run("{\"const\":{\"k\":[1,2]}}", false, "{\"k\": [1,2]}"), DEAD); /* canonical form only */
    assert_int_equal(run("{\"enum\":[1,12]}", false, "1"), COMPLETE);
    assert_int_equal(run("{\"enum\":[1,12]}", false, "12"), CLOSED);
    assert_int_equal(run("{\"enum\":[1,12]}", false, "13"), DEAD);
    assert_int_equal(run("{\"type\":[\"string\",\"null\"]}", false, "null"), CLOSED);
    assert_int_equal(run("{\"type\":[\"string\",\"null\"]}", false, "1"), DEAD);
    assert_int_equal(run("{\"type\":\"array\",\"minItems\":1}", false, "[]"), DEAD);
    assert_int_equal(run("{\"type\":\"array\",\"minItems\":1}", false, "[0]"), CLOSED);
    /* anyOf of two objects: both stay alive until a key tells them apart */
    const char *u = "{\"anyOf\":[{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\"}},\"required\":[\"a\"],"
                    "\"additionalProperties\":false},{\"type\":\"object\",\"properties\":{\"b\":{\"type\":\"integer\"}},"
                    "\"required\":[\"b\"],\"additionalProperties\":false}]}";
    assert_int_equal(run(u, false, "{\"b\":1}"), CLOSED);
    assert_int_equal(run(u, false, "{\"a\":\"\"}"), CLOSED);
    assert_int_equal(run(u, false, "{\"a\":1"), DEAD);
    /* recursion through $defs */
    const char *tree = "{\"$defs\":{\"n\":{\"type\":\"object\",\"properties\":{\"kids\":{\"type\":\"array\","
                       "\"items\":{\"$ref\":\"#/$defs/n\"}}},\"additionalProperties\":false}},\"$ref\":\"#/$defs/n\"}";
    assert_int_equal(run(tree, false, "{\"kids\":[{\"kids\":[]},{}]}"), CLOSED);
    assert_int_equal(run(tree, false, "{\"kids\":[{\"x\":1}]}"), DEAD);
    /* additional properties with a schema */
    assert_int_equal(run("{\"additionalProperties\":{\"type\":\"integer\"}}", false, "{\"q\":1,\"r\":2}"), CLOSED);
    assert_int_equal(run("{\"additionalProperties\":{\"type\":\"integer\"}}", false, "{\"q\":\"s\""), DEAD);
    /* the tuple form (llama.cpp's reading: exactly these items, in order;
     * minItems / maxItems do not apply); "items" wins over "prefixItems" */
    const char *tup = "{\"items\":[{\"type\":\"integer\"},{\"type\":\"string\"}],\"maxItems\":1}";
    assert_int_equal(run(tup, false, "[1, \"a\"]"), CLOSED);
    assert_int_equal(run(tup, false, "[1]"), DEAD);
    assert_int_equal(run(tup, false, "[\"a\""), DEAD);
    assert_int_equal(run(tup, false, "[1,\"a\",2"), DEAD);
    assert_int_equal(run("{\"items\":[{\"type\":\"integer\"}]}", false, "[ -3000 ]"), CLOSED);
    assert_int_equal(run("{\"items\":[]}", false, "[]"), CLOSED);
    /* without "type" the structural keywords decide, as in llama.cpp */
    assert_int_equal(run("{\"items\":[{\"type\":\"integer\"}]}", false, "true"), DEAD);
    assert_int_equal(run("{\"items\":{}}", false, "\"s\""), DEAD);
    assert_int_equal(run("{\"properties\":{\"a\":{}}}", false, "1"), DEAD);
    assert_int_equal(run("{\"additionalProperties\":false}", false, "[]"), DEAD);
    assert_int_equal(run("{\"additionalProperties\":true}", false, "[]"), CLOSED);
    assert_int_equal(run("{\"minItems\":1}", false, "\"s\""), CLOSED);
    assert_int_equal(run("{\"items\":[]}", false, "[1"), DEAD);
    assert_int_equal(run("{\"prefixItems\":[{\"const\":true}]}", false, "[true]"), CLOSED);
    assert_int_equal(run("{\"prefixItems\":[{\"const\":true}],\"items\":{\"type\":\"null\"}}", false, "[true"), DEAD);
    /* escaped property names match their canonical text */
    assert_int_equal(run("{\"properties\":{\"a\\\"b\":{}},\"additionalProperties\":false}", false,
                         "{\"a\\\"b\":1}"), CLOSED);
}

static void test_refusals(void **st) {
    (void)st;
    refused("{\"type\":\"string\",\"pattern\":\"a+\"}", "schema.pattern: unsupported JSON Schema keyword 'pattern'");
    refused("{\"properties\":{\"x\":{\"format\":\"date\"}}}", "schema.properties.x.format");
    refused("{\"oneOf\":[{}]}", "'oneOf'");
    refused("{\"type\":\"strin\"}", "unknown type");
    refused("{\"enum\":[]}", "non-empty");
    refused("{\"required\":[\"x\"]}", "does not declare");
    refused("{\"$ref\":\"http://x/y\"}", "local references");
    refused("{\"$ref\":\"#/$defs/missing\"}", "missing definition");
    refused("{\"$ref\":\"#\"}", "cycle");
    refused("{\"$defs\":{\"a\":{\"$ref\":\"#/$defs/b\"},\"b\":{\"$ref\":\"#/$defs/a\"}},\"$ref\":\"#/$defs/a\"}", "cycle");
    refused("{\"items\":7}", "must be a schema or an array of schemas");
    refused("{\"anyOf\":[{}],\"type\":\"object\"}", "anyOf");
    refused("{\"minItems\":3,\"maxItems\":2}", "minItems");
}

/* Random walks over allowed bytes: never stuck; closed texts validate. */
static void walks(const char *schema_text, bool object_only, int n_walks, unsigned seed) {
    json_t *schema = schema_text ? json_loads(schema_text, 0, NULL) : NULL;
    mu_jsonc_schema *s = compile_text(schema_text, object_only);
    mu_jsonc *r, *scratch;
    assert_int_equal(mu_jsonc_new(s, &r, NULL), 0);
    assert_int_equal(mu_jsonc_new(s, &scratch, NULL), 0);
    unsigned x = seed;
    int closed = 0;
    char buf[4096];
    for (int w = 0; w < n_walks; w++) {
        mu_jsonc_reset(r);
        size_t n = 0;
        while (n < sizeof buf - 1 && !mu_jsonc_closed(r)) {
            uint64_t set[4];
            mu_jsonc_next_bytes(r, scratch, set);
            int choices[256], k = 0, pref[256], kp = 0;
            for (int b = 0; b < 256; b++)
                if (set[b >> 6] >> (b & 63) & 1) {
                    choices[k++] = b;
                    /* bias towards closing and short values so walks end */
                    if (strchr("}]\",:0123456789tfn{[ab", b) && b) pref[kp++] = b;
                }
            if (k == 0) fail_msg("stuck after '%.*s'", (int)n, buf); /* alive => completable */
            x = x * 1103515245u + 12345u;
            int b = kp && (x >> 16) % 8 ? pref[(x >> 8) % kp] : choices[(x >> 8) % k];
            buf[n++] = (char)b;
            assert_true(mu_jsonc_feed(r, buf + n - 1, 1));
        }
        buf[n] = 0;
        if (!mu_jsonc_closed(r)) continue;
        closed++;
        json_error_t je;
        json_t *v = json_loadb(buf, n, JSON_DECODE_ANY | JSON_DECODE_INT_AS_REAL | JSON_ALLOW_NUL, &je);
        if (!v) fail_msg("walk %d: jansson rejects '%s': %s", w, buf, je.text);
        if (object_only) assert_true(json_is_object(v));
        if (schema && !jv_valid(schema, schema, v, 0)) {
            char *d = json_dumps(v, JSON_ENCODE_ANY | JSON_ENSURE_ASCII);
            fail_msg("walk %d: '%s' does not validate", w, d);
        }
        json_decref(v);
    }
    assert_true(closed > n_walks / 4);
    mu_jsonc_free(r);
    mu_jsonc_free(scratch);
    mu_jsonc_schema_unref(s);
    json_decref(schema);
}

static void test_walks(void **st) {
    (void)st;
    walks(NULL, false, 300, 1);
    walks(NULL, true, 300, 2);
    walks(person, false, 300, 3);
    walks("{\"anyOf\":[{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\"}},\"required\":[\"a\"],"
          "\"additionalProperties\":false},{\"type\":\"array\",\"items\":{\"type\":\"number\"},\"maxItems\":3},"
          "{\"enum\":[\"x\",\"xy\",null,2]}]}",
          false, 300, 4);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_any_json),
        cmocka_unit_test(test_schema),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_walks),
    };
    return cmocka_run_group_tests_name("jsonc", tests, NULL, NULL);
}
