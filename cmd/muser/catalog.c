/* catalog.c: the parser of models/catalog.tsv (docs/up.md, "Catalog").
 * Owns: validation of every line (name, size, hash, license, source) and
 * lookup by name. Does not own: where the file lives or what is done with an
 * entry (up.c). Design: libc only and no allocation, so the fuzz harness
 * (tests/fuzz/fuzz_catalog.c) runs it on any bytes. */
#include "catalog.h"

#include <stdio.h>
#include <string.h>

bool catalog_sha_ok(const char *s, char out[65]) {
    for (int i = 0; i < 64; i++) {
        char c = s[i];
        if (c >= 'A' && c <= 'F') c = (char)(c - 'A' + 'a');
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
        out[i] = c;
    }
    if (s[64]) return false;
    out[64] = 0;
    return true;
}

/* A field: [p, p+n). */
typedef struct {
    const char *p;
    size_t n;
} field;

static bool name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.';
}

static bool printable(const field *f) {
    for (size_t i = 0; i < f->n; i++)
        if ((unsigned char)f->p[i] < 0x20 || f->p[i] == 0x7f) return false;
    return true;
}

/* Copies a field for an error message (at most 40 bytes shown). */
static const char *shown(const field *f, char *buf, size_t cap) {
    size_t n = f->n < 40 ? f->n : 40;
    if (n >= cap) n = cap - 1;
    memcpy(buf, f->p, n);
    buf[n] = 0;
    return buf;
}

/* Parses one non-comment line into e. Returns 0 or MU_E_FORMAT. */
static int parse_line(const char *p, size_t n, int lineno, catalog_entry *e, mu_err *err) {
    field f[5];
    int nf = 0;
    size_t start = 0;
    char tmp[48];
    for (size_t i = 0; i <= n; i++) {
        if (i == n || p[i] == '\t') {
            if (nf == 5) return mu_fail(err, MU_E_FORMAT, "catalog: line %d: more than 5 tab-separated fields", lineno);
            f[nf++] = (field){p + start, i - start};
            start = i + 1;
        }
    }
    if (nf != 5) return mu_fail(err, MU_E_FORMAT, "catalog: line %d: expected 5 tab-separated fields, found %d", lineno, nf);
    memset(e, 0, sizeof *e);
    /* name */
    if (f[0].n == 0 || f[0].n > CATALOG_NAME_MAX)
        return mu_fail(err, MU_E_FORMAT, "catalog: line %d: name must be 1..%d characters", lineno, CATALOG_NAME_MAX);
    for (size_t i = 0; i < f[0].n; i++)
        if (!name_char(f[0].p[i]))
            return mu_fail(err, MU_E_FORMAT, "catalog: line %d: name may hold only a-z 0-9 . _ -: %s", lineno,
                           printable(&f[0]) ? shown(&f[0], tmp, sizeof tmp) : "(control bytes)");
    memcpy(e->name, f[0].p, f[0].n);
    /* bytes */
    uint64_t v = 0;
    if (f[1].n == 0 || f[1].n > 16)
        return mu_fail(err, MU_E_FORMAT, "catalog: line %d: size must be 1..16 decimal digits", lineno);
    for (size_t i = 0; i < f[1].n; i++) {
        char c = f[1].p[i];
        if (c < '0' || c > '9') return mu_fail(err, MU_E_FORMAT, "catalog: line %d: size is not a decimal number", lineno);
        v = v * 10 + (uint64_t)(c - '0');
    }
    if (v == 0) return mu_fail(err, MU_E_FORMAT, "catalog: line %d: size is 0", lineno);
    e->bytes = v;
    /* sha256 */
    char hex[65];
    if (f[2].n != 64) return mu_fail(err, MU_E_FORMAT, "catalog: line %d: sha256 must be 64 hex digits", lineno);
    memcpy(hex, f[2].p, 64);
    hex[64] = 0;
    if (!catalog_sha_ok(hex, e->sha256))
        return mu_fail(err, MU_E_FORMAT, "catalog: line %d: sha256 must be 64 hex digits", lineno);
    /* license */
    if (f[3].n == 0 || f[3].n >= sizeof e->license || !printable(&f[3]))
        return mu_fail(err, MU_E_FORMAT, "catalog: line %d: license must be 1..%zu printable characters", lineno,
                       sizeof e->license - 1);
    memcpy(e->license, f[3].p, f[3].n);
    /* source: bundled:PATH, or URLs separated by spaces */
    field s = f[4];
    if (s.n == 0 || !printable(&s)) return mu_fail(err, MU_E_FORMAT, "catalog: line %d: empty or unprintable source", lineno);
    if (s.n > 8 && !memcmp(s.p, "bundled:", 8)) {
        field path = {s.p + 8, s.n - 8};
        if (path.n == 0 || path.n > CATALOG_URL_MAX || path.p[0] == '/' || memchr(path.p, ' ', path.n))
            return mu_fail(err, MU_E_FORMAT, "catalog: line %d: bundled path must be relative, without spaces", lineno);
        for (size_t i = 0; i + 1 < path.n; i++)
            if (path.p[i] == '.' && path.p[i + 1] == '.')
                return mu_fail(err, MU_E_FORMAT, "catalog: line %d: bundled path may not contain '..'", lineno);
        e->bundled = true;
        memcpy(e->path, path.p, path.n);
        return 0;
    }
    size_t i = 0;
    while (i < s.n) {
        while (i < s.n && s.p[i] == ' ') i++;
        if (i == s.n) break;
        size_t j = i;
        while (j < s.n && s.p[j] != ' ') j++;
        field u = {s.p + i, j - i};
        if (e->n_urls == CATALOG_MAX_URLS)
            return mu_fail(err, MU_E_FORMAT, "catalog: line %d: more than %d URLs", lineno, CATALOG_MAX_URLS);
        if (u.n > CATALOG_URL_MAX) return mu_fail(err, MU_E_FORMAT, "catalog: line %d: URL longer than %d bytes", lineno, CATALOG_URL_MAX);
        bool http = (u.n > 7 && !memcmp(u.p, "http://", 7)) || (u.n > 8 && !memcmp(u.p, "https://", 8));
        if (!http)
            return mu_fail(err, MU_E_FORMAT, "catalog: line %d: a URL must start with http:// or https://: %s", lineno,
                           shown(&u, tmp, sizeof tmp));
        memcpy(e->urls[e->n_urls++], u.p, u.n);
        i = j;
    }
    if (e->n_urls == 0) return mu_fail(err, MU_E_FORMAT, "catalog: line %d: no URL", lineno);
    return 0;
}

/* Calls fn on every entry; stops at the first error. */
static int walk(const char *text, size_t n, int (*fn)(const catalog_entry *e, void *u), void *u, mu_err *err) {
    size_t pos = 0;
    int lineno = 0;
    while (pos < n) {
        size_t end = pos;
        while (end < n && text[end] != '\n') end++;
        lineno++;
        size_t len = end - pos;
        if (len && text[pos + len - 1] == '\r') len--;
        const char *line = text + pos;
        pos = end + 1;
        if (memchr(line, 0, len)) return mu_fail(err, MU_E_FORMAT, "catalog: line %d: NUL byte", lineno);
        size_t k = 0;
        while (k < len && (line[k] == ' ' || line[k] == '\t')) k++;
        if (k == len || line[k] == '#') continue;
        catalog_entry e;
        int rc = parse_line(line, len, lineno, &e, err);
        if (rc) return rc;
        rc = fn(&e, u);
        if (rc) return rc;
    }
    return 0;
}

typedef struct {
    const char *name;
    catalog_entry *out;
    int found;
} find_ctx;

static int find_fn(const catalog_entry *e, void *u) {
    find_ctx *c = u;
    if (!c->found && !strcmp(e->name, c->name)) {
        *c->out = *e;
        c->found = 1;
    }
    return 0;
}

int catalog_find(const char *text, size_t n, const char *name, catalog_entry *out, mu_err *err) {
    find_ctx c = {name, out, 0};
    int rc = walk(text, n, find_fn, &c, err);
    return rc ? rc : c.found;
}

typedef struct {
    char *buf;
    size_t cap, len;
} names_ctx;

static int names_fn(const catalog_entry *e, void *u) {
    names_ctx *c = u;
    int k = snprintf(c->buf + c->len, c->cap - c->len, "%s%s", c->len ? ", " : "", e->name);
    if (k > 0) c->len = c->len + (size_t)k < c->cap ? c->len + (size_t)k : c->cap - 1;
    return 0;
}

void catalog_names(const char *text, size_t n, char *buf, size_t cap) {
    if (!cap) return;
    buf[0] = 0;
    names_ctx c = {buf, cap, 0};
    walk(text, n, names_fn, &c, NULL);
}
