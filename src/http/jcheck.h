/* jcheck.h: strict validation of JSON request bodies against declarative
 * field tables.
 * Owns: parsing a body (UTF-8, no duplicate keys, object at the top) and
 * checking every key at every depth against a table: type, numeric range,
 * string length, allowed values, array length and element schema, nested
 * objects, required fields. An unknown field is an error naming its full
 * path ("messages[1].rol"). Does not interpret values: adapters read them
 * after a successful check. */
#ifndef MU_HTTP_JCHECK_H
#define MU_HTTP_JCHECK_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "../base/err.h"

/* Type bits; a field may allow several (e.g. string or array). */
enum {
    JC_NULL = 1 << 0,
    JC_BOOL = 1 << 1,
    JC_INT = 1 << 2,   /* integer (a real with an integral value is accepted) */
    JC_NUM = 1 << 3,   /* any number */
    JC_STR = 1 << 4,
    JC_ARR = 1 << 5,
    JC_OBJ = 1 << 6,   /* checked against `fields` when set, else free-form */
};

typedef struct jc_field jc_field;
struct jc_field {
    const char *name;        /* NULL ends a table */
    unsigned types;          /* JC_* bits */
    bool required;
    bool has_range;          /* numbers: lo <= v <= hi */
    double lo, hi;
    size_t max_len;          /* strings: bytes; arrays: items; 0 = default cap */
    size_t min_len;          /* arrays: least items; strings: least bytes */
    const char *const *one_of;   /* strings: allowed values, NULL-terminated */
    const jc_field *fields;  /* objects: the allowed keys (NULL = free-form) */
    const jc_field *elem;    /* arrays: schema of each element (one field) */
    const char *note;        /* appended to range errors ("penalties are not supported") */
};

#define JC_MAX_DEPTH 64
#define JC_DEFAULT_MAX_STR (1u << 22)   /* 4 MiB */
#define JC_DEFAULT_MAX_ARR 65536

/* Parses a request body. Fails with MU_E_FORMAT on malformed JSON, invalid
 * UTF-8, NUL bytes, duplicate keys, or a top level that is not an object.
 * *out is a new reference on success. */
int mu_jc_parse(const char *buf, size_t len, json_t **out, mu_err *err);

/* Checks obj (a JSON object) against fields. MU_E_ARG with a message naming
 * the field path on the first violation. */
int mu_jc_check(const json_t *obj, const jc_field *fields, mu_err *err);

/* Path of the field that failed the last check on this thread ("" when the
 * failure was not tied to a field); for OpenAI's error.param. */
const char *mu_jc_last_param(void);

/* Convenience readers after a successful check (absent or null -> default). */
bool mu_jc_bool(const json_t *o, const char *key, bool def);
long long mu_jc_int(const json_t *o, const char *key, long long def);
double mu_jc_num(const json_t *o, const char *key, double def);
const char *mu_jc_str(const json_t *o, const char *key, const char *def);

#endif
