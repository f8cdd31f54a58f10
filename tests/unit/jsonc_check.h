/* jsonc_check.h: a small, independent JSON Schema validator for the subset
 * src/gen/jsonc.c accepts (type, properties, required,
 * additionalProperties, items, minItems, maxItems, enum, const, anyOf, local
 * $ref), used by test_jsonc and fuzz_jsonc to check that every text the
 * recognizer calls complete parses and validates. Header-only (static). */
#ifndef MU_TESTS_JSONC_CHECK_H
#define MU_TESTS_JSONC_CHECK_H

#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <string.h>

static bool jv_valid(const json_t *root, const json_t *s, const json_t *v, int depth);

/* json_equal, but numbers compare by value (texts are decoded with
 * JSON_DECODE_INT_AS_REAL). */
static bool jv_equal(const json_t *a, const json_t *b) {
    if (json_is_number(a) && json_is_number(b)) return json_number_value(a) == json_number_value(b);
    if (json_is_array(a) && json_is_array(b)) {
        if (json_array_size(a) != json_array_size(b)) return false;
        for (size_t i = 0; i < json_array_size(a); i++)
            if (!jv_equal(json_array_get(a, i), json_array_get(b, i))) return false;
        return true;
    }
    if (json_is_object(a) && json_is_object(b)) {
        if (json_object_size(a) != json_object_size(b)) return false;
        const char *k;
        json_t *x;
        json_object_foreach((json_t *)a, k, x) {
            const json_t *y = json_object_get(b, k);
            if (!y || !jv_equal(x, y)) return false;
        }
        return true;
    }
    return json_equal((json_t *)a, (json_t *)b);
}

static bool jv_type(const char *t, const json_t *v) {
    if (!strcmp(t, "null")) return json_is_null(v);
    if (!strcmp(t, "boolean")) return json_is_boolean(v);
    if (!strcmp(t, "integer"))
        return json_is_integer(v) || (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)));
    if (!strcmp(t, "number")) return json_is_number(v);
    if (!strcmp(t, "string")) return json_is_string(v);
    if (!strcmp(t, "array")) return json_is_array(v);
    if (!strcmp(t, "object")) return json_is_object(v);
    return false;
}

static bool jv_valid(const json_t *root, const json_t *s, const json_t *v, int depth) {
    if (depth > 200) return false;
    if (json_is_true(s)) return true;
    const json_t *ref = json_object_get(s, "$ref");
    if (ref) {
        const char *r = json_string_value(ref);
        const json_t *t = root;
        if (!strncmp(r, "#/$defs/", 8)) t = json_object_get(json_object_get(root, "$defs"), r + 8);
        else if (!strncmp(r, "#/definitions/", 14)) t = json_object_get(json_object_get(root, "definitions"), r + 14);
        return t && jv_valid(root, t, v, depth + 1);
    }
    const json_t *t = json_object_get(s, "type");
    if (json_is_string(t) && !jv_type(json_string_value(t), v)) return false;
    if (json_is_array(t)) {
        bool any = false;
        for (size_t i = 0; i < json_array_size(t); i++) any |= jv_type(json_string_value(json_array_get(t, i)), v);
        if (!any) return false;
    }
    const json_t *e = json_object_get(s, "enum");
    if (e) {
        bool any = false;
        for (size_t i = 0; i < json_array_size(e); i++) any |= jv_equal(json_array_get(e, i), v);
        if (!any) return false;
    }
    const json_t *c = json_object_get(s, "const");
    if (c && !jv_equal(c, v)) return false;
    const json_t *a = json_object_get(s, "anyOf");
    if (a) {
        bool any = false;
        for (size_t i = 0; i < json_array_size(a); i++) any |= jv_valid(root, json_array_get(a, i), v, depth + 1);
        if (!any) return false;
    }
    if (json_is_object(v)) {
        const json_t *props = json_object_get(s, "properties");
        const json_t *addl = json_object_get(s, "additionalProperties");
        const char *k;
        json_t *x;
        json_object_foreach((json_t *)v, k, x) {
            const json_t *ps = json_object_get(props, k);
            if (ps) {
                if (!jv_valid(root, ps, x, depth + 1)) return false;
            } else if (json_is_false(addl)) {
                return false;
            } else if (json_is_object(addl) && !jv_valid(root, addl, x, depth + 1)) {
                return false;
            }
        }
        const json_t *req = json_object_get(s, "required");
        for (size_t i = 0; i < json_array_size(req); i++)
            if (!json_object_get(v, json_string_value(json_array_get(req, i)))) return false;
    }
    if (json_is_array(v)) {
        const json_t *items = json_object_get(s, "items");
        if (!items && json_is_array(json_object_get(s, "prefixItems"))) items = json_object_get(s, "prefixItems");
        if (json_is_array(items)) { /* the tuple form as llama.cpp reads it: exactly these items */
            if (json_array_size(v) != json_array_size(items)) return false;
            for (size_t i = 0; i < json_array_size(v); i++)
                if (!jv_valid(root, json_array_get(items, i), json_array_get(v, i), depth + 1)) return false;
            return true;
        }
        for (size_t i = 0; i < json_array_size(v); i++)
            if (items && !jv_valid(root, items, json_array_get(v, i), depth + 1)) return false;
        const json_t *mn = json_object_get(s, "minItems"), *mx = json_object_get(s, "maxItems");
        if (mn && (json_int_t)json_array_size(v) < json_integer_value(mn)) return false;
        if (mx && (json_int_t)json_array_size(v) > json_integer_value(mx)) return false;
    }
    return true;
}

#endif
