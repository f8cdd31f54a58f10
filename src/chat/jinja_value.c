/* jinja_value.c: values of the Jinja interpreter: the per-render arena,
 * strings, lists, ordered dicts, truthiness, equality and ordering, and the
 * Python text forms (str(), repr(), json.dumps) that templates print.
 * Does not: parse or evaluate templates.
 * Key choice: every value is allocated from one arena freed after the render,
 * so values are plain structs passed by value and nothing is ref-counted;
 * the arena has a byte limit that turns runaway templates into an error. */
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "jinja_int.h"

/* ------------------------------------------------------------------ arena */
struct jarena_blk {
    jarena_blk *next;
    size_t cap, used;
    _Alignas(16) unsigned char data[];
};

void *ja_alloc(jarena *a, size_t n) {
    n = (n + 15) & ~(size_t)15;
    if (n == 0) n = 16;
    if (a->failed || n > a->limit || a->used_total + n > a->limit) {
        a->failed = true;
        return NULL;
    }
    jarena_blk *b = a->head;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > 65536 ? n : 65536;
        b = malloc(sizeof(*b) + cap);
        if (!b) {
            a->failed = true;
            return NULL;
        }
        b->cap = cap;
        b->used = 0;
        b->next = a->head;
        a->head = b;
    }
    void *p = b->data + b->used;
    b->used += n;
    a->used_total += n;
    memset(p, 0, n);
    return p;
}

void ja_free_all(jarena *a) {
    jarena_blk *b = a->head;
    while (b) {
        jarena_blk *nx = b->next;
        free(b);
        b = nx;
    }
    a->head = NULL;
    a->used_total = 0;
}

/* ------------------------------------------------------------------ errors */
jv jr_fail(jrender *r, int code, const char *fmt, ...) {
    if (!r->failed) {
        r->failed = true;
        r->code = code;
        char msg[220];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        mu_fail(r->err, code, "jinja: line %d: %s", r->line, msg);
    }
    jv v = {0};
    return v;
}

static void *jr_alloc(jrender *r, size_t n) {
    void *p = ja_alloc(r->a, n);
    if (!p) jr_fail(r, MU_E_NOMEM, "memory limit reached");
    return p;
}

/* ------------------------------------------------------------------ UTF-8 */
int u8_decode(const char *s, size_t n, size_t *adv) {
    const unsigned char *p = (const unsigned char *)s;
    *adv = 1;
    if (n == 0) return -1;
    unsigned c = p[0];
    if (c < 0x80) return (int)c;
    int need;
    unsigned cp;
    if (c >= 0xc2 && c <= 0xdf) { need = 1; cp = c & 0x1f; }
    else if (c >= 0xe0 && c <= 0xef) { need = 2; cp = c & 0x0f; }
    else if (c >= 0xf0 && c <= 0xf4) { need = 3; cp = c & 0x07; }
    else return -1;
    if ((size_t)need >= n) return -1;
    for (int i = 1; i <= need; i++) {
        if ((p[i] & 0xc0) != 0x80) return -1;
        cp = (cp << 6) | (p[i] & 0x3f);
    }
    if ((need == 2 && cp < 0x800) || (need == 3 && (cp < 0x10000 || cp > 0x10ffff)) ||
        (cp >= 0xd800 && cp <= 0xdfff))
        return -1;
    *adv = (size_t)need + 1;
    return (int)cp;
}

size_t u8_encode(int cp, char *o) {
    unsigned c = (unsigned)cp;
    if (c < 0x80) { o[0] = (char)c; return 1; }
    if (c < 0x800) { o[0] = (char)(0xc0 | (c >> 6)); o[1] = (char)(0x80 | (c & 0x3f)); return 2; }
    if (c < 0x10000) {
        o[0] = (char)(0xe0 | (c >> 12)); o[1] = (char)(0x80 | ((c >> 6) & 0x3f));
        o[2] = (char)(0x80 | (c & 0x3f));
        return 3;
    }
    o[0] = (char)(0xf0 | (c >> 18)); o[1] = (char)(0x80 | ((c >> 12) & 0x3f));
    o[2] = (char)(0x80 | ((c >> 6) & 0x3f)); o[3] = (char)(0x80 | (c & 0x3f));
    return 4;
}

size_t u8_len(const char *s, size_t n) {
    size_t k = 0, i = 0, adv;
    while (i < n) {
        u8_decode(s + i, n - i, &adv);
        i += adv;
        k++;
    }
    return k;
}

size_t u8_offset(const char *s, size_t n, size_t cp) {
    size_t i = 0, adv;
    while (i < n && cp > 0) {
        u8_decode(s + i, n - i, &adv);
        i += adv;
        cp--;
    }
    return i;
}

/* ------------------------------------------------------------------ constructors */
jv jv_strn(jrender *r, const char *s, size_t n) {
    jv v = {0};
    jstr *p = jr_alloc(r, sizeof(jstr) + n + 1);
    if (!p) return v;
    p->len = n;
    if (n) memcpy(p->s, s, n);
    p->s[n] = 0;
    v.t = JV_STR;
    v.u.s = p;
    return v;
}

jv jv_str(jrender *r, const char *s) { return jv_strn(r, s, strlen(s)); }

jv jv_undef(const char *hint, jrender *r) {
    jv v = {0};
    v.t = JV_UNDEF;
    if (hint) {
        jv s = jv_str(r, hint);
        v.u.s = s.u.s;
    }
    return v;
}

jv jv_undef_attr(jrender *r, jv obj, const char *name) {
    char buf[200];
    if (obj.t == JV_UNDEF) return obj;
    snprintf(buf, sizeof buf, "'%s object' has no attribute '%.100s'", jv_type_name(obj), name);
    return jv_undef(buf, r);
}

jv jv_list_new(jrender *r, size_t cap) {
    jv v = {0};
    jlist *l = jr_alloc(r, sizeof(jlist));
    if (!l) return v;
    if (cap < 4) cap = 4;
    l->v = jr_alloc(r, cap * sizeof(jv));
    if (!l->v) return v;
    l->cap = cap;
    v.t = JV_LIST;
    v.u.l = l;
    return v;
}

bool jv_list_push(jrender *r, jv list, jv item) {
    jlist *l = list.u.l;
    if (l->n == l->cap) {
        size_t nc = l->cap * 2;
        jv *nv = jr_alloc(r, nc * sizeof(jv));
        if (!nv) return false;
        memcpy(nv, l->v, l->n * sizeof(jv));
        l->v = nv;
        l->cap = nc;
    }
    l->v[l->n++] = item;
    return true;
}

jv jv_dict_new(jrender *r, size_t cap) {
    jv v = {0};
    jdict *d = jr_alloc(r, sizeof(jdict));
    if (!d) return v;
    if (cap < 4) cap = 4;
    d->k = jr_alloc(r, cap * sizeof(jv));
    d->v = jr_alloc(r, cap * sizeof(jv));
    if (!d->k || !d->v) return v;
    d->cap = cap;
    v.t = JV_DICT;
    v.u.d = d;
    return v;
}

jv *jv_dict_get(jdict *d, jv key) {
    for (size_t i = 0; i < d->n; i++)
        if (jv_equal(d->k[i], key)) return &d->v[i];
    return NULL;
}

jv *jv_dict_gets(jdict *d, const char *key, size_t len) {
    for (size_t i = 0; i < d->n; i++)
        if (d->k[i].t == JV_STR && d->k[i].u.s->len == len && memcmp(d->k[i].u.s->s, key, len) == 0)
            return &d->v[i];
    return NULL;
}

bool jv_dict_set(jrender *r, jdict *d, jv key, jv val) {
    jv *slot = jv_dict_get(d, key);
    if (slot) {
        *slot = val;
        return true;
    }
    if (d->n == d->cap) {
        size_t nc = d->cap * 2;
        jv *nk = jr_alloc(r, nc * sizeof(jv)), *nv = jr_alloc(r, nc * sizeof(jv));
        if (!nk || !nv) return false;
        memcpy(nk, d->k, d->n * sizeof(jv));
        memcpy(nv, d->v, d->n * sizeof(jv));
        d->k = nk;
        d->v = nv;
        d->cap = nc;
    }
    d->k[d->n] = key;
    d->v[d->n] = val;
    d->n++;
    return true;
}

bool jv_dict_sets(jrender *r, jdict *d, const char *key, jv val) {
    jv *slot = jv_dict_gets(d, key, strlen(key));
    if (slot) {
        *slot = val;
        return true;
    }
    jv k = jv_str(r, key);
    if (r->failed) return false;
    return jv_dict_set(r, d, k, val);
}

/* ------------------------------------------------------------------ semantics */
bool jv_truthy(jv v) {
    switch (v.t) {
    case JV_UNDEF: case JV_NONE: return false;
    case JV_BOOL: case JV_INT: return v.u.i != 0;
    case JV_FLOAT: return v.u.f != 0.0;
    case JV_STR: return v.u.s->len != 0;
    case JV_LIST: return v.u.l->n != 0;
    case JV_DICT: return (v.flags & (JF_NS | JF_LOOP)) ? true : v.u.d->n != 0;
    default: return true;
    }
}

static bool is_num(jv v) { return v.t == JV_BOOL || v.t == JV_INT || v.t == JV_FLOAT; }
static double num_f(jv v) { return v.t == JV_FLOAT ? v.u.f : (double)v.u.i; }

bool jv_equal(jv a, jv b) {
    if (is_num(a) && is_num(b)) {
        if (a.t != JV_FLOAT && b.t != JV_FLOAT) return a.u.i == b.u.i;
        return num_f(a) == num_f(b);
    }
    if (a.t != b.t) return false;
    switch (a.t) {
    case JV_UNDEF: case JV_NONE: return true;
    case JV_STR: return a.u.s->len == b.u.s->len && memcmp(a.u.s->s, b.u.s->s, a.u.s->len) == 0;
    case JV_LIST:
        if ((a.flags & JF_TUPLE) != (b.flags & JF_TUPLE) || a.u.l->n != b.u.l->n) return false;
        for (size_t i = 0; i < a.u.l->n; i++)
            if (!jv_equal(a.u.l->v[i], b.u.l->v[i])) return false;
        return true;
    case JV_DICT:
        if ((a.flags | b.flags) & (JF_NS | JF_LOOP)) return a.u.d == b.u.d;
        if (a.u.d->n != b.u.d->n) return false;
        for (size_t i = 0; i < a.u.d->n; i++) {
            jv *o = jv_dict_get(b.u.d, a.u.d->k[i]);
            if (!o || !jv_equal(a.u.d->v[i], *o)) return false;
        }
        return true;
    case JV_FUNC: return a.u.fn == b.u.fn;
    }
    return false;
}

int jv_compare(jrender *r, jv a, jv b) {
    if (is_num(a) && is_num(b)) {
        if (a.t != JV_FLOAT && b.t != JV_FLOAT) return a.u.i < b.u.i ? -1 : a.u.i > b.u.i;
        double x = num_f(a), y = num_f(b);
        return x < y ? -1 : x > y;
    }
    if (a.t == JV_STR && b.t == JV_STR) {
        size_t n = a.u.s->len < b.u.s->len ? a.u.s->len : b.u.s->len;
        int c = memcmp(a.u.s->s, b.u.s->s, n);
        if (c) return c < 0 ? -1 : 1;
        return a.u.s->len < b.u.s->len ? -1 : a.u.s->len > b.u.s->len;
    }
    if (a.t == JV_LIST && b.t == JV_LIST && (a.flags & JF_TUPLE) == (b.flags & JF_TUPLE)) {
        size_t n = a.u.l->n < b.u.l->n ? a.u.l->n : b.u.l->n;
        for (size_t i = 0; i < n; i++) {
            if (jv_equal(a.u.l->v[i], b.u.l->v[i])) continue;
            return jv_compare(r, a.u.l->v[i], b.u.l->v[i]);
        }
        return a.u.l->n < b.u.l->n ? -1 : a.u.l->n > b.u.l->n;
    }
    if (a.t == JV_UNDEF || b.t == JV_UNDEF) {
        jv u = a.t == JV_UNDEF ? a : b;
        jr_fail(r, MU_E_ARG, "%s", u.u.s ? u.u.s->s : "undefined value");
        return -2;
    }
    jr_fail(r, MU_E_ARG, "'<' not supported between instances of '%s' and '%s'", jv_type_name(a),
            jv_type_name(b));
    return -2;
}

const char *jv_type_name(jv v) {
    switch (v.t) {
    case JV_UNDEF: return "Undefined";
    case JV_NONE: return "NoneType";
    case JV_BOOL: return "bool";
    case JV_INT: return "int";
    case JV_FLOAT: return "float";
    case JV_STR: return "str";
    case JV_LIST: return (v.flags & JF_TUPLE) ? "tuple" : "list";
    case JV_DICT: return (v.flags & JF_NS) ? "Namespace" : (v.flags & JF_LOOP) ? "LoopContext" : "dict";
    default: return "function";
    }
}

/* ------------------------------------------------------------------ text forms */
bool jb_put(jrender *r, jbuf *b, const char *s, size_t n) {
    if (r->failed) return false;
    if (b->n + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 256;
        while (nc < b->n + n + 1) nc *= 2;
        if (nc > r->max_output + 1024 && b->n + n > r->max_output) {
            jr_fail(r, MU_E_NOMEM, "output larger than %zu bytes", r->max_output);
            return false;
        }
        char *np = realloc(b->p, nc);
        if (!np) {
            jr_fail(r, MU_E_NOMEM, "out of memory");
            return false;
        }
        b->p = np;
        b->cap = nc;
    }
    if (b->n + n > r->max_output) {
        jr_fail(r, MU_E_NOMEM, "output larger than %zu bytes", r->max_output);
        return false;
    }
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return true;
}

bool jb_puts(jrender *r, jbuf *b, const char *s) { return jb_put(r, b, s, strlen(s)); }

/* Python repr(float): the shortest digits that round-trip; exponent form when
 * the decimal exponent is < -4 or >= 16. */
void jv_fmt_float(double f, char *out, size_t cap) {
    if (isnan(f)) { snprintf(out, cap, "nan"); return; }
    if (isinf(f)) { snprintf(out, cap, f < 0 ? "-inf" : "inf"); return; }
    if (f == 0) { snprintf(out, cap, signbit(f) ? "-0.0" : "0.0"); return; }
    char tmp[64];
    int prec;
    for (prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*e", prec - 1, f);
        if (strtod(tmp, NULL) == f) break;
    }
    /* tmp: [-]d.ddde[+-]XX */
    char digits[32];
    int nd = 0;
    const char *p = tmp;
    bool neg = false;
    if (*p == '-') { neg = true; p++; }
    for (; *p && *p != 'e'; p++)
        if (*p >= '0' && *p <= '9') digits[nd++] = *p;
    int e10 = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    digits[nd] = 0;
    char res[80];
    size_t k = 0;
    if (neg) res[k++] = '-';
    if (e10 < -4 || e10 >= 16) {
        res[k++] = digits[0];
        if (nd > 1) {
            res[k++] = '.';
            for (int i = 1; i < nd; i++) res[k++] = digits[i];
        }
        k += (size_t)snprintf(res + k, sizeof res - k, "e%c%02d", e10 < 0 ? '-' : '+', abs(e10));
    } else if (e10 < 0) {
        res[k++] = '0';
        res[k++] = '.';
        for (int i = 0; i < -e10 - 1; i++) res[k++] = '0';
        for (int i = 0; i < nd; i++) res[k++] = digits[i];
    } else {
        for (int i = 0; i <= e10; i++) res[k++] = i < nd ? digits[i] : '0';
        res[k++] = '.';
        if (nd > e10 + 1)
            for (int i = e10 + 1; i < nd; i++) res[k++] = digits[i];
        else
            res[k++] = '0';
    }
    res[k] = 0;
    snprintf(out, cap, "%s", res);
}

static bool cp_printable(int cp) {
    if (cp == ' ') return true;
    if (cp < 0x20 || cp == 0x7f) return false;
    if (cp < 0x7f) return true;
    switch (utf8proc_category(cp)) {
    case UTF8PROC_CATEGORY_CC: case UTF8PROC_CATEGORY_CF: case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO: case UTF8PROC_CATEGORY_CN: case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP: case UTF8PROC_CATEGORY_ZS:
        return false;
    default:
        return true;
    }
}

static bool str_repr(jrender *r, jbuf *b, const char *s, size_t n) {
    bool has_sq = memchr(s, '\'', n) != NULL, has_dq = memchr(s, '"', n) != NULL;
    char q = (has_sq && !has_dq) ? '"' : '\'';
    if (!jb_put(r, b, &q, 1)) return false;
    size_t i = 0, adv;
    while (i < n) {
        int cp = u8_decode(s + i, n - i, &adv);
        char e[16];
        if (cp < 0) {
            snprintf(e, sizeof e, "\\udc%02x", (unsigned char)s[i]);
            jb_puts(r, b, e);
        } else if (cp == q || cp == '\\') {
            e[0] = '\\';
            e[1] = (char)cp;
            jb_put(r, b, e, 2);
        } else if (cp == '\n') jb_puts(r, b, "\\n");
        else if (cp == '\r') jb_puts(r, b, "\\r");
        else if (cp == '\t') jb_puts(r, b, "\\t");
        else if (!cp_printable(cp)) {
            if (cp < 0x100) snprintf(e, sizeof e, "\\x%02x", cp);
            else if (cp < 0x10000) snprintf(e, sizeof e, "\\u%04x", cp);
            else snprintf(e, sizeof e, "\\U%08x", cp);
            jb_puts(r, b, e);
        } else
            jb_put(r, b, s + i, adv);
        i += adv;
    }
    return jb_put(r, b, &q, 1);
}

static bool repr_inner(jrender *r, jbuf *b, jv v, int depth) {
    if (depth > 200) {
        jr_fail(r, MU_E_ARG, "value nested too deeply");
        return false;
    }
    char tmp[64];
    switch (v.t) {
    case JV_STR: return str_repr(r, b, v.u.s->s, v.u.s->len);
    case JV_LIST: {
        bool tup = v.flags & JF_TUPLE;
        jb_puts(r, b, tup ? "(" : "[");
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i) jb_puts(r, b, ", ");
            repr_inner(r, b, v.u.l->v[i], depth + 1);
        }
        if (tup && v.u.l->n == 1) jb_puts(r, b, ",");
        return jb_puts(r, b, tup ? ")" : "]");
    }
    case JV_DICT: {
        if (v.flags & JF_NS) jb_puts(r, b, "<Namespace ");
        jb_puts(r, b, "{");
        for (size_t i = 0; i < v.u.d->n; i++) {
            if (i) jb_puts(r, b, ", ");
            repr_inner(r, b, v.u.d->k[i], depth + 1);
            jb_puts(r, b, ": ");
            repr_inner(r, b, v.u.d->v[i], depth + 1);
        }
        jb_puts(r, b, "}");
        if (v.flags & JF_NS) jb_puts(r, b, ">");
        return !r->failed;
    }
    case JV_UNDEF: return depth ? jb_puts(r, b, "Undefined") : true;
    case JV_NONE: return jb_puts(r, b, "None");
    case JV_BOOL: return jb_puts(r, b, v.u.i ? "True" : "False");
    case JV_INT:
        snprintf(tmp, sizeof tmp, "%" PRId64, v.u.i);
        return jb_puts(r, b, tmp);
    case JV_FLOAT:
        jv_fmt_float(v.u.f, tmp, sizeof tmp);
        return jb_puts(r, b, tmp);
    case JV_FUNC:
        snprintf(tmp, sizeof tmp, "<function %.40s>", v.u.fn->name ? v.u.fn->name : "?");
        return jb_puts(r, b, tmp);
    }
    return true;
}

bool jv_to_repr(jrender *r, jbuf *b, jv v) { return repr_inner(r, b, v, 0); }

bool jv_to_str(jrender *r, jbuf *b, jv v) {
    if (v.t == JV_STR) return jb_put(r, b, v.u.s->s, v.u.s->len);
    return repr_inner(r, b, v, 0);
}

jv jv_as_str(jrender *r, jv v) {
    if (v.t == JV_STR) return v;
    jbuf b = {0};
    jv out = {0};
    if (jv_to_str(r, &b, v)) out = jv_strn(r, b.p ? b.p : "", b.n);
    free(b.p);
    return out;
}

/* ------------------------------------------------------------------ JSON */
static bool json_str(jrender *r, jbuf *b, const char *s, size_t n) {
    jb_put(r, b, "\"", 1);
    size_t start = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *e = NULL;
        char tmp[8];
        if (c == '"') e = "\\\"";
        else if (c == '\\') e = "\\\\";
        else if (c == '\n') e = "\\n";
        else if (c == '\r') e = "\\r";
        else if (c == '\t') e = "\\t";
        else if (c == '\b') e = "\\b";
        else if (c == '\f') e = "\\f";
        else if (c < 0x20) {
            snprintf(tmp, sizeof tmp, "\\u%04x", c);
            e = tmp;
        }
        else if (c == 0x7f && r->json_ascii) {
            snprintf(tmp, sizeof tmp, "\\u%04x", c);
            e = tmp;
        } else if (c >= 0x80 && r->json_ascii) {
            size_t adv;
            int cp = u8_decode(s + i, n - i, &adv);
            char tmp2[16];
            if (cp < 0) cp = 0xfffd;
            if (cp >= 0x10000)
                snprintf(tmp2, sizeof tmp2, "\\u%04x\\u%04x", 0xd800 + ((cp - 0x10000) >> 10),
                         0xdc00 + ((cp - 0x10000) & 0x3ff));
            else
                snprintf(tmp2, sizeof tmp2, "\\u%04x", cp);
            jb_put(r, b, s + start, i - start);
            jb_puts(r, b, tmp2);
            i += adv - 1;
            start = i + 1;
            continue;
        }
        if (e) {
            jb_put(r, b, s + start, i - start);
            jb_puts(r, b, e);
            start = i + 1;
        }
    }
    jb_put(r, b, s + start, n - start);
    return jb_put(r, b, "\"", 1);
}

static bool json_indent(jrender *r, jbuf *b, const char *indent, int level) {
    jb_put(r, b, "\n", 1);
    for (int i = 0; i < level; i++) jb_puts(r, b, indent);
    return !r->failed;
}

static bool json_key(jrender *r, jbuf *b, jv k) {
    char tmp[64];
    switch (k.t) {
    case JV_STR: return json_str(r, b, k.u.s->s, k.u.s->len);
    case JV_INT: snprintf(tmp, sizeof tmp, "\"%" PRId64 "\"", k.u.i); return jb_puts(r, b, tmp);
    case JV_BOOL: return jb_puts(r, b, k.u.i ? "\"true\"" : "\"false\"");
    case JV_NONE: return jb_puts(r, b, "\"null\"");
    case JV_FLOAT:
        jb_puts(r, b, "\"");
        jv_fmt_float(k.u.f, tmp, sizeof tmp);
        jb_puts(r, b, tmp);
        return jb_puts(r, b, "\"");
    default:
        jr_fail(r, MU_E_ARG, "keys must be str, int, float, bool or None, not %s", jv_type_name(k));
        return false;
    }
}

static int cmp_keys(const void *x, const void *y, void *ctx) {
    jrender *r = ctx;
    return jv_compare(r, *(const jv *)x, *(const jv *)y);
}

bool jv_to_json(jrender *r, jbuf *b, jv v, const char *indent, const char *isep, const char *ksep,
                bool sort_keys, int level) {
    char tmp[64];
    if (level > 200) {
        jr_fail(r, MU_E_ARG, "value nested too deeply for tojson");
        return false;
    }
    switch (v.t) {
    case JV_NONE: return jb_puts(r, b, "null");
    case JV_BOOL: return jb_puts(r, b, v.u.i ? "true" : "false");
    case JV_INT: snprintf(tmp, sizeof tmp, "%" PRId64, v.u.i); return jb_puts(r, b, tmp);
    case JV_FLOAT:
        if (isnan(v.u.f)) return jb_puts(r, b, "NaN");
        if (isinf(v.u.f)) return jb_puts(r, b, v.u.f < 0 ? "-Infinity" : "Infinity");
        jv_fmt_float(v.u.f, tmp, sizeof tmp);
        return jb_puts(r, b, tmp);
    case JV_STR: return json_str(r, b, v.u.s->s, v.u.s->len);
    case JV_LIST:
        if (v.u.l->n == 0) return jb_puts(r, b, "[]");
        jb_puts(r, b, "[");
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i) jb_puts(r, b, isep);
            if (indent) json_indent(r, b, indent, level + 1);
            if (!jv_to_json(r, b, v.u.l->v[i], indent, isep, ksep, sort_keys, level + 1)) return false;
        }
        if (indent) json_indent(r, b, indent, level);
        return jb_puts(r, b, "]");
    case JV_DICT: {
        if (v.flags & (JF_NS | JF_LOOP)) break;
        jdict *d = v.u.d;
        if (d->n == 0) return jb_puts(r, b, "{}");
        size_t *order = jr_alloc(r, d->n * sizeof(size_t));
        if (!order) return false;
        for (size_t i = 0; i < d->n; i++) order[i] = i;
        if (sort_keys) {
            /* stable insertion sort by key (dicts in templates are small) */
            for (size_t i = 1; i < d->n; i++) {
                size_t x = order[i], j = i;
                while (j > 0 && cmp_keys(&d->k[x], &d->k[order[j - 1]], r) < 0) {
                    order[j] = order[j - 1];
                    j--;
                }
                order[j] = x;
                if (r->failed) return false;
            }
        }
        jb_puts(r, b, "{");
        for (size_t i = 0; i < d->n; i++) {
            if (i) jb_puts(r, b, isep);
            if (indent) json_indent(r, b, indent, level + 1);
            if (!json_key(r, b, d->k[order[i]])) return false;
            jb_puts(r, b, ksep);
            if (!jv_to_json(r, b, d->v[order[i]], indent, isep, ksep, sort_keys, level + 1)) return false;
        }
        if (indent) json_indent(r, b, indent, level);
        return jb_puts(r, b, "}");
    }
    default: break;
    }
    jr_fail(r, MU_E_ARG, "Object of type %s is not JSON serializable", jv_type_name(v));
    return false;
}

jv jv_from_json(jrender *r, const void *p) {
    const json_t *j = p;
    jv v = jv_none();
    if (r->failed || !j) return v;
    switch (json_typeof(j)) {
    case JSON_OBJECT: {
        v = jv_dict_new(r, json_object_size(j));
        if (r->failed) return v;
        const char *k;
        json_t *val;
        json_object_foreach((json_t *)j, k, val) {
            jv key = jv_str(r, k);
            jv x = jv_from_json(r, val);
            if (r->failed) return v;
            /* keys of a JSON object are unique: append without a lookup */
            jdict *d = v.u.d;
            if (d->n == d->cap) {
                if (!jv_dict_set(r, d, key, x)) return v;
            } else {
                d->k[d->n] = key;
                d->v[d->n] = x;
                d->n++;
            }
        }
        return v;
    }
    case JSON_ARRAY: {
        v = jv_list_new(r, json_array_size(j));
        if (r->failed) return v;
        size_t i;
        json_t *val;
        json_array_foreach((json_t *)j, i, val) {
            jv x = jv_from_json(r, val);
            if (r->failed || !jv_list_push(r, v, x)) return v;
        }
        return v;
    }
    case JSON_STRING: return jv_strn(r, json_string_value(j), json_string_length(j));
    case JSON_INTEGER: return jv_int((int64_t)json_integer_value(j));
    case JSON_REAL: return jv_float(json_real_value(j));
    case JSON_TRUE: return jv_bool(true);
    case JSON_FALSE: return jv_bool(false);
    default: return v;
    }
}
