/* jcheck.c: strict request-body validation.
 * Owns: JSON parsing policy (jansson with duplicate keys rejected; jansson
 * itself rejects invalid UTF-8, lone surrogates and NUL) and the recursive
 * table walk that names the failing field by its full path.
 * Does not own: what a field means (the protocol adapters do).
 * Design: the tables are static data next to each route, so a route's whole
 * accepted surface is readable in one place and docs/api.md can mirror it. */
#include "jcheck.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char last_param[192];

const char *mu_jc_last_param(void) { return last_param; }

int mu_jc_parse(const char *buf, size_t len, json_t **out, mu_err *err) {
    last_param[0] = 0;
    json_error_t je;
    json_t *j = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &je);
    if (!j) {
        /* jansson's text is about the syntax, never echoes the body */
        return mu_fail(err, MU_E_FORMAT, "http: malformed JSON body: %s at byte %d", je.text, je.position);
    }
    if (!json_is_object(j)) {
        json_decref(j);
        return mu_fail(err, MU_E_FORMAT, "http: request body must be a JSON object");
    }
    *out = j;
    return 0;
}

static const char *type_name(unsigned t) {
    if (t & JC_OBJ) return "object";
    if (t & JC_ARR) return "array";
    if (t & JC_STR) return "string";
    if (t & JC_NUM) return "number";
    if (t & JC_INT) return "integer";
    if (t & JC_BOOL) return "boolean";
    return "null";
}

static void types_text(unsigned t, char *buf, size_t cap) {
    buf[0] = 0;
    if (!t) {
        snprintf(buf, cap, "absent");
        return;
    }
    static const unsigned order[] = {JC_STR, JC_INT, JC_NUM, JC_BOOL, JC_ARR, JC_OBJ, JC_NULL};
    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++) {
        if (!(t & order[i])) continue;
        if (order[i] == JC_INT && (t & JC_NUM)) continue;
        size_t n = strlen(buf);
        snprintf(buf + n, cap - n, "%s%s", n ? " or " : "", type_name(order[i]));
    }
}

static int fail_at(mu_err *err, const char *path, const char *fmt, const char *a, const char *b) {
    snprintf(last_param, sizeof last_param, "%s", path);
    char what[200];
    snprintf(what, sizeof what, fmt, a ? a : "", b ? b : "");
    return mu_fail(err, MU_E_ARG, "http: field '%s': %s", path, what);
}

static int check_value(const json_t *v, const jc_field *f, const char *path, int depth, mu_err *err);

static int check_object(const json_t *obj, const jc_field *fields, const char *path, int depth, mu_err *err) {
    if (depth > JC_MAX_DEPTH) return fail_at(err, path, "nested too deeply%s%s", NULL, NULL);
    const char *key;
    json_t *v;
    char sub[192];
    json_object_foreach((json_t *)obj, key, v) {
        const jc_field *f = fields;
        while (f->name && strcmp(f->name, key)) f++;
        if (path[0]) snprintf(sub, sizeof sub, "%s.%s", path, key);
        else snprintf(sub, sizeof sub, "%s", key);
        if (!f->name) {
            snprintf(last_param, sizeof last_param, "%s", sub);
            return mu_fail(err, MU_E_ARG, "http: unknown field '%s'", sub);
        }
        int rc = check_value(v, f, sub, depth + 1, err);
        if (rc) return rc;
    }
    for (const jc_field *f = fields; f->name; f++) {
        if (!f->required) continue;
        json_t *v2 = json_object_get(obj, f->name);
        if (!v2 || (json_is_null(v2) && !(f->types & JC_NULL))) {
            if (path[0]) snprintf(sub, sizeof sub, "%s.%s", path, f->name);
            else snprintf(sub, sizeof sub, "%s", f->name);
            return fail_at(err, sub, "is required%s%s", NULL, NULL);
        }
    }
    return 0;
}

static int free_form_depth(const json_t *v, int depth) {
    if (depth > JC_MAX_DEPTH) return -1;
    if (json_is_object(v)) {
        const char *k;
        json_t *x;
        json_object_foreach((json_t *)v, k, x) if (free_form_depth(x, depth + 1)) return -1;
    } else if (json_is_array(v)) {
        size_t i;
        json_t *x;
        json_array_foreach(v, i, x) if (free_form_depth(x, depth + 1)) return -1;
    }
    return 0;
}

static int check_value(const json_t *v, const jc_field *f, const char *path, int depth, mu_err *err) {
    unsigned t = f->types;
    char want[96];
    if (json_is_null(v)) {
        if (t & JC_NULL) return 0;
        types_text(t, want, sizeof want);
        return fail_at(err, path, "must be %s%s, not null", want, NULL);
    }
    if (json_is_boolean(v)) {
        if (t & JC_BOOL) return 0;
        goto wrong_type;
    }
    if (json_is_number(v)) {
        double d = json_number_value(v);
        if (t & JC_NUM) {
            /* any number */
        } else if (t & JC_INT) {
            if (json_is_real(v) && (d != floor(d) || fabs(d) > 9007199254740992.0)) {
                types_text(t, want, sizeof want);
                return fail_at(err, path, "must be %s%s", want, NULL);
            }
        } else {
            goto wrong_type;
        }
        if (!isfinite(d)) return fail_at(err, path, "must be finite%s%s", NULL, NULL);
        if (f->has_range && (d < f->lo || d > f->hi)) {
            char r[160];
            if (t & JC_NUM)
                snprintf(r, sizeof r, "out of range: must be between %g and %g", f->lo, f->hi);
            else
                snprintf(r, sizeof r, "out of range: must be an integer between %.0f and %.0f", f->lo, f->hi);
            if (f->lo == f->hi)
                snprintf(r, sizeof r, "out of range: must be %g", f->lo);
            return fail_at(err, path, "%s%s", r, f->note ? f->note : "");
        }
        return 0;
    }
    if (json_is_string(v)) {
        if (!(t & JC_STR)) goto wrong_type;
        size_t n = json_string_length(v);
        size_t cap = f->max_len ? f->max_len : JC_DEFAULT_MAX_STR;
        if (n > cap) return fail_at(err, path, "string too long%s%s", NULL, NULL);
        if (n < f->min_len) return fail_at(err, path, "must not be empty%s%s", NULL, NULL);
        if (f->one_of) {
            const char *s = json_string_value(v);
            for (const char *const *o = f->one_of; *o; o++)
                if (!strcmp(*o, s)) return 0;
            char list[160] = "";
            for (const char *const *o = f->one_of; *o; o++) {
                size_t l = strlen(list);
                snprintf(list + l, sizeof list - l, "%s'%s'", l ? ", " : "", *o);
            }
            return fail_at(err, path, "must be one of %s%s", list, f->note ? f->note : "");
        }
        return 0;
    }
    if (json_is_array(v)) {
        if (!(t & JC_ARR)) goto wrong_type;
        size_t n = json_array_size(v);
        size_t cap = f->max_len ? f->max_len : JC_DEFAULT_MAX_ARR;
        if (n > cap) {
            char m[64];
            snprintf(m, sizeof m, "%zu", cap);
            return fail_at(err, path, "too many items (at most %s)%s", m, NULL);
        }
        if (n < f->min_len) return fail_at(err, path, "must not be empty%s%s", NULL, NULL);
        if (depth > JC_MAX_DEPTH) return fail_at(err, path, "nested too deeply%s%s", NULL, NULL);
        size_t i;
        json_t *x;
        char sub[192];
        json_array_foreach(v, i, x) {
            snprintf(sub, sizeof sub, "%s[%zu]", path, i);
            if (f->elem) {
                int rc = check_value(x, f->elem, sub, depth + 1, err);
                if (rc) return rc;
            } else if (free_form_depth(x, depth + 1)) {
                return fail_at(err, sub, "nested too deeply%s%s", NULL, NULL);
            }
        }
        return 0;
    }
    if (json_is_object(v)) {
        if (!(t & JC_OBJ)) goto wrong_type;
        if (f->fields) return check_object(v, f->fields, path, depth + 1, err);
        if (free_form_depth(v, depth)) return fail_at(err, path, "nested too deeply%s%s", NULL, NULL);
        return 0;
    }
wrong_type:
    types_text(t, want, sizeof want);
    /* a field that may only be absent or null says why */
    return fail_at(err, path, "must be %s%s", want, !(t & ~(unsigned)JC_NULL) && f->note ? f->note : NULL);
}

int mu_jc_check(const json_t *obj, const jc_field *fields, mu_err *err) {
    last_param[0] = 0;
    if (!json_is_object(obj)) return mu_fail(err, MU_E_ARG, "http: request body must be a JSON object");
    return check_object(obj, fields, "", 0, err);
}

bool mu_jc_bool(const json_t *o, const char *key, bool def) {
    json_t *v = json_object_get(o, key);
    return json_is_boolean(v) ? json_is_true(v) : def;
}

long long mu_jc_int(const json_t *o, const char *key, long long def) {
    json_t *v = json_object_get(o, key);
    return json_is_number(v) ? (long long)json_number_value(v) : def;
}

double mu_jc_num(const json_t *o, const char *key, double def) {
    json_t *v = json_object_get(o, key);
    return json_is_number(v) ? json_number_value(v) : def;
}

const char *mu_jc_str(const json_t *o, const char *key, const char *def) {
    json_t *v = json_object_get(o, key);
    return json_is_string(v) ? json_string_value(v) : def;
}
