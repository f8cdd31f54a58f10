/* jinja_builtins.c: what templates call by name: filters, tests, the
 * methods of str/dict/list and the loop object, the globals (range, dict,
 * namespace, raise_exception, strftime_now), attribute and item access, and
 * iteration. Semantics follow Jinja2 3.1 in transformers' sandboxed
 * environment: mutating methods (list.append, dict.pop, ...) are refused as
 * unsafe, `tojson` is json.dumps(ensure_ascii=False), range is capped at
 * 100000 items. Does not: parse or evaluate statements.
 * Key choice: per kind (filter, test, method) a list of the known names (for
 * the `filter` and `test` tests and attribute access) and one function that
 * dispatches by name through a chain of strcmp, with Python's argument binding
 * (positional or keyword) done by a small helper (bind). */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <utf8proc.h>

#include "jinja_int.h"

/* ------------------------------------------------------------------ argument binding */
/* Binds args to the named parameters (positional first, then keywords).
 * out[i] is JV_UNDEF with u.s == NULL when not given (check with GIVEN). */
static bool bind(jrender *r, const char *fname, jargs *a, const char *const *params, jv *out) {
    int np = 0;
    while (params[np]) np++;
    for (int i = 0; i < np; i++) {
        memset(&out[i], 0, sizeof(jv));
        out[i].t = 0xff; /* not given */
    }
    if (a->n_pos > (size_t)np) {
        jr_fail(r, MU_E_ARG, "%s() takes at most %d argument(s) (%zu given)", fname, np, a->n_pos);
        return false;
    }
    for (size_t i = 0; i < a->n_pos; i++) out[i] = a->pos[i];
    for (size_t k = 0; k < a->n_kw; k++) {
        int j;
        for (j = 0; j < np; j++)
            if (!strcmp(params[j], a->kw_names[k])) break;
        if (j == np) {
            jr_fail(r, MU_E_ARG, "%s() got an unexpected keyword argument '%s'", fname, a->kw_names[k]);
            return false;
        }
        if (out[j].t != 0xff) {
            jr_fail(r, MU_E_ARG, "%s() got multiple values for argument '%s'", fname, params[j]);
            return false;
        }
        out[j] = a->kw[k];
    }
    return true;
}
#define GIVEN(v) ((v).t != 0xff)

static jv soft_str(jrender *r, jv v) {
    if (v.t == JV_UNDEF) return jv_strn(r, "", 0);
    return jv_as_str(r, v);
}

static jv mkstr_buf(jrender *r, jbuf *b) {
    jv out = r->failed ? jv_none() : jv_strn(r, b->p ? b->p : "", b->n);
    free(b->p);
    b->p = NULL;
    return out;
}

static bool need_int(jrender *r, jv v, const char *what, int64_t *out) {
    if (v.t == JV_INT || v.t == JV_BOOL) {
        *out = v.u.i;
        return true;
    }
    if (v.t == JV_UNDEF && v.u.s) {
        jr_fail(r, MU_E_ARG, "%s", v.u.s->s);
        return false;
    }
    jr_fail(r, MU_E_ARG, "'%s' object cannot be interpreted as an integer (%s)", jv_type_name(v), what);
    return false;
}

/* ------------------------------------------------------------------ iteration */
jv jinja_iterate(jrender *r, jv v) {
    switch (v.t) {
    case JV_UNDEF: return jv_list_new(r, 0);
    case JV_LIST: return v;
    case JV_DICT: {
        if (v.flags & (JF_NS | JF_LOOP)) break;
        jv l = jv_list_new(r, v.u.d->n);
        for (size_t i = 0; i < v.u.d->n && !r->failed; i++) jv_list_push(r, l, v.u.d->k[i]);
        return l;
    }
    case JV_STR: {
        jv l = jv_list_new(r, v.u.s->len);
        size_t i = 0, adv;
        while (i < v.u.s->len && !r->failed) {
            u8_decode(v.u.s->s + i, v.u.s->len - i, &adv);
            jv_list_push(r, l, jv_strn(r, v.u.s->s + i, adv));
            i += adv;
        }
        return l;
    }
    default: break;
    }
    return jr_fail(r, MU_E_ARG, "'%s' object is not iterable", jv_type_name(v));
}

/* ------------------------------------------------------------------ unicode case helpers */
typedef int (*cpmap)(int);
static int cp_upper(int c) { return c < 0x80 ? (c >= 'a' && c <= 'z' ? c - 32 : c) : utf8proc_toupper(c); }
static int cp_lower(int c) { return c < 0x80 ? (c >= 'A' && c <= 'Z' ? c + 32 : c) : utf8proc_tolower(c); }
static int cp_title(int c) { return c < 0x80 ? cp_upper(c) : utf8proc_totitle(c); }
static bool cp_cased(int c) {
    if (c < 0x80) return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
    utf8proc_category_t k = utf8proc_category(c);
    return k == UTF8PROC_CATEGORY_LU || k == UTF8PROC_CATEGORY_LL || k == UTF8PROC_CATEGORY_LT;
}
static bool cp_isupper(int c) {
    return c < 0x80 ? (c >= 'A' && c <= 'Z') : utf8proc_category(c) == UTF8PROC_CATEGORY_LU;
}
static bool cp_islower(int c) {
    return c < 0x80 ? (c >= 'a' && c <= 'z') : utf8proc_category(c) == UTF8PROC_CATEGORY_LL;
}
static bool cp_alpha(int c) {
    if (c < 0x80) return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
    utf8proc_category_t k = utf8proc_category(c);
    return k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO;
}
static bool cp_digit(int c) {
    if (c < 0x80) return c >= '0' && c <= '9';
    return utf8proc_category(c) == UTF8PROC_CATEGORY_ND;
}
static bool cp_numeric(int c) {
    if (c < 0x80) return c >= '0' && c <= '9';
    utf8proc_category_t k = utf8proc_category(c);
    return k == UTF8PROC_CATEGORY_ND || k == UTF8PROC_CATEGORY_NL || k == UTF8PROC_CATEGORY_NO;
}
static bool cp_space(int c) {
    return c == ' ' || (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x1f) || c == 0x85 || c == 0xa0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f ||
           c == 0x205f || c == 0x3000;
}

static jv str_map(jrender *r, jv s, cpmap f) {
    jbuf b = {0};
    size_t i = 0, adv;
    char enc[4];
    while (i < s.u.s->len && !r->failed) {
        int c = u8_decode(s.u.s->s + i, s.u.s->len - i, &adv);
        if (c < 0) jb_put(r, &b, s.u.s->s + i, 1);
        else jb_put(r, &b, enc, u8_encode(f(c), enc));
        i += adv;
    }
    return mkstr_buf(r, &b);
}

/* Python str.capitalize (first upper/title, rest lower) */
static jv str_capitalize(jrender *r, jv s) {
    jbuf b = {0};
    size_t i = 0, adv;
    char enc[4];
    bool first = true;
    while (i < s.u.s->len && !r->failed) {
        int c = u8_decode(s.u.s->s + i, s.u.s->len - i, &adv);
        if (c < 0) jb_put(r, &b, s.u.s->s + i, 1);
        else jb_put(r, &b, enc, u8_encode(first ? cp_title(c) : cp_lower(c), enc));
        first = false;
        i += adv;
    }
    return mkstr_buf(r, &b);
}

/* Python str.title: a cased char after a cased char is lowered, else titled */
static jv str_pytitle(jrender *r, jv s) {
    jbuf b = {0};
    size_t i = 0, adv;
    char enc[4];
    bool prev_cased = false;
    while (i < s.u.s->len && !r->failed) {
        int c = u8_decode(s.u.s->s + i, s.u.s->len - i, &adv);
        if (c < 0) {
            jb_put(r, &b, s.u.s->s + i, 1);
            prev_cased = false;
        } else {
            jb_put(r, &b, enc, u8_encode(prev_cased ? cp_lower(c) : cp_title(c), enc));
            prev_cased = cp_cased(c);
        }
        i += adv;
    }
    return mkstr_buf(r, &b);
}

/* Jinja2 `title` filter: words start after [-\s({[<]; first char upper, rest lower */
static jv str_jtitle(jrender *r, jv s) {
    jbuf b = {0};
    size_t i = 0, adv;
    char enc[4];
    bool at_start = true;
    while (i < s.u.s->len && !r->failed) {
        int c = u8_decode(s.u.s->s + i, s.u.s->len - i, &adv);
        bool sep = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || (c >= 0 && cp_space(c));
        if (c < 0) jb_put(r, &b, s.u.s->s + i, 1);
        else if (sep) jb_put(r, &b, s.u.s->s + i, adv);
        else jb_put(r, &b, enc, u8_encode(at_start ? cp_upper(c) : cp_lower(c), enc));
        at_start = sep;
        i += adv;
    }
    return mkstr_buf(r, &b);
}

/* strip: which 1 = left, 2 = right, 3 = both; chars NULL: whitespace */
static jv str_strip(jrender *r, jv s, jv chars, int which) {
    const char *p = s.u.s->s;
    size_t n = s.u.s->len, lo = 0, hi = n;
    bool ws = chars.t != JV_STR;
    if (!ws) {
        if (chars.u.s->len == 0) return s;
    }
    size_t adv;
    if (which & 1) {
        while (lo < hi) {
            int c = u8_decode(p + lo, hi - lo, &adv);
            bool in;
            if (ws) in = c >= 0 && cp_space(c);
            else {
                in = false;
                size_t j = 0, a2;
                while (j < chars.u.s->len) {
                    u8_decode(chars.u.s->s + j, chars.u.s->len - j, &a2);
                    if (a2 == adv && !memcmp(chars.u.s->s + j, p + lo, adv)) { in = true; break; }
                    j += a2;
                }
            }
            if (!in) break;
            lo += adv;
        }
    }
    if (which & 2) {
        while (hi > lo) {
            size_t st = hi - 1;
            while (st > lo && ((unsigned char)p[st] & 0xc0) == 0x80 && hi - st < 4) st--;
            int c = u8_decode(p + st, hi - st, &adv);
            if (st + adv != hi) { st = hi - 1; c = -1; adv = 1; }
            bool in;
            if (ws) in = c >= 0 && cp_space(c);
            else {
                in = false;
                size_t j = 0, a2;
                while (j < chars.u.s->len) {
                    u8_decode(chars.u.s->s + j, chars.u.s->len - j, &a2);
                    if (a2 == adv && !memcmp(chars.u.s->s + j, p + st, adv)) { in = true; break; }
                    j += a2;
                }
            }
            if (!in) break;
            hi = st;
        }
    }
    if (lo == 0 && hi == n) return s;
    return jv_strn(r, p + lo, hi - lo);
}

static jv str_replace(jrender *r, jv s, jv old, jv new_, int64_t count) {
    if (old.t != JV_STR || new_.t != JV_STR)
        return jr_fail(r, MU_E_ARG, "replace() argument must be str, not %s",
                       jv_type_name(old.t != JV_STR ? old : new_));
    jbuf b = {0};
    const char *p = s.u.s->s;
    size_t n = s.u.s->len, i = 0;
    int64_t done = 0;
    if (old.u.s->len == 0) {
        /* Python inserts `new` between every code point and at both ends */
        size_t adv;
        while (!r->failed) {
            if (count < 0 || done < count) {
                jb_put(r, &b, new_.u.s->s, new_.u.s->len);
                done++;
            }
            if (i >= n) break;
            u8_decode(p + i, n - i, &adv);
            jb_put(r, &b, p + i, adv);
            i += adv;
        }
        return mkstr_buf(r, &b);
    }
    while (i <= n && !r->failed) {
        const char *hit = (count < 0 || done < count) ? memmem(p + i, n - i, old.u.s->s, old.u.s->len) : NULL;
        if (!hit) {
            jb_put(r, &b, p + i, n - i);
            break;
        }
        size_t at = (size_t)(hit - p);
        jb_put(r, &b, p + i, at - i);
        jb_put(r, &b, new_.u.s->s, new_.u.s->len);
        i = at + old.u.s->len;
        done++;
    }
    return mkstr_buf(r, &b);
}

/* Python str.split / rsplit */
static jv str_split(jrender *r, jv s, jv sep, int64_t maxsplit, bool from_right) {
    jv out = jv_list_new(r, 8);
    const char *p = s.u.s->s;
    size_t n = s.u.s->len;
    if (sep.t == JV_STR && sep.u.s->len == 0) return jr_fail(r, MU_E_ARG, "empty separator");
    if (sep.t == JV_STR) {
        if (!from_right) {
            size_t i = 0;
            int64_t k = 0;
            while (!r->failed) {
                const char *hit = (maxsplit < 0 || k < maxsplit) ? memmem(p + i, n - i, sep.u.s->s, sep.u.s->len) : NULL;
                if (!hit) {
                    jv_list_push(r, out, jv_strn(r, p + i, n - i));
                    break;
                }
                jv_list_push(r, out, jv_strn(r, p + i, (size_t)(hit - p) - i));
                i = (size_t)(hit - p) + sep.u.s->len;
                k++;
            }
            return out;
        }
        /* rsplit with a separator: collect from the right then reverse */
        jv rev = jv_list_new(r, 8);
        size_t end = n;
        int64_t k = 0;
        while (!r->failed) {
            size_t found = (size_t)-1;
            if ((maxsplit < 0 || k < maxsplit) && end >= sep.u.s->len)
                for (size_t j = end - sep.u.s->len + 1; j-- > 0;)
                    if (!memcmp(p + j, sep.u.s->s, sep.u.s->len)) {
                        found = j;
                        break;
                    }
            if (found == (size_t)-1) {
                jv_list_push(r, rev, jv_strn(r, p, end));
                break;
            }
            jv_list_push(r, rev, jv_strn(r, p + found + sep.u.s->len, end - found - sep.u.s->len));
            end = found;
            k++;
        }
        for (size_t i = rev.u.l->n; i-- > 0 && !r->failed;) jv_list_push(r, out, rev.u.l->v[i]);
        return out;
    }
    /* whitespace split (ASCII and Unicode spaces) */
    size_t i = 0, adv;
    int64_t k = 0;
    if (from_right) {
        /* split fully then merge the leftmost pieces when maxsplit limits */
        jv all = str_split(r, s, sep, -1, false);
        if (r->failed) return all;
        if (maxsplit < 0 || (int64_t)all.u.l->n <= maxsplit + 1) return all;
        /* the left remainder keeps its inner whitespace: find start of piece n-maxsplit */
        size_t keep = all.u.l->n - (size_t)maxsplit;
        size_t pos = n, seen = 0;
        while (pos > 0 && !r->failed) {
            /* walk left over trailing space, then a word */
            while (pos > 0 && cp_space((unsigned char)p[pos - 1])) pos--;
            size_t wend = pos;
            while (pos > 0 && !cp_space((unsigned char)p[pos - 1])) pos--;
            (void)wend;
            seen++;
            if (seen == (size_t)maxsplit) break;
        }
        size_t lend = pos;
        while (lend > 0 && cp_space((unsigned char)p[lend - 1])) lend--;
        size_t lstart = 0;
        while (lstart < lend && cp_space((unsigned char)p[lstart])) lstart++;
        jv res = jv_list_new(r, maxsplit + 1);
        jv_list_push(r, res, jv_strn(r, p + lstart, lend - lstart));
        for (size_t j = keep; j < all.u.l->n; j++) jv_list_push(r, res, all.u.l->v[j]);
        return res;
    }
    while (i < n && !r->failed) {
        int c = u8_decode(p + i, n - i, &adv);
        if (c >= 0 && cp_space(c)) {
            i += adv;
            continue;
        }
        if (maxsplit >= 0 && k >= maxsplit) {
            /* the rest, with trailing whitespace stripped */
            size_t e = n;
            while (e > i) {
                size_t st = e - 1;
                while (st > i && ((unsigned char)p[st] & 0xc0) == 0x80) st--;
                int cc = u8_decode(p + st, e - st, &adv);
                if (cc >= 0 && cp_space(cc)) e = st;
                else break;
            }
            jv_list_push(r, out, jv_strn(r, p + i, e - i));
            break;
        }
        size_t st = i;
        while (i < n) {
            c = u8_decode(p + i, n - i, &adv);
            if (c >= 0 && cp_space(c)) break;
            i += adv;
        }
        jv_list_push(r, out, jv_strn(r, p + st, i - st));
        k++;
    }
    return out;
}

/* Python str.splitlines() line boundaries */
static size_t line_break_at(const char *p, size_t n, size_t i) {
    unsigned char c = (unsigned char)p[i];
    if (c == '\r') return (i + 1 < n && p[i + 1] == '\n') ? 2 : 1;
    if (c == '\n' || c == '\v' || c == '\f' || c == 0x1c || c == 0x1d || c == 0x1e) return 1;
    if (c == 0xc2 && i + 1 < n && (unsigned char)p[i + 1] == 0x85) return 2;
    if (c == 0xe2 && i + 2 < n && (unsigned char)p[i + 1] == 0x80 &&
        ((unsigned char)p[i + 2] == 0xa8 || (unsigned char)p[i + 2] == 0xa9))
        return 3;
    return 0;
}

static jv str_splitlines(jrender *r, jv s, bool keepends) {
    jv out = jv_list_new(r, 8);
    const char *p = s.u.s->s;
    size_t n = s.u.s->len, st = 0, i = 0;
    while (i < n && !r->failed) {
        size_t k = line_break_at(p, n, i);
        if (k) {
            jv_list_push(r, out, jv_strn(r, p + st, (keepends ? i + k : i) - st));
            i += k;
            st = i;
        } else
            i++;
    }
    if (st < n) jv_list_push(r, out, jv_strn(r, p + st, n - st));
    return out;
}

static bool str_starts(jv s, jv pre, bool end) {
    if (pre.u.s->len > s.u.s->len) return false;
    const char *at = end ? s.u.s->s + s.u.s->len - pre.u.s->len : s.u.s->s;
    return memcmp(at, pre.u.s->s, pre.u.s->len) == 0;
}

static jv html_escape(jrender *r, jv v) {
    if (v.flags & JF_SAFE && v.t == JV_STR) return v;
    jv s = soft_str(r, v);
    if (r->failed) return s;
    jbuf b = {0};
    for (size_t i = 0; i < s.u.s->len && !r->failed; i++) {
        char c = s.u.s->s[i];
        switch (c) {
        case '&': jb_puts(r, &b, "&amp;"); break;
        case '<': jb_puts(r, &b, "&lt;"); break;
        case '>': jb_puts(r, &b, "&gt;"); break;
        case '"': jb_puts(r, &b, "&#34;"); break;
        case '\'': jb_puts(r, &b, "&#39;"); break;
        default: jb_put(r, &b, &c, 1);
        }
    }
    jv out = mkstr_buf(r, &b);
    out.flags |= JF_SAFE;
    return out;
}

/* str.format with {} {0} {name} fields (no format specs) */
static jv str_format(jrender *r, jv s, jargs *a) {
    jbuf b = {0};
    const char *p = s.u.s->s;
    size_t n = s.u.s->len, auto_idx = 0;
    for (size_t i = 0; i < n && !r->failed; i++) {
        if (p[i] == '{' && i + 1 < n && p[i + 1] == '{') { jb_put(r, &b, "{", 1); i++; continue; }
        if (p[i] == '}' && i + 1 < n && p[i + 1] == '}') { jb_put(r, &b, "}", 1); i++; continue; }
        if (p[i] == '}') { free(b.p); return jr_fail(r, MU_E_ARG, "Single '}' encountered in format string"); }
        if (p[i] != '{') { jb_put(r, &b, p + i, 1); continue; }
        size_t j = i + 1;
        while (j < n && p[j] != '}') j++;
        if (j >= n) { free(b.p); return jr_fail(r, MU_E_ARG, "Single '{' encountered in format string"); }
        const char *f = p + i + 1;
        size_t fl = j - i - 1;
        if (memchr(f, ':', fl) || memchr(f, '!', fl) || memchr(f, '.', fl) || memchr(f, '[', fl)) {
            free(b.p);
            return jr_fail(r, MU_E_UNSUPPORTED, "format specs in str.format are not supported");
        }
        jv val = {0};
        bool ok = false;
        if (fl == 0) {
            if (auto_idx < a->n_pos) { val = a->pos[auto_idx]; ok = true; }
            auto_idx++;
        } else if (f[0] >= '0' && f[0] <= '9') {
            size_t idx = (size_t)strtoul(f, NULL, 10);
            if (idx < a->n_pos) { val = a->pos[idx]; ok = true; }
        } else {
            for (size_t k = 0; k < a->n_kw; k++)
                if (strlen(a->kw_names[k]) == fl && !memcmp(a->kw_names[k], f, fl)) { val = a->kw[k]; ok = true; }
        }
        if (!ok) { free(b.p); return jr_fail(r, MU_E_ARG, "Replacement index %.*s out of range for positional args tuple", (int)(fl < 40 ? fl : 40), f); }
        jv_to_str(r, &b, val);
        i = j;
    }
    return mkstr_buf(r, &b);
}

static jv join_values(jrender *r, jv seq, jv sep, const char *attr) {
    jv items = jinja_iterate(r, seq);
    if (r->failed) return items;
    jbuf b = {0};
    for (size_t i = 0; i < items.u.l->n && !r->failed; i++) {
        if (i && sep.t == JV_STR) jb_put(r, &b, sep.u.s->s, sep.u.s->len);
        jv x = items.u.l->v[i];
        if (attr) x = jinja_getattr(r, x, attr, strlen(attr));
        if (x.t != JV_UNDEF) jv_to_str(r, &b, x);
    }
    return mkstr_buf(r, &b);
}

/* ------------------------------------------------------------------ attribute / item access */
static const char *const STR_METHODS[] = {"strip", "lstrip", "rstrip", "split", "rsplit", "splitlines",
    "startswith", "endswith", "upper", "lower", "replace", "title", "capitalize", "find", "rfind", "index",
    "rindex", "count", "join", "format", "isdigit", "isalpha", "isalnum", "isspace", "islower", "isupper",
    "isnumeric", "isdecimal", "partition", "rpartition", "swapcase", "casefold", "zfill", "removeprefix",
    "removesuffix", NULL};
static const char *const DICT_METHODS[] = {"items", "keys", "values", "get", "copy", NULL};
static const char *const DICT_UNSAFE[] = {"pop", "popitem", "update", "setdefault", "clear", NULL};
static const char *const LIST_METHODS[] = {"index", "count", "copy", NULL};
static const char *const LIST_UNSAFE[] = {"append", "extend", "insert", "pop", "remove", "reverse", "sort",
                                          "clear", NULL};

static bool in_names(const char *const *names, const char *s, size_t len) {
    for (int i = 0; names[i]; i++)
        if (strlen(names[i]) == len && !memcmp(names[i], s, len)) return true;
    return false;
}

static jv bound(jrender *r, jv self, const char *name, size_t len) {
    jfunc *fn = ja_alloc(r->a, sizeof(jfunc));
    char *nm = ja_alloc(r->a, len + 1);
    if (!fn || !nm) return jr_fail(r, MU_E_NOMEM, "memory limit reached");
    memcpy(nm, name, len);
    fn->kind = JFN_METHOD;
    fn->name = nm;
    fn->self = self;
    jv v = {0};
    v.t = JV_FUNC;
    v.u.fn = fn;
    return v;
}

static jv missing(jrender *r, jv obj, const char *name, size_t len) {
    char nm[120];
    snprintf(nm, sizeof nm, "%.*s", (int)(len < 100 ? len : 100), name);
    return jv_undef_attr(r, obj, nm);
}

jv jinja_getattr(jrender *r, jv obj, const char *name, size_t len) {
    switch (obj.t) {
    case JV_DICT: {
        if (obj.flags & JF_LOOP) {
            if (len == 5 && !memcmp(name, "cycle", 5)) return bound(r, obj, name, len);
        } else if (!(obj.flags & JF_NS)) {
            if (in_names(DICT_METHODS, name, len)) return bound(r, obj, name, len);
            if (in_names(DICT_UNSAFE, name, len)) {
                char h[160];
                snprintf(h, sizeof h, "access to attribute '%.*s' of 'dict' object is unsafe.", (int)len, name);
                return jv_undef(h, r);
            }
        }
        jv *v = jv_dict_gets(obj.u.d, name, len);
        if (v) return *v;
        return missing(r, obj, name, len);
    }
    case JV_STR:
        if (in_names(STR_METHODS, name, len)) return bound(r, obj, name, len);
        return missing(r, obj, name, len);
    case JV_LIST:
        if (in_names(LIST_METHODS, name, len) && !(obj.flags & JF_TUPLE && len == 4)) return bound(r, obj, name, len);
        if (in_names(LIST_UNSAFE, name, len) && !(obj.flags & JF_TUPLE)) {
            char h[160];
            snprintf(h, sizeof h, "access to attribute '%.*s' of 'list' object is unsafe.", (int)len, name);
            return jv_undef(h, r);
        }
        return missing(r, obj, name, len);
    default:
        return missing(r, obj, name, len);
    }
}

jv jinja_getitem(jrender *r, jv obj, jv key) {
    char h[160];
    switch (obj.t) {
    case JV_DICT: {
        jv *v = jv_dict_get(obj.u.d, key);
        if (v) return *v;
        if (key.t == JV_STR) return jinja_getattr(r, obj, key.u.s->s, key.u.s->len);
        break;
    }
    case JV_LIST:
        if (key.t == JV_INT || key.t == JV_BOOL) {
            int64_t i = key.u.i, n = (int64_t)obj.u.l->n;
            if (i < 0) i += n;
            if (i >= 0 && i < n) return obj.u.l->v[i];
            snprintf(h, sizeof h, "'%s object' has no element %" PRId64, jv_type_name(obj), key.u.i);
            return jv_undef(h, r);
        }
        if (key.t == JV_STR) return jinja_getattr(r, obj, key.u.s->s, key.u.s->len);
        break;
    case JV_STR:
        if (key.t == JV_INT || key.t == JV_BOOL) {
            int64_t i = key.u.i, n = (int64_t)u8_len(obj.u.s->s, obj.u.s->len);
            if (i < 0) i += n;
            if (i >= 0 && i < n) {
                size_t off = u8_offset(obj.u.s->s, obj.u.s->len, (size_t)i), adv;
                u8_decode(obj.u.s->s + off, obj.u.s->len - off, &adv);
                return jv_strn(r, obj.u.s->s + off, adv);
            }
            snprintf(h, sizeof h, "'str object' has no element %" PRId64, key.u.i);
            return jv_undef(h, r);
        }
        if (key.t == JV_STR) return jinja_getattr(r, obj, key.u.s->s, key.u.s->len);
        break;
    default:
        if (key.t == JV_STR) return jinja_getattr(r, obj, key.u.s->s, key.u.s->len);
        break;
    }
    jbuf b = {0};
    jv_to_repr(r, &b, key);
    snprintf(h, sizeof h, "'%s object' has no attribute %.100s", jv_type_name(obj), b.p ? b.p : "");
    free(b.p);
    return jv_undef(h, r);
}

/* ------------------------------------------------------------------ methods */
static jv str_find(jrender *r, jv s, jv sub, bool rev, bool must) {
    if (sub.t != JV_STR) return jr_fail(r, MU_E_ARG, "must be str, not %s", jv_type_name(sub));
    const char *p = s.u.s->s;
    size_t n = s.u.s->len, m = sub.u.s->len;
    int64_t at = -1;
    if (!rev) {
        const char *hit = m == 0 ? p : memmem(p, n, sub.u.s->s, m);
        if (hit) at = hit - p;
    } else if (m <= n) {
        for (size_t j = n - m + 1; j-- > 0;)
            if (!memcmp(p + j, sub.u.s->s, m)) {
                at = (int64_t)j;
                break;
            }
    }
    if (at < 0) {
        if (must) return jr_fail(r, MU_E_ARG, "substring not found");
        return jv_int(-1);
    }
    return jv_int((int64_t)u8_len(p, (size_t)at));
}

static bool all_cp(jv s, bool (*pred)(int)) {
    if (s.u.s->len == 0) return false;
    size_t i = 0, adv;
    while (i < s.u.s->len) {
        int c = u8_decode(s.u.s->s + i, s.u.s->len - i, &adv);
        if (c < 0 || !pred(c)) return false;
        i += adv;
    }
    return true;
}
static bool cp_alnum(int c) { return cp_alpha(c) || cp_numeric(c); }

static int case_state(jv s, bool want_upper) {
    /* Python islower/isupper: at least one cased char and no cased char of the other case */
    size_t i = 0, adv;
    bool any = false;
    while (i < s.u.s->len) {
        int c = u8_decode(s.u.s->s + i, s.u.s->len - i, &adv);
        if (c >= 0) {
            if (want_upper ? cp_islower(c) : cp_isupper(c)) return 0;
            if (utf8proc_category(c) == UTF8PROC_CATEGORY_LT) return 0;
            if (want_upper ? cp_isupper(c) : cp_islower(c)) any = true;
        }
        i += adv;
    }
    return any;
}

static jv call_str_method(jrender *r, jv s, const char *m, jargs *a) {
    jv p[4];
    if (!strcmp(m, "strip") || !strcmp(m, "lstrip") || !strcmp(m, "rstrip")) {
        static const char *const P[] = {"chars", NULL};
        if (!bind(r, m, a, P, p)) return jv_none();
        jv chars = GIVEN(p[0]) ? p[0] : jv_none();
        if (chars.t != JV_STR && chars.t != JV_NONE)
            return jr_fail(r, MU_E_ARG, "%s arg must be None or str", m);
        return str_strip(r, s, chars, m[0] == 'l' ? 1 : m[0] == 'r' ? 2 : 3);
    }
    if (!strcmp(m, "split") || !strcmp(m, "rsplit")) {
        static const char *const P[] = {"sep", "maxsplit", NULL};
        if (!bind(r, m, a, P, p)) return jv_none();
        int64_t ms = -1;
        if (GIVEN(p[1]) && !need_int(r, p[1], "maxsplit", &ms)) return jv_none();
        jv sep = GIVEN(p[0]) ? p[0] : jv_none();
        if (sep.t != JV_STR && sep.t != JV_NONE)
            return jr_fail(r, MU_E_ARG, "must be str or None, not %s", jv_type_name(sep));
        return str_split(r, s, sep, ms, m[0] == 'r');
    }
    if (!strcmp(m, "splitlines")) {
        static const char *const P[] = {"keepends", NULL};
        if (!bind(r, m, a, P, p)) return jv_none();
        return str_splitlines(r, s, GIVEN(p[0]) && jv_truthy(p[0]));
    }
    if (!strcmp(m, "startswith") || !strcmp(m, "endswith")) {
        static const char *const P[] = {"prefix", NULL};
        if (!bind(r, m, a, P, p)) return jv_none();
        if (!GIVEN(p[0])) return jr_fail(r, MU_E_ARG, "%s() takes at least 1 argument (0 given)", m);
        bool end = m[0] == 'e';
        if (p[0].t == JV_STR) return jv_bool(str_starts(s, p[0], end));
        if (p[0].t == JV_LIST && (p[0].flags & JF_TUPLE)) {
            for (size_t i = 0; i < p[0].u.l->n; i++) {
                jv x = p[0].u.l->v[i];
                if (x.t != JV_STR) return jr_fail(r, MU_E_ARG, "tuple for %s must only contain str", m);
                if (str_starts(s, x, end)) return jv_bool(true);
            }
            return jv_bool(false);
        }
        return jr_fail(r, MU_E_ARG, "%s first arg must be str or a tuple of str, not %s", m, jv_type_name(p[0]));
    }
    if (!strcmp(m, "upper") || !strcmp(m, "lower") || !strcmp(m, "title") || !strcmp(m, "capitalize") ||
        !strcmp(m, "casefold") || !strcmp(m, "swapcase")) {
        static const char *const P[] = {NULL};
        if (!bind(r, m, a, P, p)) return jv_none();
        if (m[0] == 'u') return str_map(r, s, cp_upper);
        if (m[0] == 'l' || !strcmp(m, "casefold")) return str_map(r, s, cp_lower);
        if (m[0] == 't') return str_pytitle(r, s);
        if (m[0] == 's') {
            jbuf b = {0};
            size_t i = 0, adv;
            char enc[4];
            while (i < s.u.s->len) {
                int c = u8_decode(s.u.s->s + i, s.u.s->len - i, &adv);
                if (c < 0) jb_put(r, &b, s.u.s->s + i, 1);
                else jb_put(r, &b, enc, u8_encode(cp_isupper(c) ? cp_lower(c) : cp_islower(c) ? cp_upper(c) : c, enc));
                i += adv;
            }
            return mkstr_buf(r, &b);
        }
        return str_capitalize(r, s);
    }
    if (!strcmp(m, "replace")) {
        static const char *const P[] = {"old", "new", "count", NULL};
        if (!bind(r, m, a, P, p)) return jv_none();
        if (!GIVEN(p[0]) || !GIVEN(p[1])) return jr_fail(r, MU_E_ARG, "replace expected at least 2 arguments");
        int64_t cnt = -1;
        if (GIVEN(p[2]) && !need_int(r, p[2], "count", &cnt)) return jv_none();
        return str_replace(r, s, p[0], p[1], cnt);
    }
    if (!strcmp(m, "find") || !strcmp(m, "rfind") || !strcmp(m, "index") || !strcmp(m, "rindex")) {
        static const char *const P[] = {"sub", NULL};
        if (!bind(r, m, a, P, p)) return jv_none();
        if (!GIVEN(p[0])) return jr_fail(r, MU_E_ARG, "%s() takes at least 1 argument (0 given)", m);
        return str_find(r, s, p[0], m[0] == 'r', !strcmp(m, "index") || !strcmp(m, "rindex"));
    }
    if (!strcmp(m, "count")) {
        static const char *const P[] = {"sub", NULL};
        if (!bind(r, m, a, P, p)) return jv_none();
        if (!GIVEN(p[0]) || p[0].t != JV_STR) return jr_fail(r, MU_E_ARG, "count() needs a str argument");
        if (p[0].u.s->len == 0) return jv_int((int64_t)u8_len(s.u.s->s, s.u.s->len) + 1);
        int64_t k = 0;
        const char *q = s.u.s->s, *e = q + s.u.s->len;
        while ((q = memmem(q, (size_t)(e - q), p[0].u.s->s, p[0].u.s->len))) {
            k++;
            q += p[0].u.s->len;
        }
        return jv_int(k);
    }
    if (!strcmp(m, "join")) {
        static const char *const P[] = {"iterable", NULL};
        if (!bind(r, m, a, P, p)) return jv_none();
        if (!GIVEN(p[0])) return jr_fail(r, MU_E_ARG, "join() takes exactly one argument (0 given)");
        jv items = jinja_iterate(r, p[0]);
        if (r->failed) return items;
        for (size_t i = 0; i < items.u.l->n; i++)
            if (items.u.l->v[i].t != JV_STR)
                return jr_fail(r, MU_E_ARG, "sequence item %zu: expected str instance, %s found", i,
                               jv_type_name(items.u.l->v[i]));
        return join_values(r, items, s, NULL);
    }
    if (!strcmp(m, "format")) return str_format(r, s, a);
    if (!strcmp(m, "isdigit") || !strcmp(m, "isdecimal")) return jv_bool(all_cp(s, cp_digit));
    if (!strcmp(m, "isnumeric")) return jv_bool(all_cp(s, cp_numeric));
    if (!strcmp(m, "isalpha")) return jv_bool(all_cp(s, cp_alpha));
    if (!strcmp(m, "isalnum")) return jv_bool(all_cp(s, cp_alnum));
    if (!strcmp(m, "isspace")) return jv_bool(all_cp(s, cp_space));
    if (!strcmp(m, "islower")) return jv_bool(case_state(s, false));
    if (!strcmp(m, "isupper")) return jv_bool(case_state(s, true));
    if (!strcmp(m, "partition") || !strcmp(m, "rpartition")) {
        static const char *const P[] = {"sep", NULL};
        if (!bind(r, m, a, P, p)) return jv_none();
        if (!GIVEN(p[0]) || p[0].t != JV_STR) return jr_fail(r, MU_E_ARG, "%s() needs a str argument", m);
        if (p[0].u.s->len == 0) return jr_fail(r, MU_E_ARG, "empty separator");
        jv res = jv_list_new(r, 3);
        res.flags |= JF_TUPLE;
        const char *q = s.u.s->s;
        size_t n = s.u.s->len, sl = p[0].u.s->len;
        int64_t at = -1;
        if (m[0] == 'p') {
            const char *hit = memmem(q, n, p[0].u.s->s, sl);
            if (hit) at = hit - q;
        } else if (sl <= n) {
            for (size_t j = n - sl + 1; j-- > 0;)
                if (!memcmp(q + j, p[0].u.s->s, sl)) { at = (int64_t)j; break; }
        }
        jv empty = jv_strn(r, "", 0);
        if (at < 0) {
            if (m[0] == 'p') { jv_list_push(r, res, s); jv_list_push(r, res, empty); jv_list_push(r, res, empty); }
            else { jv_list_push(r, res, empty); jv_list_push(r, res, empty); jv_list_push(r, res, s); }
            return res;
        }
        jv_list_push(r, res, jv_strn(r, q, (size_t)at));
        jv_list_push(r, res, p[0]);
        jv_list_push(r, res, jv_strn(r, q + at + sl, n - (size_t)at - sl));
        return res;
    }
    if (!strcmp(m, "zfill")) {
        static const char *const P[] = {"width", NULL};
        int64_t w;
        if (!bind(r, m, a, P, p) || !GIVEN(p[0]) || !need_int(r, p[0], "width", &w)) return jv_none();
        int64_t len = (int64_t)u8_len(s.u.s->s, s.u.s->len);
        if (w <= len) return s;
        if (w > 1000000) return jr_fail(r, MU_E_NOMEM, "zfill width too large");
        jbuf b = {0};
        size_t st = 0;
        if (s.u.s->len && (s.u.s->s[0] == '-' || s.u.s->s[0] == '+')) { jb_put(r, &b, s.u.s->s, 1); st = 1; }
        for (int64_t i = 0; i < w - len; i++) jb_put(r, &b, "0", 1);
        jb_put(r, &b, s.u.s->s + st, s.u.s->len - st);
        return mkstr_buf(r, &b);
    }
    if (!strcmp(m, "removeprefix") || !strcmp(m, "removesuffix")) {
        static const char *const P[] = {"affix", NULL};
        if (!bind(r, m, a, P, p) || !GIVEN(p[0]) || p[0].t != JV_STR)
            return r->failed ? jv_none() : jr_fail(r, MU_E_ARG, "%s() needs a str argument", m);
        bool suf = m[6] == 's';
        if (!str_starts(s, p[0], suf)) return s;
        size_t k = p[0].u.s->len;
        return jv_strn(r, s.u.s->s + (suf ? 0 : k), s.u.s->len - k);
    }
    return jr_fail(r, MU_E_ARG, "'str' object has no attribute '%s'", m);
}

jv jinja_call_method(jrender *r, jv self, const char *m, jargs *a) {
    jv p[4];
    if (self.t == JV_STR) return call_str_method(r, self, m, a);
    if (self.t == JV_DICT && (self.flags & JF_LOOP)) { /* loop.cycle */
        if (a->n_pos == 0) return jr_fail(r, MU_E_ARG, "no items for cycling given");
        jv *i0 = jv_dict_gets(self.u.d, "index0", 6);
        return a->pos[i0 ? (size_t)i0->u.i % a->n_pos : 0];
    }
    if (self.t == JV_DICT) {
        jdict *d = self.u.d;
        if (!strcmp(m, "get")) {
            static const char *const P[] = {"key", "default", NULL};
            if (!bind(r, m, a, P, p)) return jv_none();
            if (!GIVEN(p[0])) return jr_fail(r, MU_E_ARG, "get expected at least 1 argument, got 0");
            jv *v = jv_dict_get(d, p[0]);
            if (v) return *v;
            return GIVEN(p[1]) ? p[1] : jv_none();
        }
        if (a->n_pos || a->n_kw) return jr_fail(r, MU_E_ARG, "%s() takes no arguments", m);
        if (!strcmp(m, "copy")) {
            jv c = jv_dict_new(r, d->n);
            for (size_t i = 0; i < d->n && !r->failed; i++) jv_dict_set(r, c.u.d, d->k[i], d->v[i]);
            return c;
        }
        jv l = jv_list_new(r, d->n);
        for (size_t i = 0; i < d->n && !r->failed; i++) {
            if (!strcmp(m, "keys")) jv_list_push(r, l, d->k[i]);
            else if (!strcmp(m, "values")) jv_list_push(r, l, d->v[i]);
            else {
                jv t = jv_list_new(r, 2);
                t.flags |= JF_TUPLE;
                jv_list_push(r, t, d->k[i]);
                jv_list_push(r, t, d->v[i]);
                jv_list_push(r, l, t);
            }
        }
        return l;
    }
    if (self.t == JV_LIST) {
        if (!strcmp(m, "copy")) {
            jv c = jv_list_new(r, self.u.l->n);
            for (size_t i = 0; i < self.u.l->n && !r->failed; i++) jv_list_push(r, c, self.u.l->v[i]);
            return c;
        }
        static const char *const P[] = {"value", NULL};
        if (!bind(r, m, a, P, p)) return jv_none();
        if (!GIVEN(p[0])) return jr_fail(r, MU_E_ARG, "%s() takes exactly one argument (0 given)", m);
        int64_t k = 0;
        for (size_t i = 0; i < self.u.l->n; i++)
            if (jv_equal(self.u.l->v[i], p[0])) {
                if (!strcmp(m, "index")) return jv_int((int64_t)i);
                k++;
            }
        if (!strcmp(m, "index")) return jr_fail(r, MU_E_ARG, "value is not in list");
        return jv_int(k);
    }
    return jr_fail(r, MU_E_ARG, "'%s' object has no attribute '%s'", jv_type_name(self), m);
}

/* ------------------------------------------------------------------ globals */
jv jinja_call_global(jrender *r, const char *name, jargs *a) {
    if (!strcmp(name, "raise_exception")) {
        jv msg = a->n_pos ? soft_str(r, a->pos[0]) : jv_str(r, "");
        if (r->failed) return msg;
        return jr_fail(r, MU_E_ARG, "%s", msg.u.s->s);
    }
    if (!strcmp(name, "range")) {
        int64_t v[3] = {0, 0, 1};
        if (a->n_kw) return jr_fail(r, MU_E_ARG, "range() takes no keyword arguments");
        if (a->n_pos < 1 || a->n_pos > 3) return jr_fail(r, MU_E_ARG, "range expected 1 to 3 arguments, got %zu", a->n_pos);
        for (size_t i = 0; i < a->n_pos; i++)
            if (!need_int(r, a->pos[i], "range", &v[a->n_pos == 1 ? 1 : i])) return jv_none();
        if (v[2] == 0) return jr_fail(r, MU_E_ARG, "range() arg 3 must not be zero");
        double cnt = v[2] > 0 ? ceil(((double)v[1] - (double)v[0]) / (double)v[2])
                              : ceil(((double)v[0] - (double)v[1]) / (double)-v[2]);
        if (cnt > 100000)
            return jr_fail(r, MU_E_ARG, "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
        jv l = jv_list_new(r, cnt > 0 ? (size_t)cnt : 0);
        for (int64_t x = v[0]; (v[2] > 0 ? x < v[1] : x > v[1]) && !r->failed; x += v[2]) jv_list_push(r, l, jv_int(x));
        return l;
    }
    if (!strcmp(name, "dict") || !strcmp(name, "namespace")) {
        jv d = jv_dict_new(r, a->n_kw + 4);
        if (r->failed) return d;
        if (a->n_pos > 1) return jr_fail(r, MU_E_ARG, "%s expected at most 1 argument, got %zu", name, a->n_pos);
        if (a->n_pos == 1) {
            jv src = a->pos[0];
            if (src.t == JV_DICT && !(src.flags & JF_LOOP)) {
                for (size_t i = 0; i < src.u.d->n; i++) jv_dict_set(r, d.u.d, src.u.d->k[i], src.u.d->v[i]);
            } else if (src.t == JV_LIST) {
                for (size_t i = 0; i < src.u.l->n && !r->failed; i++) {
                    jv pr = src.u.l->v[i];
                    if (pr.t != JV_LIST || pr.u.l->n != 2)
                        return jr_fail(r, MU_E_ARG, "dictionary update sequence element #%zu has wrong length", i);
                    jv_dict_set(r, d.u.d, pr.u.l->v[0], pr.u.l->v[1]);
                }
            } else
                return jr_fail(r, MU_E_ARG, "'%s' object is not iterable", jv_type_name(src));
        }
        for (size_t i = 0; i < a->n_kw && !r->failed; i++) jv_dict_sets(r, d.u.d, a->kw_names[i], a->kw[i]);
        if (name[0] == 'n') d.flags |= JF_NS;
        return d;
    }
    if (!strcmp(name, "strftime_now")) {
        if (a->n_pos != 1 || a->pos[0].t != JV_STR) return jr_fail(r, MU_E_ARG, "strftime_now() needs one format string");
        time_t t = (time_t)r->now_unix;
        struct tm tm;
        if (!localtime_r(&t, &tm)) return jr_fail(r, MU_E_ARG, "strftime_now: bad time");
        char buf[512];
        size_t n = strftime(buf, sizeof buf, a->pos[0].u.s->s, &tm);
        if (n == 0 && a->pos[0].u.s->len) return jr_fail(r, MU_E_ARG, "strftime_now: format too long");
        return jv_strn(r, buf, n);
    }
    return jr_fail(r, MU_E_ARG, "'%s' is not callable", name);
}

/* ------------------------------------------------------------------ tests */
static const char *const TESTS[] = {"defined", "undefined", "none", "string", "number", "integer", "float",
    "mapping", "iterable", "sequence", "boolean", "true", "false", "equalto", "eq", "==", "ne", "!=", "lt", "<",
    "le", "<=", "gt", ">", "ge", ">=", "lessthan", "greaterthan", "in", "odd", "even", "divisibleby", "callable",
    "sameas", "lower", "upper", "escaped", "filter", "test", NULL};

bool jinja_has_test(const char *name) { return in_names(TESTS, name, strlen(name)); }

static const char *const TESTS_WITH_ARG[] = {"equalto", "eq", "==", "ne", "!=", "lt", "<", "le", "<=", "gt", ">",
    "ge", ">=", "lessthan", "greaterthan", "in", "divisibleby", "sameas", NULL};

int jinja_test(jrender *r, const char *t, jv v, jargs *a) {
    if (!a->n_pos && !a->n_kw && in_names(TESTS_WITH_ARG, t, strlen(t))) {
        jr_fail(r, MU_E_ARG, "test '%s' missing 1 required positional argument", t);
        return -1;
    }
    jv arg = a->n_pos ? a->pos[0] : (a->n_kw ? a->kw[0] : jv_undef(NULL, r));
    if (!strcmp(t, "defined")) return v.t != JV_UNDEF;
    if (!strcmp(t, "undefined")) return v.t == JV_UNDEF;
    if (!strcmp(t, "none")) return v.t == JV_NONE;
    if (!strcmp(t, "string")) return v.t == JV_STR;
    if (!strcmp(t, "number")) return v.t == JV_INT || v.t == JV_FLOAT || v.t == JV_BOOL;
    if (!strcmp(t, "integer")) return v.t == JV_INT;
    if (!strcmp(t, "float")) return v.t == JV_FLOAT;
    if (!strcmp(t, "boolean")) return v.t == JV_BOOL;
    if (!strcmp(t, "true")) return v.t == JV_BOOL && v.u.i;
    if (!strcmp(t, "false")) return v.t == JV_BOOL && !v.u.i;
    if (!strcmp(t, "mapping")) return v.t == JV_DICT && !(v.flags & (JF_NS | JF_LOOP));
    if (!strcmp(t, "iterable")) return v.t == JV_UNDEF || v.t == JV_STR || v.t == JV_LIST ||
                                       (v.t == JV_DICT && !(v.flags & (JF_NS | JF_LOOP)));
    if (!strcmp(t, "sequence")) return v.t == JV_UNDEF || v.t == JV_STR || v.t == JV_LIST ||
                                       (v.t == JV_DICT && !(v.flags & (JF_NS | JF_LOOP)));
    if (!strcmp(t, "callable")) return v.t == JV_FUNC;
    if (!strcmp(t, "escaped")) return (v.flags & JF_SAFE) != 0;
    if (!strcmp(t, "filter")) return v.t == JV_STR && jinja_has_filter(v.u.s->s);
    if (!strcmp(t, "test")) return v.t == JV_STR && jinja_has_test(v.u.s->s);
    if (!strcmp(t, "lower") || !strcmp(t, "upper")) {
        jv s = soft_str(r, v);
        if (r->failed) return -1;
        return case_state(s, t[0] == 'u');
    }
    if (!strcmp(t, "equalto") || !strcmp(t, "eq") || !strcmp(t, "==")) return jv_equal(v, arg);
    if (!strcmp(t, "ne") || !strcmp(t, "!=")) return !jv_equal(v, arg);
    if (!strcmp(t, "sameas")) {
        if (v.t != arg.t) return 0;
        switch (v.t) {
        case JV_NONE: case JV_UNDEF: return 1;
        case JV_BOOL: return v.u.i == arg.u.i;
        case JV_INT: return v.u.i == arg.u.i && v.u.i >= -5 && v.u.i <= 256;
        case JV_STR: return v.u.s == arg.u.s;
        case JV_LIST: return v.u.l == arg.u.l;
        case JV_DICT: return v.u.d == arg.u.d;
        case JV_FUNC: return v.u.fn == arg.u.fn;
        default: return 0;
        }
    }
    if (!strcmp(t, "in")) {
        jv items;
        if (arg.t == JV_STR) {
            if (v.t != JV_STR) {
                jr_fail(r, MU_E_ARG, "'in <string>' requires string as left operand, not %s", jv_type_name(v));
                return -1;
            }
            return memmem(arg.u.s->s, arg.u.s->len, v.u.s->s, v.u.s->len) != NULL || v.u.s->len == 0;
        }
        if (arg.t == JV_DICT) return jv_dict_get(arg.u.d, v) != NULL;
        items = jinja_iterate(r, arg);
        if (r->failed) return -1;
        for (size_t i = 0; i < items.u.l->n; i++)
            if (jv_equal(items.u.l->v[i], v)) return 1;
        return 0;
    }
    int c;
    if (!strcmp(t, "lt") || !strcmp(t, "<") || !strcmp(t, "lessthan")) return (c = jv_compare(r, v, arg)) == -2 ? -1 : c < 0;
    if (!strcmp(t, "le") || !strcmp(t, "<=")) return (c = jv_compare(r, v, arg)) == -2 ? -1 : c <= 0;
    if (!strcmp(t, "gt") || !strcmp(t, ">") || !strcmp(t, "greaterthan")) return (c = jv_compare(r, v, arg)) == -2 ? -1 : c > 0;
    if (!strcmp(t, "ge") || !strcmp(t, ">=")) return (c = jv_compare(r, v, arg)) == -2 ? -1 : c >= 0;
    if (!strcmp(t, "odd") || !strcmp(t, "even") || !strcmp(t, "divisibleby")) {
        if (v.t == JV_UNDEF) { jr_fail(r, MU_E_ARG, "%s", v.u.s ? v.u.s->s : "undefined value"); return -1; }
        if (v.t == JV_FLOAT || (t[0] == 'd' && arg.t == JV_FLOAT)) {
            double x = v.t == JV_FLOAT ? v.u.f : (double)v.u.i;
            double m = t[0] == 'd' ? (arg.t == JV_FLOAT ? arg.u.f : (double)arg.u.i) : 2.0;
            if (m == 0) { jr_fail(r, MU_E_ARG, "float modulo"); return -1; }
            double rem = fmod(x, m);
            return t[0] == 'o' ? rem != 0 : rem == 0;
        }
        if (v.t != JV_INT && v.t != JV_BOOL) {
            jr_fail(r, MU_E_ARG, "not all arguments converted during string formatting");
            return -1;
        }
        if (t[0] == 'd') {
            if (arg.t != JV_INT && arg.t != JV_BOOL) { jr_fail(r, MU_E_ARG, "divisibleby needs a number"); return -1; }
            if (arg.u.i == 0) { jr_fail(r, MU_E_ARG, "integer division or modulo by zero"); return -1; }
            return arg.u.i == -1 ? 1 : v.u.i % arg.u.i == 0;
        }
        return t[0] == 'o' ? (v.u.i % 2 != 0) : (v.u.i % 2 == 0);
    }
    jr_fail(r, MU_E_ARG, "No test named '%s'.", t);
    return -1;
}

/* ------------------------------------------------------------------ filters */
static const char *const FILTERS[] = {"trim", "length", "count", "upper", "lower", "tojson", "string", "int",
    "float", "join", "default", "d", "first", "last", "list", "map", "selectattr", "rejectattr", "select",
    "reject", "safe", "indent", "replace", "capitalize", "title", "unique", "sort", "dictsort", "items", "abs",
    "round", "e", "escape", "forceescape", "wordcount", "sum", "min", "max", "reverse", "attr", "batch",
    "center", "truncate", "striptags", NULL};

bool jinja_has_filter(const char *name) { return in_names(FILTERS, name, strlen(name)); }

/* key for sorting/unique: attribute lookup and case folding of strings */
static jv sort_key(jrender *r, jv x, const char *attr, bool case_sensitive) {
    if (attr) {
        /* dotted attribute path, integer parts index */
        const char *p = attr;
        while (*p && !r->failed) {
            const char *dot = strchr(p, '.');
            size_t len = dot ? (size_t)(dot - p) : strlen(p);
            bool digits = len > 0;
            for (size_t i = 0; i < len; i++) digits = digits && p[i] >= '0' && p[i] <= '9';
            if (digits) x = jinja_getitem(r, x, jv_int(strtoll(p, NULL, 10)));
            else {
                jv k = jv_strn(r, p, len);
                x = jinja_getitem(r, x, k);
            }
            if (!dot) break;
            p = dot + 1;
        }
    }
    if (!case_sensitive && x.t == JV_STR) return str_map(r, x, cp_lower);
    return x;
}

static void sort_values(jrender *r, jv *v, jv *keys, size_t n, bool reverse) {
    /* stable insertion-merge: simple stable insertion sort (lists in templates are small) */
    for (size_t i = 1; i < n && !r->failed; i++) {
        jv x = v[i], kx = keys[i];
        size_t j = i;
        while (j > 0) {
            int c = jv_compare(r, kx, keys[j - 1]);
            if (c == -2) return;
            if (reverse ? c > 0 : c < 0) {
                v[j] = v[j - 1];
                keys[j] = keys[j - 1];
                j--;
            } else
                break;
        }
        v[j] = x;
        keys[j] = kx;
    }
}

static jv copy_list(jrender *r, jv items) {
    jv l = jv_list_new(r, items.u.l->n);
    for (size_t i = 0; i < items.u.l->n && !r->failed; i++) jv_list_push(r, l, items.u.l->v[i]);
    return l;
}

/* select/reject/selectattr/rejectattr */
static jv select_impl(jrender *r, jv seq, jargs *a, bool attr_mode, bool want) {
    jv items = jinja_iterate(r, seq);
    if (r->failed) return items;
    size_t k = 0;
    const char *attr = NULL;
    if (attr_mode) {
        if (a->n_pos < 1 || a->pos[0].t != JV_STR) {
            if (items.u.l->n == 0) return jv_list_new(r, 0); /* Jinja2 checks lazily */
            return jr_fail(r, MU_E_ARG, "Missing parameter for attribute name");
        }
        attr = a->pos[0].u.s->s;
        k = 1;
    }
    const char *test = NULL;
    if (a->n_pos > k) {
        if (a->pos[k].t != JV_STR) return jr_fail(r, MU_E_ARG, "test name must be a string");
        test = a->pos[k].u.s->s;
        /* like Jinja2, the test is looked up per item: an empty sequence never fails */
        if (!jinja_has_test(test) && items.u.l->n) return jr_fail(r, MU_E_ARG, "No test named '%s'.", test);
    }
    jargs ta = {0};
    if (a->n_pos > k + 1) {
        ta.pos = a->pos + k + 1;
        ta.n_pos = a->n_pos - k - 1;
    }
    jv out = jv_list_new(r, items.u.l->n);
    for (size_t i = 0; i < items.u.l->n && !r->failed; i++) {
        jv x = items.u.l->v[i];
        jv y = attr ? sort_key(r, x, attr, true) : x;
        int t = test ? jinja_test(r, test, y, &ta) : jv_truthy(y);
        if (t < 0) return jv_none();
        if ((t != 0) == want) jv_list_push(r, out, x);
    }
    return out;
}

static jv do_round(jrender *r, jv v, int64_t prec, const char *method) {
    if (v.t != JV_INT && v.t != JV_FLOAT && v.t != JV_BOOL)
        return jr_fail(r, MU_E_ARG, "type %s doesn't define __round__ method", jv_type_name(v));
    if (!strcmp(method, "common")) {
        if (v.t != JV_FLOAT) return jv_int(v.u.i);
        if (!isfinite(v.u.f)) return v;
        if (prec < 0 || prec > 300) return jr_fail(r, MU_E_UNSUPPORTED, "round precision out of range");
        char buf[400];
        snprintf(buf, sizeof buf, "%.*f", (int)prec, v.u.f);
        return jv_float(strtod(buf, NULL));
    }
    double x = v.t == JV_FLOAT ? v.u.f : (double)v.u.i;
    double m = pow(10.0, (double)prec);
    if (!strcmp(method, "ceil")) return jv_float(ceil(x * m) / m);
    if (!strcmp(method, "floor")) return jv_float(floor(x * m) / m);
    return jr_fail(r, MU_E_ARG, "method must be common, ceil or floor");
}

static jv to_int(jrender *r, jv v, jv def, int64_t base) {
    if (v.t == JV_INT || v.t == JV_BOOL) return jv_int(v.u.i);
    if (v.t == JV_FLOAT) {
        if (!isfinite(v.u.f) || fabs(v.u.f) >= 9.2e18) return def;
        return jv_int((int64_t)v.u.f);
    }
    if (v.t == JV_UNDEF) return jr_fail(r, MU_E_ARG, "%s", v.u.s ? v.u.s->s : "undefined value");
    if (v.t == JV_STR) {
        char buf[128];
        size_t n = v.u.s->len;
        const char *s = v.u.s->s;
        while (n && cp_space((unsigned char)*s)) { s++; n--; }
        while (n && cp_space((unsigned char)s[n - 1])) n--;
        if (n == 0 || n >= sizeof buf) return def;
        size_t k = 0;
        for (size_t i = 0; i < n; i++)
            if (s[i] != '_') buf[k++] = s[i];
        buf[k] = 0;
        char *end;
        errno = 0;
        long long x = strtoll(buf, &end, (int)base);
        if (*end == 0 && !errno && end != buf) return jv_int(x);
        double f = strtod(buf, &end);
        if (*end == 0 && end != buf && isfinite(f) && fabs(f) < 9.2e18 && !strchr(buf, 'x') && !strchr(buf, 'X'))
            return jv_int((int64_t)f);
        return def;
    }
    return def;
}

static jv to_float(jrender *r, jv v, jv def) {
    if (v.t == JV_FLOAT) return v;
    if (v.t == JV_INT || v.t == JV_BOOL) return jv_float((double)v.u.i);
    if (v.t == JV_UNDEF) return jr_fail(r, MU_E_ARG, "%s", v.u.s ? v.u.s->s : "undefined value");
    if (v.t == JV_STR) {
        char buf[128];
        size_t n = v.u.s->len;
        const char *s = v.u.s->s;
        while (n && cp_space((unsigned char)*s)) { s++; n--; }
        while (n && cp_space((unsigned char)s[n - 1])) n--;
        if (n == 0 || n >= sizeof buf) return def;
        memcpy(buf, s, n);
        buf[n] = 0;
        if (strchr(buf, 'x') || strchr(buf, 'X')) return def;
        char *end;
        double f = strtod(buf, &end);
        if (*end == 0 && end != buf) return jv_float(f);
    }
    return def;
}

static jv do_indent(jrender *r, jv s, jv width, bool first, bool blank) {
    jv ind;
    if (width.t == JV_STR) ind = width;
    else {
        int64_t w = 4;
        if (width.t != 0xff && !need_int(r, width, "width", &w)) return jv_none();
        if (w < 0) w = 0;
        if (w > 10000) return jr_fail(r, MU_E_NOMEM, "indent width too large");
        char *sp = malloc((size_t)w + 1);
        if (!sp) return jr_fail(r, MU_E_NOMEM, "out of memory");
        memset(sp, ' ', (size_t)w);
        ind = jv_strn(r, sp, (size_t)w);
        free(sp);
    }
    jbuf t = {0};
    jb_put(r, &t, s.u.s->s, s.u.s->len);
    jb_put(r, &t, "\n", 1);
    jv ss = mkstr_buf(r, &t);
    if (r->failed) return ss;
    jv lines = str_splitlines(r, ss, false);
    jbuf b = {0};
    if (first) jb_put(r, &b, ind.u.s->s, ind.u.s->len);
    for (size_t i = 0; i < lines.u.l->n && !r->failed; i++) {
        jv ln = lines.u.l->v[i];
        if (i) {
            jb_put(r, &b, "\n", 1);
            if (blank || ln.u.s->len) jb_put(r, &b, ind.u.s->s, ind.u.s->len);
        }
        jb_put(r, &b, ln.u.s->s, ln.u.s->len);
    }
    return mkstr_buf(r, &b);
}

jv jinja_filter(jrender *r, const char *f, jv v, jargs *a) {
    jv p[6];
    if (!strcmp(f, "default") || !strcmp(f, "d")) {
        static const char *const P[] = {"default_value", "boolean", NULL};
        if (!bind(r, f, a, P, p)) return jv_none();
        jv def = GIVEN(p[0]) ? p[0] : jv_strn(r, "", 0);
        bool boolean = GIVEN(p[1]) && jv_truthy(p[1]);
        if (v.t == JV_UNDEF || (boolean && !jv_truthy(v))) return def;
        return v;
    }
    if (!strcmp(f, "length") || !strcmp(f, "count")) {
        switch (v.t) {
        case JV_UNDEF: return jv_int(0);
        case JV_STR: return jv_int((int64_t)u8_len(v.u.s->s, v.u.s->len));
        case JV_LIST: return jv_int((int64_t)v.u.l->n);
        case JV_DICT: if (!(v.flags & (JF_NS | JF_LOOP))) return jv_int((int64_t)v.u.d->n); break;
        default: break;
        }
        return jr_fail(r, MU_E_ARG, "object of type '%s' has no len()", jv_type_name(v));
    }
    if (!strcmp(f, "tojson")) {
        static const char *const P[] = {"ensure_ascii", "indent", "separators", "sort_keys", NULL};
        if (!bind(r, f, a, P, p)) return jv_none();
        const char *indent = NULL;
        char spaces[64];
        if (GIVEN(p[1]) && p[1].t != JV_NONE) {
            if (p[1].t == JV_STR) indent = p[1].u.s->s;
            else {
                int64_t w;
                if (!need_int(r, p[1], "indent", &w)) return jv_none();
                if (w < 0) w = 0;
                if (w > 60) return jr_fail(r, MU_E_UNSUPPORTED, "tojson indent larger than 60");
                memset(spaces, ' ', (size_t)w);
                spaces[w] = 0;
                indent = spaces;
            }
        }
        const char *isep = indent ? "," : ", ", *ksep = ": ";
        if (GIVEN(p[2]) && p[2].t != JV_NONE) {
            if (p[2].t != JV_LIST || p[2].u.l->n != 2 || p[2].u.l->v[0].t != JV_STR || p[2].u.l->v[1].t != JV_STR)
                return jr_fail(r, MU_E_ARG, "tojson separators must be a pair of strings");
            isep = p[2].u.l->v[0].u.s->s;
            ksep = p[2].u.l->v[1].u.s->s;
        }
        jbuf b = {0};
        r->json_ascii = GIVEN(p[0]) && jv_truthy(p[0]);
        jv_to_json(r, &b, v, indent, isep, ksep, GIVEN(p[3]) && jv_truthy(p[3]), 0);
        r->json_ascii = false;
        return mkstr_buf(r, &b);
    }
    if (!strcmp(f, "safe")) {
        jv s = soft_str(r, v);
        s.flags |= JF_SAFE;
        return s;
    }
    if (!strcmp(f, "string")) return v.t == JV_STR ? v : soft_str(r, v);
    if (!strcmp(f, "e") || !strcmp(f, "escape")) return html_escape(r, v);
    if (!strcmp(f, "forceescape")) {
        v.flags &= (uint8_t)~JF_SAFE;
        return html_escape(r, v);
    }
    if (!strcmp(f, "trim")) {
        static const char *const P[] = {"chars", NULL};
        if (!bind(r, f, a, P, p)) return jv_none();
        jv s = soft_str(r, v);
        if (r->failed) return s;
        return str_strip(r, s, GIVEN(p[0]) ? p[0] : jv_none(), 3);
    }
    if (!strcmp(f, "upper") || !strcmp(f, "lower") || !strcmp(f, "capitalize") || !strcmp(f, "title")) {
        jv s = soft_str(r, v);
        if (r->failed) return s;
        if (f[0] == 'u') return str_map(r, s, cp_upper);
        if (f[0] == 'l') return str_map(r, s, cp_lower);
        if (f[0] == 'c') return str_capitalize(r, s);
        return str_jtitle(r, s);
    }
    if (!strcmp(f, "replace")) {
        static const char *const P[] = {"old", "new", "count", NULL};
        if (!bind(r, f, a, P, p)) return jv_none();
        if (!GIVEN(p[0]) || !GIVEN(p[1])) return jr_fail(r, MU_E_ARG, "replace filter needs old and new");
        jv s = soft_str(r, v);
        int64_t cnt = -1;
        if (GIVEN(p[2]) && p[2].t != JV_NONE && !need_int(r, p[2], "count", &cnt)) return jv_none();
        if (r->failed) return s;
        jv o = soft_str(r, p[0]), nw = soft_str(r, p[1]);
        return str_replace(r, s, o, nw, cnt);
    }
    if (!strcmp(f, "int")) {
        static const char *const P[] = {"default", "base", NULL};
        if (!bind(r, f, a, P, p)) return jv_none();
        int64_t base = 10;
        if (GIVEN(p[1]) && !need_int(r, p[1], "base", &base)) return jv_none();
        if (base < 2 || base > 36) return jr_fail(r, MU_E_ARG, "int() base must be >= 2 and <= 36");
        return to_int(r, v, GIVEN(p[0]) ? p[0] : jv_int(0), base);
    }
    if (!strcmp(f, "float")) {
        static const char *const P[] = {"default", NULL};
        if (!bind(r, f, a, P, p)) return jv_none();
        return to_float(r, v, GIVEN(p[0]) ? p[0] : jv_float(0.0));
    }
    if (!strcmp(f, "abs")) {
        if (v.t == JV_FLOAT) return jv_float(fabs(v.u.f));
        if (v.t == JV_INT || v.t == JV_BOOL) {
            if (v.u.i == INT64_MIN) return jr_fail(r, MU_E_ARG, "integer overflow");
            return jv_int(v.u.i < 0 ? -v.u.i : v.u.i);
        }
        return jr_fail(r, MU_E_ARG, "bad operand type for abs(): '%s'", jv_type_name(v));
    }
    if (!strcmp(f, "round")) {
        static const char *const P[] = {"precision", "method", NULL};
        if (!bind(r, f, a, P, p)) return jv_none();
        int64_t prec = 0;
        if (GIVEN(p[0]) && !need_int(r, p[0], "precision", &prec)) return jv_none();
        const char *method = GIVEN(p[1]) && p[1].t == JV_STR ? p[1].u.s->s : "common";
        jv res = do_round(r, v, prec, method);
        if (!r->failed && !strcmp(method, "common") && v.t != JV_FLOAT) return res;
        if (!r->failed && res.t == JV_INT) return jv_float((double)res.u.i);
        return res;
    }
    if (!strcmp(f, "join")) {
        static const char *const P[] = {"d", "attribute", NULL};
        if (!bind(r, f, a, P, p)) return jv_none();
        jv sep = GIVEN(p[0]) ? soft_str(r, p[0]) : jv_strn(r, "", 0);
        const char *attr = GIVEN(p[1]) && p[1].t == JV_STR ? p[1].u.s->s : NULL;
        return join_values(r, v, sep, attr);
    }
    if (!strcmp(f, "first") || !strcmp(f, "last")) {
        jv items = jinja_iterate(r, v);
        if (r->failed) return items;
        if (items.u.l->n == 0) return jv_undef(f[0] == 'f' ? "No first item, sequence was empty." : "No last item, sequence was empty.", r);
        return items.u.l->v[f[0] == 'f' ? 0 : items.u.l->n - 1];
    }
    if (!strcmp(f, "list")) {
        jv items = jinja_iterate(r, v);
        if (r->failed) return items;
        return copy_list(r, items);
    }
    if (!strcmp(f, "reverse")) {
        if (v.t == JV_STR) {
            jv items = jinja_iterate(r, v);
            jbuf b = {0};
            for (size_t i = items.u.l->n; i-- > 0 && !r->failed;)
                jb_put(r, &b, items.u.l->v[i].u.s->s, items.u.l->v[i].u.s->len);
            return mkstr_buf(r, &b);
        }
        jv items = jinja_iterate(r, v);
        if (r->failed) return items;
        jv l = jv_list_new(r, items.u.l->n);
        for (size_t i = items.u.l->n; i-- > 0 && !r->failed;) jv_list_push(r, l, items.u.l->v[i]);
        return l;
    }
    if (!strcmp(f, "items")) {
        if (v.t == JV_UNDEF) return jv_list_new(r, 0);
        if (v.t != JV_DICT || (v.flags & (JF_NS | JF_LOOP)))
            return jr_fail(r, MU_E_ARG, "Can only get item pairs from a mapping.");
        jargs none = {0};
        return jinja_call_method(r, v, "items", &none);
    }
    if (!strcmp(f, "dictsort")) {
        static const char *const P[] = {"case_sensitive", "by", "reverse", NULL};
        if (!bind(r, f, a, P, p)) return jv_none();
        if (v.t != JV_DICT) return jr_fail(r, MU_E_ARG, "You can only sort by either \"key\" or \"value\"");
        bool cs = GIVEN(p[0]) && jv_truthy(p[0]), rev = GIVEN(p[2]) && jv_truthy(p[2]);
        int pos = 0;
        if (GIVEN(p[1]) && p[1].t == JV_STR) {
            if (!strcmp(p[1].u.s->s, "value")) pos = 1;
            else if (strcmp(p[1].u.s->s, "key")) return jr_fail(r, MU_E_ARG, "You can only sort by either \"key\" or \"value\"");
        }
        jargs none = {0};
        jv items = jinja_call_method(r, v, "items", &none);
        if (r->failed) return items;
        size_t n = items.u.l->n;
        jv *keys = ja_alloc(r->a, (n + 1) * sizeof(jv));
        if (!keys) return jr_fail(r, MU_E_NOMEM, "memory limit reached");
        for (size_t i = 0; i < n; i++) keys[i] = sort_key(r, items.u.l->v[i].u.l->v[pos], NULL, cs);
        sort_values(r, items.u.l->v, keys, n, rev);
        return items;
    }
    if (!strcmp(f, "sort") || !strcmp(f, "unique") || !strcmp(f, "min") || !strcmp(f, "max")) {
        static const char *const PS[] = {"reverse", "case_sensitive", "attribute", NULL};
        static const char *const PU[] = {"case_sensitive", "attribute", NULL};
        bool is_sort = f[0] == 's';
        if (!bind(r, f, a, is_sort ? PS : PU, p)) return jv_none();
        jv *q = is_sort ? p + 1 : p;
        bool cs = GIVEN(q[0]) && jv_truthy(q[0]);
        const char *attr = GIVEN(q[1]) && q[1].t == JV_STR ? q[1].u.s->s : NULL;
        jv items = jinja_iterate(r, v);
        if (r->failed) return items;
        jv l = copy_list(r, items);
        size_t n = l.u.l->n;
        jv *keys = ja_alloc(r->a, (n + 1) * sizeof(jv));
        if (!keys) return jr_fail(r, MU_E_NOMEM, "memory limit reached");
        for (size_t i = 0; i < n && !r->failed; i++) keys[i] = sort_key(r, l.u.l->v[i], attr, cs);
        if (r->failed) return jv_none();
        if (f[0] == 'u') {
            jv out = jv_list_new(r, n);
            jv seen = jv_list_new(r, n);
            for (size_t i = 0; i < n && !r->failed; i++) {
                bool dup = false;
                for (size_t j = 0; j < seen.u.l->n; j++)
                    if (jv_equal(seen.u.l->v[j], keys[i])) { dup = true; break; }
                if (!dup) {
                    jv_list_push(r, seen, keys[i]);
                    jv_list_push(r, out, l.u.l->v[i]);
                }
            }
            return out;
        }
        if (f[1] == 'i' || f[1] == 'a') {
            if (n == 0) return jv_undef("No aggregated item, sequence was empty.", r);
            size_t best = 0;
            for (size_t i = 1; i < n; i++) {
                int c = jv_compare(r, keys[i], keys[best]);
                if (c == -2) return jv_none();
                if (f[1] == 'i' ? c < 0 : c > 0) best = i;
            }
            return l.u.l->v[best];
        }
        sort_values(r, l.u.l->v, keys, n, GIVEN(p[0]) && jv_truthy(p[0]));
        return l;
    }
    if (!strcmp(f, "map")) {
        jv items = jinja_iterate(r, v);
        if (r->failed) return items;
        jv out = jv_list_new(r, items.u.l->n);
        const char *attr = NULL;
        jv def = {0};
        bool has_def = false;
        for (size_t k = 0; k < a->n_kw; k++) {
            if (!strcmp(a->kw_names[k], "attribute") && a->kw[k].t == JV_STR) attr = a->kw[k].u.s->s;
            else if (!strcmp(a->kw_names[k], "default")) { def = a->kw[k]; has_def = true; }
        }
        if (attr) {
            for (size_t i = 0; i < items.u.l->n && !r->failed; i++) {
                jv x = sort_key(r, items.u.l->v[i], attr, true);
                if (x.t == JV_UNDEF && has_def) x = def;
                jv_list_push(r, out, x);
            }
            return out;
        }
        if (a->n_pos < 1 || a->pos[0].t != JV_STR) return jr_fail(r, MU_E_ARG, "map requires a filter argument");
        const char *fname = a->pos[0].u.s->s;
        if (!jinja_has_filter(fname) && items.u.l->n) return jr_fail(r, MU_E_ARG, "No filter named '%s'.", fname);
        jargs fa = {.pos = a->pos + 1, .n_pos = a->n_pos - 1, .kw_names = a->kw_names, .kw = a->kw, .n_kw = a->n_kw};
        for (size_t i = 0; i < items.u.l->n && !r->failed; i++)
            jv_list_push(r, out, jinja_filter(r, fname, items.u.l->v[i], &fa));
        return out;
    }
    if (!strcmp(f, "select")) return select_impl(r, v, a, false, true);
    if (!strcmp(f, "reject")) return select_impl(r, v, a, false, false);
    if (!strcmp(f, "selectattr")) return select_impl(r, v, a, true, true);
    if (!strcmp(f, "rejectattr")) return select_impl(r, v, a, true, false);
    if (!strcmp(f, "indent")) {
        static const char *const P[] = {"width", "first", "blank", NULL};
        if (!bind(r, f, a, P, p)) return jv_none();
        jv s = soft_str(r, v);
        if (r->failed) return s;
        return do_indent(r, s, p[0], GIVEN(p[1]) && jv_truthy(p[1]), GIVEN(p[2]) && jv_truthy(p[2]));
    }
    if (!strcmp(f, "wordcount")) {
        jv s = soft_str(r, v);
        if (r->failed) return s;
        int64_t k = 0;
        bool in = false;
        size_t i = 0, adv;
        while (i < s.u.s->len) {
            int c = u8_decode(s.u.s->s + i, s.u.s->len - i, &adv);
            bool w = c >= 0 && (cp_alnum(c) || c == '_');
            if (w && !in) k++;
            in = w;
            i += adv;
        }
        return jv_int(k);
    }
    if (!strcmp(f, "sum")) {
        static const char *const P[] = {"attribute", "start", NULL};
        if (!bind(r, f, a, P, p)) return jv_none();
        jv items = jinja_iterate(r, v);
        if (r->failed) return items;
        jv acc = GIVEN(p[1]) ? p[1] : jv_int(0);
        const char *attr = GIVEN(p[0]) && p[0].t == JV_STR ? p[0].u.s->s : NULL;
        for (size_t i = 0; i < items.u.l->n && !r->failed; i++) {
            jv x = attr ? sort_key(r, items.u.l->v[i], attr, true) : items.u.l->v[i];
            bool num = (x.t == JV_INT || x.t == JV_FLOAT || x.t == JV_BOOL) &&
                       (acc.t == JV_INT || acc.t == JV_FLOAT || acc.t == JV_BOOL);
            if (!num) return jr_fail(r, MU_E_ARG, "unsupported operand type(s) for +: '%s' and '%s'", jv_type_name(acc), jv_type_name(x));
            if (acc.t == JV_FLOAT || x.t == JV_FLOAT)
                acc = jv_float((acc.t == JV_FLOAT ? acc.u.f : (double)acc.u.i) + (x.t == JV_FLOAT ? x.u.f : (double)x.u.i));
            else {
                int64_t z;
                if (__builtin_add_overflow(acc.u.i, x.u.i, &z)) return jr_fail(r, MU_E_ARG, "integer overflow");
                acc = jv_int(z);
            }
        }
        return acc;
    }
    if (!strcmp(f, "attr")) {
        if (a->n_pos != 1 || a->pos[0].t != JV_STR) return jr_fail(r, MU_E_ARG, "attr filter needs a name");
        if (v.t == JV_DICT && !(v.flags & (JF_NS | JF_LOOP))) {
            /* Jinja's attr() only looks at attributes, never at keys */
            jv m = jinja_getattr(r, v, a->pos[0].u.s->s, a->pos[0].u.s->len);
            if (m.t == JV_FUNC) return m;
            return jv_undef_attr(r, v, a->pos[0].u.s->s);
        }
        return jinja_getattr(r, v, a->pos[0].u.s->s, a->pos[0].u.s->len);
    }
    if (!strcmp(f, "batch")) {
        static const char *const P[] = {"linecount", "fill_with", NULL};
        int64_t k;
        if (!bind(r, f, a, P, p) || !GIVEN(p[0]) || !need_int(r, p[0], "linecount", &k)) return jv_none();
        if (k <= 0) return jr_fail(r, MU_E_ARG, "batch size must be positive");
        jv items = jinja_iterate(r, v);
        if (r->failed) return items;
        jv out = jv_list_new(r, 4), cur = jv_list_new(r, (size_t)(k < 64 ? k : 64));
        for (size_t i = 0; i < items.u.l->n && !r->failed; i++) {
            jv_list_push(r, cur, items.u.l->v[i]);
            if ((int64_t)cur.u.l->n == k) {
                jv_list_push(r, out, cur);
                cur = jv_list_new(r, (size_t)(k < 64 ? k : 64));
            }
        }
        if (cur.u.l->n) {
            if (GIVEN(p[1]))
                while ((int64_t)cur.u.l->n < k && !r->failed) jv_list_push(r, cur, p[1]);
            jv_list_push(r, out, cur);
        }
        return out;
    }
    if (!strcmp(f, "center")) {
        static const char *const P[] = {"width", NULL};
        int64_t w = 80;
        if (!bind(r, f, a, P, p) || (GIVEN(p[0]) && !need_int(r, p[0], "width", &w))) return jv_none();
        jv s = soft_str(r, v);
        if (r->failed) return s;
        int64_t len = (int64_t)u8_len(s.u.s->s, s.u.s->len);
        if (w <= len) return s;
        if (w > 100000) return jr_fail(r, MU_E_NOMEM, "center width too large");
        int64_t marg = w - len, left = marg / 2 + (marg & w & 1);
        jbuf b = {0};
        for (int64_t i = 0; i < left; i++) jb_put(r, &b, " ", 1);
        jb_put(r, &b, s.u.s->s, s.u.s->len);
        for (int64_t i = 0; i < marg - left; i++) jb_put(r, &b, " ", 1);
        return mkstr_buf(r, &b);
    }
    if (!strcmp(f, "truncate") || !strcmp(f, "striptags"))
        return jr_fail(r, MU_E_UNSUPPORTED, "filter '%s' is not supported", f);
    return jr_fail(r, MU_E_ARG, "No filter named '%s'.", f);
}
