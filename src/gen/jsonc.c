/* jsonc.c: JSON Schema subset -> node graph, and the byte-level recognizer.
 * Owns: which schema keywords are accepted (docs/api.md lists them), the
 * exact text the recognizer lets through, and its completeness answers.
 * Does not own: tokens or sampling (constrain.c), HTTP shapes.
 * Design: a pushdown automaton whose stack holds one frame per open value
 * (object, array, string, number, literal, or "a value starts here"). anyOf
 * makes it nondeterministic: the state is a small set of stacks
 * ("configurations", at most MU_JSONC_MAX_ALT), expanded when a value starts
 * and dropped when they die; identical ones are merged. Every live
 * configuration can still be completed, so "alive" answers "can this prefix
 * be completed". The text is restricted to a canonical subset of JSON so
 * that answers stay exact and bounded:
 *   - whitespace between tokens: nothing, one space, or a newline followed
 *     by up to 20 spaces/tabs (as llama.cpp's schema grammars);
 *   - enum/const values, and declared property names when
 *     additionalProperties is false, only in their compact canonical form
 *     (jansson's JSON_COMPACT text, as llama.cpp's grammars);
 *   - \u escapes of surrogates are refused (write the character in UTF-8);
 *   - numbers up to 40 bytes with at most 2 exponent digits (always finite); "integer" is -?(0|[1-9][0-9]*).
 * A state copy touches only the live frames, so checking a token costs a
 * copy of a few dozen bytes plus its piece length in transitions. */
#include "jsonc.h"

#include "../../include/muser_gen.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- schema nodes ----------------------------------------------------- */

enum { T_NULL = 1, T_BOOL = 2, T_INT = 4, T_NUM = 8, T_STR = 16, T_ARR = 32, T_OBJ = 64, T_ALL = 127 };

typedef struct {
    int n;
    char **s;        /* sorted: memcmp order, a prefix before its extensions */
    size_t *len;
} lits;

typedef struct jnode jnode;
struct jnode {
    unsigned types;
    lits lit;            /* n > 0: the value is one of these texts */
    lits names;          /* declared properties, escaped text without quotes, sorted */
    jnode **pnode;       /* [names.n], in names order */
    uint64_t required;   /* bits in names order */
    bool addl_ok;        /* keys other than the declared ones */
    jnode *addl;         /* their schema (the any node when true) */
    jnode *items;        /* the any node when absent */
    jnode **tup;         /* tuple form (items / prefixItems as an array): item i's schema; */
    int n_tup;           /* exactly n_tup items then (llama.cpp ignores minItems / maxItems there) */
    bool is_tup;
    int min_items, max_items;
    int n_any;
    jnode **any;
    jnode *next_alloc;
};

struct mu_schema {
    atomic_int refs;
    jnode *root, *any_node;
    jnode *all;          /* every allocated node */
};

static jnode *node_alloc(mu_jsonc_schema *s) {
    jnode *n = calloc(1, sizeof *n);
    if (!n) return NULL;
    n->next_alloc = s->all;
    s->all = n;
    n->types = T_ALL;
    n->max_items = 0xFFFF;
    n->addl_ok = true;
    n->items = n->addl = s->any_node; /* NULL only for the any node itself, fixed by its creator */
    return n;
}

static void lits_free(lits *l) {
    for (int i = 0; i < l->n; i++) free(l->s[i]);
    free(l->s);
    free(l->len);
}

static void schema_free(mu_jsonc_schema *s) {
    for (jnode *n = s->all; n;) {
        jnode *nx = n->next_alloc;
        lits_free(&n->lit);
        lits_free(&n->names);
        free(n->pnode);
        free(n->any);
        free(n->tup);
        free(n);
        n = nx;
    }
    free(s);
}

static int lit_cmp(const char *a, size_t na, const char *b, size_t nb) {
    size_t m = na < nb ? na : nb;
    int c = memcmp(a, b, m);
    if (c) return c;
    return na < nb ? -1 : na > nb;
}

/* ---- compiling -------------------------------------------------------- */

typedef struct {
    mu_jsonc_schema *s;
    const json_t *root_json;
    struct {
        const char *ref;
        jnode *n;
        bool done;
    } refs[64];
    int n_refs;
    int depth;
    mu_err *err;
} comp;

#define MAX_LIT_BYTES 4096

static int cfail(comp *c, const char *path, const char *what, const char *arg) {
    return mu_fail(c->err, MU_E_ARG, "%s: %s%s%s", path, what, arg ? arg : "", "");
}

static jnode *compile(comp *c, const json_t *j, const char *path);

/* JSON text of v in canonical compact form (malloc'ed). */
static char *canon(const json_t *v, size_t *n) {
    char *t = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    if (t) *n = strlen(t);
    return t;
}

static void lits_sort(lits *l, jnode **payload) {
    /* insertion sort keeps payload in step; lists are small (<= 64 names or enum values) */
    for (int i = 1; i < l->n; i++) {
        char *s = l->s[i];
        size_t n = l->len[i];
        jnode *p = payload ? payload[i] : NULL;
        int k = i - 1;
        while (k >= 0 && lit_cmp(l->s[k], l->len[k], s, n) > 0) {
            l->s[k + 1] = l->s[k];
            l->len[k + 1] = l->len[k];
            if (payload) payload[k + 1] = payload[k];
            k--;
        }
        l->s[k + 1] = s;
        l->len[k + 1] = n;
        if (payload) payload[k + 1] = p;
    }
}

static int set_types(comp *c, jnode *n, const json_t *t, const char *path) {
    static const struct {
        const char *name;
        unsigned bit;
    } names[] = {{"null", T_NULL},  {"boolean", T_BOOL}, {"integer", T_INT}, {"number", T_NUM | T_INT},
                 {"string", T_STR}, {"array", T_ARR},    {"object", T_OBJ}};
    n->types = 0;
    size_t k = json_is_array(t) ? json_array_size(t) : 1;
    if (!json_is_string(t) && !(json_is_array(t) && k > 0))
        return cfail(c, path, "'type' must be a type name or a non-empty array of them", NULL);
    for (size_t i = 0; i < k; i++) {
        const json_t *x = json_is_array(t) ? json_array_get(t, i) : t;
        const char *v = json_string_value(x);
        size_t m = 0;
        while (v && m < sizeof names / sizeof names[0] && strcmp(names[m].name, v)) m++;
        if (!v || m == sizeof names / sizeof names[0]) return cfail(c, path, "unknown type in 'type'", NULL);
        n->types |= names[m].bit;
    }
    return 0;
}

static int add_lit(comp *c, lits *l, const json_t *v, const char *path) {
    size_t n = 0;
    char *t = canon(v, &n);
    if (!t) return mu_fail(c->err, MU_E_NOMEM, "%s: out of memory", path);
    if (n > MAX_LIT_BYTES) {
        free(t);
        return cfail(c, path, "enum/const value too long", NULL);
    }
    for (int i = 0; i < l->n; i++)
        if (l->len[i] == n && !memcmp(l->s[i], t, n)) {
            free(t);
            return 0; /* duplicate enum entry */
        }
    char **s = realloc(l->s, (size_t)(l->n + 1) * sizeof *s);
    if (s) l->s = s;
    size_t *len = realloc(l->len, (size_t)(l->n + 1) * sizeof *len);
    if (len) l->len = len;
    if (!s || !len) {
        free(t);
        return mu_fail(c->err, MU_E_NOMEM, "%s: out of memory", path);
    }
    l->s[l->n] = t;
    l->len[l->n] = n;
    l->n++;
    return 0;
}

static jnode *resolve_ref(comp *c, const char *ref, const char *path) {
    for (int i = 0; i < c->n_refs; i++)
        if (!strcmp(c->refs[i].ref, ref)) return c->refs[i].n;
    const char *name = NULL, *defs = NULL;
    if (!strncmp(ref, "#/$defs/", 8)) defs = "$defs", name = ref + 8;
    else if (!strncmp(ref, "#/definitions/", 14)) defs = "definitions", name = ref + 14;
    if (!strcmp(ref, "#")) {
        /* the whole schema (recursive root) */
    } else if (!name || !*name || strchr(name, '/') || strchr(name, '~')) {
        cfail(c, path, "only local references '#', '#/$defs/NAME' and '#/definitions/NAME' are supported", NULL);
        return NULL;
    }
    const json_t *target = c->root_json;
    if (name) target = json_object_get(json_object_get(c->root_json, defs), name);
    if (!json_is_object(target)) {
        cfail(c, path, "'$ref' names a missing definition", NULL);
        return NULL;
    }
    if (c->n_refs == (int)(sizeof c->refs / sizeof c->refs[0])) {
        cfail(c, path, "too many distinct '$ref' targets", NULL);
        return NULL;
    }
    /* the node is registered before it is compiled, so recursion ends here */
    jnode *n = node_alloc(c->s);
    if (!n) {
        mu_fail(c->err, MU_E_NOMEM, "%s: out of memory", path);
        return NULL;
    }
    int me = c->n_refs++;
    c->refs[me].ref = ref;
    c->refs[me].n = n;
    c->refs[me].done = false;
    jnode *body = compile(c, target, path);
    if (!body) return NULL;
    for (int i = 0; i < c->n_refs; i++)
        if (body == c->refs[i].n && !c->refs[i].done) {
            /* A: {$ref: B}, B: {$ref: A}: no schema between the references */
            cfail(c, path, "'$ref' cycle that never reaches a schema", NULL);
            return NULL;
        }
    /* copy the compiled body into the registered node (shallow; arrays stay
     * owned by body, which stays allocated in s->all) */
    jnode *keep = n->next_alloc;
    *n = *body;
    n->next_alloc = keep;
    body->lit = (lits){0};
    body->names = (lits){0};
    body->pnode = NULL;
    body->any = NULL;
    c->refs[me].done = true;
    return n;
}

static jnode *compile(comp *c, const json_t *j, const char *path) {
    char sub[512];
    if (json_is_true(j) || (json_is_object(j) && json_object_size(j) == 0)) return c->s->any_node;
    if (!json_is_object(j)) {
        cfail(c, path, "a schema must be an object", NULL);
        return NULL;
    }
    if (++c->depth > 48) {
        cfail(c, path, "schema nested too deeply", NULL);
        return NULL;
    }
    const json_t *ref = json_object_get(j, "$ref");
    if (ref) {
        const char *key;
        json_t *v;
        json_object_foreach((json_t *)j, key, v) {
            if (!strcmp(key, "$ref") || !strcmp(key, "title") || !strcmp(key, "description") ||
                !strcmp(key, "$defs") || !strcmp(key, "definitions") || !strcmp(key, "$schema") ||
                !strcmp(key, "$comment"))
                continue;
            snprintf(sub, sizeof sub, "%.300s.%.150s", path, key);
            cfail(c, sub, "keywords next to '$ref' are not supported", NULL);
            return NULL;
        }
        if (!json_is_string(ref)) {
            cfail(c, path, "'$ref' must be a string", NULL);
            return NULL;
        }
        snprintf(sub, sizeof sub, "%s.$ref", path);
        jnode *n = resolve_ref(c, json_string_value(ref), sub);
        c->depth--;
        return n;
    }
    jnode *n = node_alloc(c->s);
    if (!n) {
        mu_fail(c->err, MU_E_NOMEM, "%s: out of memory", path);
        return NULL;
    }
    n->items = c->s->any_node;
    n->addl = c->s->any_node;
    const char *key;
    json_t *v;
    bool has_typed = false;
    json_object_foreach((json_t *)j, key, v) {
        snprintf(sub, sizeof sub, "%.300s.%.150s", path, key);
        if (!strcmp(key, "type")) {
            if (set_types(c, n, v, sub)) return NULL;
            has_typed = true;
        } else if (!strcmp(key, "properties")) {
            if (!json_is_object(v)) return cfail(c, sub, "must be an object", NULL), NULL;
            if (json_object_size(v) > MU_JSONC_MAX_PROPS) {
                char m[64];
                snprintf(m, sizeof m, "%d", MU_JSONC_MAX_PROPS);
                return cfail(c, sub, "too many properties; at most ", m), NULL;
            }
            size_t k = json_object_size(v);
            n->names.s = calloc(k ? k : 1, sizeof *n->names.s);
            n->names.len = calloc(k ? k : 1, sizeof *n->names.len);
            n->pnode = calloc(k ? k : 1, sizeof *n->pnode);
            if (!n->names.s || !n->names.len || !n->pnode)
                return mu_fail(c->err, MU_E_NOMEM, "%s: out of memory", path), NULL;
            const char *pk;
            json_t *pv;
            json_object_foreach(v, pk, pv) {
                char sub2[512];
                snprintf(sub2, sizeof sub2, "%.300s.%.150s", sub, pk);
                json_t *name = json_string(pk);
                size_t len = 0;
                char *t = name ? canon(name, &len) : NULL;
                json_decref(name);
                if (!t) return mu_fail(c->err, MU_E_NOMEM, "%s: out of memory", path), NULL;
                /* drop the quotes: keys are matched between them */
                memmove(t, t + 1, len - 2);
                len -= 2;
                t[len] = 0;
                int i = n->names.n++;
                n->names.s[i] = t;
                n->names.len[i] = len;
                if (len > MAX_LIT_BYTES) return cfail(c, sub2, "property name too long", NULL), NULL;
                n->pnode[i] = compile(c, pv, sub2);
                if (!n->pnode[i]) return NULL;
            }
            lits_sort(&n->names, n->pnode);
        } else if (!strcmp(key, "required")) {
            /* resolved after the loop (properties may come later) */
            if (!json_is_array(v)) return cfail(c, sub, "must be an array of property names", NULL), NULL;
        } else if (!strcmp(key, "additionalProperties")) {
            if (json_is_false(v)) {
                n->addl_ok = false;
            } else if (!json_is_true(v)) {
                n->addl = compile(c, v, sub);
                if (!n->addl) return NULL;
            }
        } else if (json_is_array(v) && (!strcmp(key, "items") ||
                                         (!strcmp(key, "prefixItems") && !json_object_get(j, "items")))) {
            /* the tuple form, as llama.cpp's converter reads it: these items,
             * in order, and no others ("items" wins over "prefixItems") */
            size_t k = json_array_size(v);
            if (k > MU_JSONC_MAX_PROPS) return cfail(c, sub, "more than 64 tuple items", NULL), NULL;
            n->tup = calloc(k ? k : 1, sizeof *n->tup);
            if (!n->tup) return mu_fail(c->err, MU_E_NOMEM, "%s: out of memory", path), NULL;
            n->is_tup = true;
            n->n_tup = (int)k;
            for (size_t i = 0; i < k; i++) {
                char sub2[540];
                snprintf(sub2, sizeof sub2, "%s.%zu", sub, i);
                if (!(n->tup[i] = compile(c, json_array_get(v, i), sub2))) return NULL;
            }
        } else if (!strcmp(key, "prefixItems") && json_is_array(v)) {
            /* next to "items": ignored, as llama.cpp does */
        } else if (!strcmp(key, "items")) {
            if (!json_is_object(v) && !json_is_boolean(v))
                return cfail(c, sub, "must be a schema or an array of schemas", NULL), NULL;
            if (json_is_false(v)) {
                n->max_items = 0;
            } else {
                n->items = compile(c, v, sub);
                if (!n->items) return NULL;
            }
        } else if (!strcmp(key, "minItems") || !strcmp(key, "maxItems")) {
            if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 65535)
                return cfail(c, sub, "must be an integer 0..65535", NULL), NULL;
            if (key[1] == 'i') n->min_items = (int)json_integer_value(v);
            else if ((int)json_integer_value(v) < n->max_items) n->max_items = (int)json_integer_value(v);
        } else if (!strcmp(key, "enum")) {
            if (!json_is_array(v) || !json_array_size(v))
                return cfail(c, sub, "must be a non-empty array", NULL), NULL;
            size_t i;
            json_t *x;
            json_array_foreach(v, i, x) if (add_lit(c, &n->lit, x, sub)) return NULL;
        } else if (!strcmp(key, "const")) {
            if (add_lit(c, &n->lit, v, sub)) return NULL;
        } else if (!strcmp(key, "anyOf")) {
            if (!json_is_array(v) || !json_array_size(v))
                return cfail(c, sub, "must be a non-empty array of schemas", NULL), NULL;
            size_t k = json_array_size(v);
            n->any = calloc(k, sizeof *n->any);
            if (!n->any) return mu_fail(c->err, MU_E_NOMEM, "%s: out of memory", path), NULL;
            size_t i;
            json_t *x;
            json_array_foreach(v, i, x) {
                char sub2[512];
                snprintf(sub2, sizeof sub2, "%.400s[%zu]", sub, i);
                n->any[i] = compile(c, x, sub2);
                if (!n->any[i]) return NULL;
                n->n_any++;
            }
        } else if (!strcmp(key, "title") || !strcmp(key, "description") || !strcmp(key, "default") ||
                   !strcmp(key, "examples") || !strcmp(key, "$schema") || !strcmp(key, "$id") ||
                   !strcmp(key, "$comment") || !strcmp(key, "$defs") || !strcmp(key, "definitions") ||
                   !strcmp(key, "deprecated")) {
            /* annotations; $defs are compiled when a $ref reaches them */
        } else {
            cfail(c, sub, "unsupported JSON Schema keyword '", key);
            size_t l = strlen(c->err ? c->err->msg : "");
            if (c->err && l + 1 < sizeof c->err->msg) c->err->msg[l] = '\'', c->err->msg[l + 1] = 0;
            return NULL;
        }
    }
    const json_t *req = json_object_get(j, "required");
    if (req) {
        size_t i;
        json_t *x;
        json_array_foreach(req, i, x) {
            char sub2[512];
            snprintf(sub2, sizeof sub2, "%.400s.required[%zu]", path, i);
            json_t *name = json_is_string(x) ? json_string(json_string_value(x)) : NULL;
            size_t len = 0;
            char *t = name ? canon(name, &len) : NULL;
            json_decref(name);
            if (!t) return cfail(c, sub2, "must be a property name", NULL), NULL;
            int found = -1;
            for (int k = 0; k < n->names.n; k++)
                if (n->names.len[k] == len - 2 && !memcmp(n->names.s[k], t + 1, len - 2)) found = k;
            free(t);
            if (found < 0) return cfail(c, sub2, "names a property that 'properties' does not declare", NULL), NULL;
            n->required |= 1ull << found;
        }
    }
    if (n->n_any && (has_typed || n->lit.n || n->names.n || json_object_get(j, "items") ||
                     json_object_get(j, "additionalProperties"))) {
        cfail(c, path, "'anyOf' next to other constraints is not supported (put them inside each alternative)", NULL);
        return NULL;
    }
    if (n->is_tup) n->min_items = n->max_items = n->n_tup;
    /* no "type": the structural keywords decide, as llama.cpp's schema
     * reader does (properties, or additionalProperties other than true: an
     * object; items or prefixItems: an array) */
    if (!has_typed && !n->lit.n && !n->n_any) {
        const json_t *ap = json_object_get(j, "additionalProperties");
        if (json_object_get(j, "properties") || (ap && !json_is_true(ap))) n->types = T_OBJ;
        else if (json_object_get(j, "items") || json_object_get(j, "prefixItems")) n->types = T_ARR;
    }
    if (n->min_items > n->max_items) return cfail(c, path, "minItems is larger than maxItems", NULL), NULL;
    lits_sort(&n->lit, NULL);
    c->depth--;
    return n;
}

int mu_jsonc_schema_new(const json_t *schema, bool object_only, const char *where, mu_jsonc_schema **out,
                        mu_err *err) {
    mu_jsonc_schema *s = calloc(1, sizeof *s);
    if (!s) return mu_fail(err, MU_E_NOMEM, "%s: out of memory", where);
    atomic_init(&s->refs, 1);
    comp c = {.s = s, .root_json = schema, .err = err};
    s->any_node = node_alloc(s);
    if (!s->any_node) {
        schema_free(s);
        return mu_fail(err, MU_E_NOMEM, "%s: out of memory", where);
    }
    s->any_node->items = s->any_node;
    s->any_node->addl = s->any_node;
    if (!schema) {
        s->root = s->any_node;
        if (object_only) {
            s->root = node_alloc(s);
            if (!s->root) {
                schema_free(s);
                return mu_fail(err, MU_E_NOMEM, "%s: out of memory", where);
            }
            s->root->types = T_OBJ;
            s->root->items = s->root->addl = s->any_node;
        }
    } else {
        s->root = compile(&c, schema, where);
        if (!s->root) {
            schema_free(s);
            return err && err->code ? err->code : MU_E_ARG;
        }
    }
    *out = s;
    return 0;
}

mu_jsonc_schema *mu_jsonc_schema_ref(mu_jsonc_schema *s) {
    if (s) atomic_fetch_add(&s->refs, 1);
    return s;
}

void mu_jsonc_schema_unref(mu_jsonc_schema *s) {
    if (s && atomic_fetch_sub(&s->refs, 1) == 1) schema_free(s);
}

/* The public face (include/muser_gen.h): the schema as JSON text. */
int mu_schema_new(const char *schema_json, bool object_only, const char *where, mu_schema **out, mu_err *err) {
    json_t *j = NULL;
    if (schema_json) {
        json_error_t je;
        j = json_loads(schema_json, JSON_DECODE_ANY, &je);
        if (!j) return mu_fail(err, MU_E_ARG, "%s: not valid JSON: %s", where, je.text);
    }
    int rc = mu_jsonc_schema_new(j, object_only, where, out, err);
    json_decref(j);
    return rc;
}

mu_schema *mu_schema_ref(mu_schema *s) { return mu_jsonc_schema_ref(s); }
void mu_schema_unref(mu_schema *s) { mu_jsonc_schema_unref(s); }

/* ---- the recognizer --------------------------------------------------- */

enum { K_VAL = 1, K_OBJ, K_ARR, K_STR, K_NUM, K_LIT };
enum { O_OPEN = 1, O_KEY, O_COLON, O_AFTER, O_NEXT };
enum { A_AFTER = 1, A_EMPTY };
enum { N_MINUS = 1, N_ZERO, N_INT, N_DOT, N_FRAC, N_E, N_ESIGN, N_EXP };
enum { S_N = 0, S_ESC, S_HEX, S_HEXD, S_C, S_C_A0BF, S_C_809F, S_C_90BF, S_C_808F };
#define NO_PROP 0xFFFF
#define NUM_MAX 40

typedef struct {
    const void *p;      /* jnode (VAL, OBJ, ARR) or lits (LIT) */
    uint8_t kind, st;
    uint8_t ws;         /* gap whitespace: 0 none, 1 after ' ', 2 + k after '\n' and k indents */
    uint8_t sst, scnt;  /* string sub-state (STR, OBJ keys) */
    uint8_t flag;       /* VAL: ']' may close the enclosing array; NUM: integer only */
    uint16_t lo, hi, pos;  /* LIT / OBJ key: candidate range and byte position */
    uint16_t cnt;       /* ARR: items; OBJ: matched property; NUM: length */
    uint64_t used;      /* OBJ: declared properties already present */
} frame;

typedef struct {
    int depth;          /* 0: the value is closed */
    uint8_t tws;        /* trailing whitespace after a closed value */
    frame f[MU_JSONC_MAX_DEPTH];
} cfg;

struct mu_jsonc {
    const mu_jsonc_schema *s;
    int n;              /* live configurations; 0 = dead */
    cfg c[MU_JSONC_MAX_ALT];
};

static const char *const bool_s[] = {"false", "true"};
static const size_t bool_n[] = {5, 4};
static const char *const null_s[] = {"null"};
static const size_t null_n[] = {4};
static const lits lit_bool = {2, (char **)bool_s, (size_t *)bool_n};
static const lits lit_null = {1, (char **)null_s, (size_t *)null_n};

static bool ws_feed(uint8_t *ws, uint8_t c) {
    if (c == ' ') {
        if (*ws == 0) return *ws = 1, true;
        if (*ws >= 2 && *ws < 22) return (*ws)++, true;
        return false;
    }
    if (c == '\t') {
        if (*ws >= 2 && *ws < 22) return (*ws)++, true;
        return false;
    }
    if (c == '\n' && *ws == 0) return *ws = 2, true;
    return false;
}

static bool is_ws(uint8_t c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* 1 consumed, 2 closing quote, 0 rejected */
static int str_feed(uint8_t *sst, uint8_t *scnt, uint8_t c) {
    switch (*sst) {
    case S_N:
        if (c == '"') return 2;
        if (c == '\\') return *sst = S_ESC, 1;
        if (c < 0x20) return 0;
        if (c < 0x80) return 1;
        if (c >= 0xC2 && c <= 0xDF) return *sst = S_C, *scnt = 1, 1;
        if (c == 0xE0) return *sst = S_C_A0BF, *scnt = 2, 1;
        if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) return *sst = S_C, *scnt = 2, 1;
        if (c == 0xED) return *sst = S_C_809F, *scnt = 2, 1;
        if (c == 0xF0) return *sst = S_C_90BF, *scnt = 3, 1;
        if (c >= 0xF1 && c <= 0xF3) return *sst = S_C, *scnt = 3, 1;
        if (c == 0xF4) return *sst = S_C_808F, *scnt = 3, 1;
        return 0;
    case S_ESC:
        if (c == 'u') return *sst = S_HEX, *scnt = 4, 1;
        if (c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' || c == 'r' || c == 't')
            return *sst = S_N, 1;
        return 0;
    case S_HEX: {
        bool hex = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
        if (!hex) return 0;
        if (*scnt == 4 && (c == 'd' || c == 'D')) return *sst = S_HEXD, *scnt = 3, 1;
        if (--*scnt == 0) *sst = S_N;
        return 1;
    }
    case S_HEXD:
        if (c < '0' || c > '7') return 0; /* D800..DFFF: surrogates refused */
        return *sst = S_HEX, *scnt = 2, 1;
    default: {
        uint8_t lo = 0x80, hi = 0xBF;
        if (*sst == S_C_A0BF) lo = 0xA0;
        else if (*sst == S_C_809F) hi = 0x9F;
        else if (*sst == S_C_90BF) lo = 0x90;
        else if (*sst == S_C_808F) hi = 0x8F;
        if (c < lo || c > hi) return 0;
        *sst = --*scnt ? S_C : S_N;
        return 1;
    }
    }
}

/* Narrows [lo, hi) of l (all sharing the first pos bytes) to the entries
 * whose byte at pos is c. */
static void narrow(const lits *l, uint16_t *lo, uint16_t *hi, uint16_t pos, uint8_t c) {
    int a = *lo, b = *hi;
    while (a < b && !(l->len[a] > pos && (uint8_t)l->s[a][pos] == c)) a++;
    int e = a;
    while (e < b && l->len[e] > pos && (uint8_t)l->s[e][pos] == c) e++;
    *lo = (uint16_t)a;
    *hi = (uint16_t)e;
}

static uint64_t range_mask(int lo, int hi) {
    uint64_t m = hi >= 64 ? ~0ull : (1ull << hi) - 1;
    return m & ~((1ull << lo) - 1);
}

static bool obj_more(const jnode *n, uint64_t used) {
    return n->addl_ok || (range_mask(0, n->names.n) & ~used) != 0;
}

static bool push_val(cfg *g, const jnode *n, uint8_t flag) {
    if (g->depth >= MU_JSONC_MAX_DEPTH) return false;
    frame *f = &g->f[g->depth++];
    memset(f, 0, sizeof *f);
    f->kind = K_VAL;
    f->p = n;
    f->flag = flag;
    return true;
}

static bool num_step(frame *f, uint8_t c) {
    bool digit = c >= '0' && c <= '9';
    uint8_t next = 0;
    switch (f->st) {
    case N_MINUS: if (digit) next = c == '0' ? N_ZERO : N_INT; break;
    case N_ZERO:
    case N_INT:
        if (digit && f->st == N_INT) next = N_INT;
        else if (c == '.' && !f->flag) next = N_DOT;
        else if ((c == 'e' || c == 'E') && !f->flag) next = N_E;
        break;
    case N_DOT: if (digit) next = N_FRAC; break;
    case N_FRAC:
        if (digit) next = N_FRAC;
        else if (c == 'e' || c == 'E') next = N_E;
        break;
    case N_E:
        if (digit) next = N_EXP;
        else if (c == '+' || c == '-') next = N_ESIGN;
        break;
    case N_ESIGN:
    case N_EXP: if (digit) next = N_EXP; break;
    }
    if (next == N_EXP && f->scnt++ >= 2) return false; /* exponent: at most 2 digits, stays finite */
    /* the length cap leaves room for the digit a non-accepting state needs */
    bool needs = next == N_MINUS || next == N_DOT || next == N_E || next == N_ESIGN;
    if (!next || f->cnt + 1 + needs > NUM_MAX) return false;
    f->st = next;
    f->cnt++;
    return true;
}

static bool num_accepting(const frame *f) {
    return f->st == N_ZERO || f->st == N_INT || f->st == N_FRAC || f->st == N_EXP;
}

static bool lit_accepting(const frame *f) {
    const lits *l = f->p;
    return f->lo < f->hi && l->len[f->lo] == f->pos;
}

/* Feeds c to configuration g; false when it dies. The top frame is never a
 * K_VAL with anyOf here (expand() ran first). */
static bool cfg_feed(cfg *g, uint8_t c) {
    for (;;) {
        if (g->depth == 0) return ws_feed(&g->tws, c);
        frame *f = &g->f[g->depth - 1];
        switch (f->kind) {
        case K_VAL: {
            const jnode *n = f->p;
            if (is_ws(c)) return ws_feed(&f->ws, c);
            if (c == ']' && f->flag) { /* empty array */
                g->depth--;
                continue;
            }
            frame *parent = g->depth >= 2 ? &g->f[g->depth - 2] : NULL;
            if (parent && parent->kind == K_ARR && parent->cnt < 0xFFFF) parent->cnt++;
            const lits *l = NULL;
            if (n->lit.n) l = &n->lit;
            else if ((c == 't' || c == 'f') && (n->types & T_BOOL)) l = &lit_bool;
            else if (c == 'n' && (n->types & T_NULL)) l = &lit_null;
            if (l) {
                memset(f, 0, sizeof *f);
                f->kind = K_LIT;
                f->p = l;
                f->hi = (uint16_t)l->n;
                continue; /* the literal frame reads c */
            }
            if (c == '{' && (n->types & T_OBJ)) {
                if (g->depth >= MU_JSONC_MAX_DEPTH) return false;
                memset(f, 0, sizeof *f);
                f->kind = K_OBJ;
                f->p = n;
                f->st = O_OPEN;
                return true;
            }
            if (c == '[' && (n->types & T_ARR)) {
                if (g->depth >= MU_JSONC_MAX_DEPTH) return false;
                memset(f, 0, sizeof *f);
                f->kind = K_ARR;
                f->p = n;
                if (n->max_items == 0) {
                    f->st = A_EMPTY;
                    return true;
                }
                f->st = A_AFTER;
                return push_val(g, n->is_tup ? n->tup[0] : n->items, 1);
            }
            if (c == '"' && (n->types & T_STR)) {
                memset(f, 0, sizeof *f);
                f->kind = K_STR;
                return true;
            }
            if ((c == '-' || (c >= '0' && c <= '9')) && (n->types & (T_NUM | T_INT))) {
                uint8_t int_only = !(n->types & T_NUM);
                memset(f, 0, sizeof *f);
                f->kind = K_NUM;
                f->flag = int_only;
                f->st = c == '-' ? N_MINUS : c == '0' ? N_ZERO : N_INT;
                f->cnt = 1;
                return true;
            }
            return false;
        }
        case K_STR: {
            int r = str_feed(&f->sst, &f->scnt, c);
            if (r == 2) {
                g->depth--;
                return true;
            }
            return r == 1;
        }
        case K_NUM:
            if (num_step(f, c)) return true;
            if (!num_accepting(f)) return false;
            g->depth--;
            continue;
        case K_LIT: {
            const lits *l = f->p;
            uint16_t lo = f->lo, hi = f->hi;
            narrow(l, &lo, &hi, f->pos, c);
            if (lo == hi) {
                if (!lit_accepting(f)) return false;
                g->depth--;
                continue;
            }
            f->lo = lo;
            f->hi = hi;
            f->pos++;
            if (hi - lo == 1 && l->len[lo] == f->pos) g->depth--; /* unambiguous: closed */
            return true;
        }
        case K_OBJ: {
            const jnode *n = f->p;
            switch (f->st) {
            case O_OPEN:
            case O_NEXT:
                if (is_ws(c)) return ws_feed(&f->ws, c);
                if (c == '}' && f->st == O_OPEN) {
                    if (n->required & ~f->used) return false;
                    g->depth--;
                    return true;
                }
                if (c != '"' || !obj_more(n, f->used)) return false;
                f->st = O_KEY;
                f->ws = 0;
                f->lo = 0;
                f->hi = (uint16_t)n->names.n;
                f->pos = 0;
                f->sst = S_N;
                return true;
            case O_KEY: {
                int r = str_feed(&f->sst, &f->scnt, c);
                if (!r) return false;
                if (r == 2) {
                    int m = f->lo < f->hi && n->names.len[f->lo] == f->pos ? f->lo : -1;
                    if (m >= 0 && (f->used >> m & 1)) return false; /* duplicate key */
                    if (m < 0 && !n->addl_ok) return false;
                    f->cnt = m >= 0 ? (uint16_t)m : NO_PROP;
                    f->st = O_COLON;
                    return true;
                }
                if (f->lo < f->hi) {
                    narrow(&n->names, &f->lo, &f->hi, f->pos, c);
                    f->pos++;
                }
                if (!n->addl_ok && !(range_mask(f->lo, f->hi) & ~f->used)) return false;
                return true;
            }
            case O_COLON:
                if (is_ws(c)) return ws_feed(&f->ws, c);
                if (c != ':') return false;
                f->ws = 0;
                f->st = O_AFTER;
                if (f->cnt != NO_PROP) f->used |= 1ull << f->cnt;
                return push_val(g, f->cnt != NO_PROP ? n->pnode[f->cnt] : n->addl, 0);
            case O_AFTER:
                if (is_ws(c)) return ws_feed(&f->ws, c);
                if (c == ',') {
                    if (!obj_more(n, f->used)) return false;
                    f->ws = 0;
                    f->st = O_NEXT;
                    return true;
                }
                if (c == '}') {
                    if (n->required & ~f->used) return false;
                    g->depth--;
                    return true;
                }
                return false;
            }
            return false;
        }
        case K_ARR: {
            const jnode *n = f->p;
            if (is_ws(c)) return ws_feed(&f->ws, c);
            if (c == ']') {
                if (f->cnt < n->min_items) return false;
                g->depth--;
                return true;
            }
            if (c == ',' && f->st == A_AFTER) {
                if (f->cnt >= n->max_items) return false;
                f->ws = 0;
                return push_val(g, n->is_tup ? n->tup[f->cnt] : n->items, 0);
            }
            return false;
        }
        }
        return false;
    }
}

static bool frame_eq(const frame *a, const frame *b) {
    return a->p == b->p && a->kind == b->kind && a->st == b->st && a->ws == b->ws && a->sst == b->sst &&
           a->scnt == b->scnt && a->flag == b->flag && a->lo == b->lo && a->hi == b->hi && a->pos == b->pos &&
           a->cnt == b->cnt && a->used == b->used;
}

static bool cfg_eq(const cfg *a, const cfg *b) {
    if (a->depth != b->depth || a->tws != b->tws) return false;
    for (int i = a->depth - 1; i >= 0; i--)
        if (!frame_eq(&a->f[i], &b->f[i])) return false;
    return true;
}

static void cfg_copy(cfg *dst, const cfg *src) {
    dst->depth = src->depth;
    dst->tws = src->tws;
    memcpy(dst->f, src->f, (size_t)src->depth * sizeof src->f[0]);
}

/* Replaces configurations waiting for an anyOf value by one per alternative
 * (alternatives past MU_JSONC_MAX_ALT are dropped: the output stays valid,
 * only less varied). */
static void expand(mu_jsonc *r) {
    for (int i = 0; i < r->n; i++) {
        cfg *g = &r->c[i];
        while (g->depth) {
            frame *f = &g->f[g->depth - 1];
            const jnode *n = f->p;
            if (f->kind != K_VAL || !n->n_any) break;
            for (int k = 1; k < n->n_any && r->n < MU_JSONC_MAX_ALT; k++) {
                cfg *h = &r->c[r->n++];
                cfg_copy(h, g);
                h->f[h->depth - 1].p = n->any[k];
            }
            f->p = n->any[0];
        }
    }
}

bool mu_jsonc_feed(mu_jsonc *r, const char *bytes, size_t n) {
    for (size_t i = 0; i < n && r->n; i++) {
        expand(r);
        int m = 0;
        for (int k = 0; k < r->n; k++) {
            if (!cfg_feed(&r->c[k], (uint8_t)bytes[i])) continue;
            bool dup = false;
            for (int q = 0; q < m && !dup; q++) dup = cfg_eq(&r->c[q], &r->c[k]);
            if (dup) continue;
            if (m != k) cfg_copy(&r->c[m], &r->c[k]);
            m++;
        }
        r->n = m;
    }
    return r->n > 0;
}

bool mu_jsonc_alive(const mu_jsonc *r) { return r->n > 0; }

bool mu_jsonc_in_plain_string(const mu_jsonc *r) {
    for (int k = 0; k < r->n; k++) {
        const cfg *g = &r->c[k];
        if (!g->depth) return false;
        const frame *f = &g->f[g->depth - 1];
        if (f->kind != K_STR || f->sst != S_N) return false;
    }
    return r->n > 0;
}

bool mu_jsonc_closed(const mu_jsonc *r) {
    for (int k = 0; k < r->n; k++)
        if (r->c[k].depth == 0) return true;
    return false;
}

bool mu_jsonc_complete(const mu_jsonc *r) {
    for (int k = 0; k < r->n; k++) {
        const cfg *g = &r->c[k];
        if (g->depth == 0) return true;
        if (g->depth == 1) {
            const frame *f = &g->f[0];
            if (f->kind == K_NUM && num_accepting(f)) return true;
            if (f->kind == K_LIT && lit_accepting(f)) return true;
        }
    }
    return false;
}

void mu_jsonc_reset(mu_jsonc *r) {
    r->n = 1;
    r->c[0].depth = 0;
    r->c[0].tws = 0;
    push_val(&r->c[0], r->s->root, 0);
}

int mu_jsonc_new(const mu_jsonc_schema *s, mu_jsonc **out, mu_err *err) {
    mu_jsonc *r = malloc(sizeof *r);
    if (!r) return mu_fail(err, MU_E_NOMEM, "jsonc: out of memory");
    r->s = s;
    mu_jsonc_reset(r);
    *out = r;
    return 0;
}

void mu_jsonc_free(mu_jsonc *r) { free(r); }

void mu_jsonc_copy(mu_jsonc *dst, const mu_jsonc *src) {
    dst->s = src->s;
    dst->n = src->n;
    for (int k = 0; k < src->n; k++) cfg_copy(&dst->c[k], &src->c[k]);
}

void mu_jsonc_next_bytes(const mu_jsonc *r, mu_jsonc *scratch, uint64_t set[4]) {
    set[0] = set[1] = set[2] = set[3] = 0;
    for (int b = 0; b < 256; b++) {
        mu_jsonc_copy(scratch, r);
        char c = (char)b;
        if (mu_jsonc_feed(scratch, &c, 1)) set[b >> 6] |= 1ull << (b & 63);
    }
}
