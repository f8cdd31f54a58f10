/* gguf.c: GGUF v3 parser over a read-only memory map.
 * Owns: the mapping, one validation pass over every byte of the header, name
 * hash tables for keys and tensors. Does not: interpret keys, convert tensor
 * data, or write files.
 * Design: parse everything up front with a bounds-checked cursor so that no
 * accessor can ever read outside the map; fail closed on the first problem
 * with one precise message. */
#include "gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../base/mem.h"
#include "../kern/quant.h"

#define MAX_KV 65536u
#define MAX_TENSORS 1048576u
#define MAX_KEY_LEN 65535u
#define MAX_TENSOR_NAME 63u /* ggml's GGML_MAX_NAME is 64 with the NUL */
#define DEFAULT_ALIGN 32u

typedef struct {
    char *name;
    uint32_t type;
    const uint8_t *val;  /* value bytes (after the type tag) */
    size_t val_bytes;
    mu_gguf_arr arr;     /* when type == ARR */
    uint64_t *str_off;   /* string arrays: offset of each element from val */
} kv_entry;

struct mu_gguf {
    const uint8_t *base;
    size_t size;
    int mapped;
    uint32_t version;
    uint32_t alignment;
    uint32_t n_kv, n_tensors;
    kv_entry *kv;
    mu_gguf_tensor *tensors;
    int32_t *kv_hash, *t_hash; /* open addressing, -1 empty */
    uint32_t kv_cap, t_cap;
    size_t data_off;
};

typedef struct {
    const uint8_t *p, *end, *base;
} cursor;

static size_t cur_pos(const cursor *c) { return (size_t)(c->p - c->base); }

static int cur_take(cursor *c, size_t n, const uint8_t **out, mu_err *err, const char *what) {
    if ((size_t)(c->end - c->p) < n)
        return mu_fail(err, MU_E_FORMAT, "gguf: truncated file: %s at offset %zu needs %zu bytes, %zu left",
                       what, cur_pos(c), n, (size_t)(c->end - c->p));
    *out = c->p;
    c->p += n;
    return 0;
}

static int cur_u32(cursor *c, uint32_t *v, mu_err *err, const char *what) {
    const uint8_t *p = NULL;
    int rc = cur_take(c, 4, &p, err, what);
    if (rc) return rc;
    memcpy(v, p, 4);
    return 0;
}

static int cur_u64(cursor *c, uint64_t *v, mu_err *err, const char *what) {
    const uint8_t *p = NULL;
    int rc = cur_take(c, 8, &p, err, what);
    if (rc) return rc;
    memcpy(v, p, 8);
    return 0;
}

/* A GGUF string: u64 length then bytes. */
static int cur_str(cursor *c, const uint8_t **s, uint64_t *len, mu_err *err, const char *what) {
    int rc = cur_u64(c, len, err, what);
    if (rc) return rc;
    if (*len > (uint64_t)(c->end - c->p))
        return mu_fail(err, MU_E_FORMAT, "gguf: truncated file: %s of length %llu at offset %zu runs past the end",
                       what, (unsigned long long)*len, cur_pos(c));
    return cur_take(c, (size_t)*len, s, err, what);
}

size_t mu_gguf_scalar_bytes(uint32_t t) {
    switch (t) {
    case MU_GGUF_U8: case MU_GGUF_I8: case MU_GGUF_BOOL: return 1;
    case MU_GGUF_U16: case MU_GGUF_I16: return 2;
    case MU_GGUF_U32: case MU_GGUF_I32: case MU_GGUF_F32: return 4;
    case MU_GGUF_U64: case MU_GGUF_I64: case MU_GGUF_F64: return 8;
    }
    return 0;
}

static uint64_t name_hash(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

static uint32_t pow2_at_least(uint32_t n) {
    uint32_t c = 16;
    while (c < n * 2) c <<= 1;
    return c;
}

/* Insert index i with name; returns 0, or -1 if the name is already present. */
static int hash_insert(int32_t *tab, uint32_t cap, const char *name, int32_t i,
                       const char *(*name_of)(const mu_gguf *, int32_t), const mu_gguf *g) {
    uint32_t h = (uint32_t)name_hash(name) & (cap - 1);
    while (tab[h] >= 0) {
        if (strcmp(name_of(g, tab[h]), name) == 0) return -1;
        h = (h + 1) & (cap - 1);
    }
    tab[h] = i;
    return 0;
}

static int32_t hash_find(const int32_t *tab, uint32_t cap, const char *name,
                         const char *(*name_of)(const mu_gguf *, int32_t), const mu_gguf *g) {
    if (!tab) return -1;
    uint32_t h = (uint32_t)name_hash(name) & (cap - 1);
    while (tab[h] >= 0) {
        if (strcmp(name_of(g, tab[h]), name) == 0) return tab[h];
        h = (h + 1) & (cap - 1);
    }
    return -1;
}

static const char *kv_name_of(const mu_gguf *g, int32_t i) { return g->kv[i].name; }
static const char *t_name_of(const mu_gguf *g, int32_t i) { return g->tensors[i].name; }

static char *dup_name(const uint8_t *s, uint64_t len) {
    char *r = malloc((size_t)len + 1);
    if (!r) return NULL;
    memcpy(r, s, (size_t)len);
    r[len] = 0;
    return r;
}

/* Reads one value of type t (t != ARR, or ARR with nesting forbidden). */
static int parse_value(cursor *c, kv_entry *e, mu_err *err) {
    const uint8_t *p = NULL;
    int rc;
    if (e->type == MU_GGUF_STR) {
        uint64_t len;
        if ((rc = cur_str(c, &p, &len, err, "string value"))) return rc;
        e->val = p;
        e->val_bytes = (size_t)len;
        return 0;
    }
    if (e->type == MU_GGUF_ARR) {
        uint32_t at;
        uint64_t n;
        if ((rc = cur_u32(c, &at, err, "array type"))) return rc;
        if ((rc = cur_u64(c, &n, err, "array length"))) return rc;
        if (at == MU_GGUF_ARR)
            return mu_fail(err, MU_E_FORMAT, "gguf: key '%s': nested arrays are not supported", e->name);
        e->arr.type = at;
        e->arr.n = n;
        e->val = c->p;
        if (at == MU_GGUF_STR) {
            /* each element needs at least its 8-byte length */
            if (n > (uint64_t)(c->end - c->p) / 8)
                return mu_fail(err, MU_E_FORMAT, "gguf: key '%s': absurd array length %llu for %zu bytes left",
                               e->name, (unsigned long long)n, (size_t)(c->end - c->p));
            e->str_off = malloc((size_t)(n ? n : 1) * sizeof(uint64_t));
            if (!e->str_off) return mu_fail(err, MU_E_NOMEM, "gguf: out of memory indexing '%s'", e->name);
            for (uint64_t i = 0; i < n; i++) {
                uint64_t len;
                e->str_off[i] = (uint64_t)(c->p - e->val);
                if ((rc = cur_str(c, &p, &len, err, "array string"))) return rc;
            }
        } else {
            size_t es = mu_gguf_scalar_bytes(at);
            if (es == 0)
                return mu_fail(err, MU_E_FORMAT, "gguf: key '%s': unknown array element type %u", e->name, at);
            if (n > (uint64_t)(c->end - c->p) / es)
                return mu_fail(err, MU_E_FORMAT, "gguf: truncated file: key '%s' array of %llu elements runs past the end",
                               e->name, (unsigned long long)n);
            if ((rc = cur_take(c, (size_t)n * es, &p, err, "array data"))) return rc;
        }
        e->arr.data = e->val;
        e->val_bytes = (size_t)(c->p - e->val);
        return 0;
    }
    size_t es = mu_gguf_scalar_bytes(e->type);
    if (es == 0) return mu_fail(err, MU_E_FORMAT, "gguf: key '%s': unknown value type %u", e->name, e->type);
    if ((rc = cur_take(c, es, &p, err, "value"))) return rc;
    if (e->type == MU_GGUF_BOOL && *p > 1)
        return mu_fail(err, MU_E_FORMAT, "gguf: key '%s': bool value %u is not 0 or 1", e->name, *p);
    e->val = p;
    e->val_bytes = es;
    return 0;
}

static int parse(mu_gguf *g, mu_err *err) {
    cursor c = {g->base, g->base + g->size, g->base};
    const uint8_t *p = NULL;
    int rc;
    if (g->size < 4 || memcmp(g->base, "GGUF", 4) != 0) {
        if (g->size >= 4)
            return mu_fail(err, MU_E_FORMAT, "gguf: bad magic: %02x %02x %02x %02x (not a GGUF file)",
                           g->base[0], g->base[1], g->base[2], g->base[3]);
        return mu_fail(err, MU_E_FORMAT, "gguf: bad magic: file is only %zu bytes", g->size);
    }
    c.p += 4;
    if ((rc = cur_u32(&c, &g->version, err, "version"))) return rc;
    if (g->version != 3) {
        if ((g->version & 0xffff) == 0 && g->version != 0)
            return mu_fail(err, MU_E_FORMAT, "gguf: unsupported version: %u (big-endian file?)", g->version);
        return mu_fail(err, MU_E_FORMAT, "gguf: unsupported version: %u (only version 3 is read)", g->version);
    }
    uint64_t nt, nk;
    if ((rc = cur_u64(&c, &nt, err, "tensor count"))) return rc;
    if ((rc = cur_u64(&c, &nk, err, "key count"))) return rc;
    if (nk > MAX_KV) return mu_fail(err, MU_E_FORMAT, "gguf: absurd key count: %llu", (unsigned long long)nk);
    if (nt > MAX_TENSORS) return mu_fail(err, MU_E_FORMAT, "gguf: absurd tensor count: %llu", (unsigned long long)nt);
    /* every key needs >= 12 bytes, every tensor info >= 24 */
    if (nk * 12 + nt * 24 > (uint64_t)(c.end - c.p))
        return mu_fail(err, MU_E_FORMAT, "gguf: truncated file: %llu keys and %llu tensors cannot fit in %zu bytes",
                       (unsigned long long)nk, (unsigned long long)nt, (size_t)(c.end - c.p));
    g->n_kv = (uint32_t)nk;
    g->n_tensors = (uint32_t)nt;
    g->kv = calloc(nk ? nk : 1, sizeof *g->kv);
    g->tensors = calloc(nt ? nt : 1, sizeof *g->tensors);
    g->kv_cap = pow2_at_least(g->n_kv + 1);
    g->t_cap = pow2_at_least(g->n_tensors + 1);
    g->kv_hash = malloc(g->kv_cap * sizeof(int32_t));
    g->t_hash = malloc(g->t_cap * sizeof(int32_t));
    if (!g->kv || !g->tensors || !g->kv_hash || !g->t_hash)
        return mu_fail(err, MU_E_NOMEM, "gguf: out of memory for %u keys and %u tensors", g->n_kv, g->n_tensors);
    memset(g->kv_hash, 0xff, g->kv_cap * sizeof(int32_t));
    memset(g->t_hash, 0xff, g->t_cap * sizeof(int32_t));

    g->alignment = DEFAULT_ALIGN;
    for (uint32_t i = 0; i < g->n_kv; i++) {
        kv_entry *e = &g->kv[i];
        uint64_t len;
        if ((rc = cur_str(&c, &p, &len, err, "key name"))) return rc;
        if (len == 0 || len > MAX_KEY_LEN || memchr(p, 0, (size_t)len))
            return mu_fail(err, MU_E_FORMAT, "gguf: key %u: invalid name (length %llu)", i, (unsigned long long)len);
        if (!(e->name = dup_name(p, len))) return mu_fail(err, MU_E_NOMEM, "gguf: out of memory");
        if ((rc = cur_u32(&c, &e->type, err, "value type"))) return rc;
        if ((rc = parse_value(&c, e, err))) return rc;
        if (hash_insert(g->kv_hash, g->kv_cap, e->name, (int32_t)i, kv_name_of, g))
            return mu_fail(err, MU_E_FORMAT, "gguf: duplicate key: %s", e->name);
        if (strcmp(e->name, "general.alignment") == 0) {
            uint32_t a;
            if (e->type != MU_GGUF_U32)
                return mu_fail(err, MU_E_FORMAT, "gguf: general.alignment must be uint32, got type %u", e->type);
            memcpy(&a, e->val, 4);
            if (a == 0 || (a & (a - 1)))
                return mu_fail(err, MU_E_FORMAT, "gguf: general.alignment is not a power of two: %u", a);
            g->alignment = a;
        }
    }

    for (uint32_t i = 0; i < g->n_tensors; i++) {
        mu_gguf_tensor *t = &g->tensors[i];
        uint64_t len;
        uint32_t nd;
        if ((rc = cur_str(&c, &p, &len, err, "tensor name"))) return rc;
        if (len == 0 || len > MAX_TENSOR_NAME || memchr(p, 0, (size_t)len))
            return mu_fail(err, MU_E_FORMAT, "gguf: tensor %u: invalid name (length %llu, at most %u)", i,
                           (unsigned long long)len, MAX_TENSOR_NAME);
        char *name = dup_name(p, len);
        if (!name) return mu_fail(err, MU_E_NOMEM, "gguf: out of memory");
        t->name = name;
        if ((rc = cur_u32(&c, &nd, err, "tensor dims"))) return rc;
        if (nd == 0 || nd > MU_GGUF_MAX_DIMS)
            return mu_fail(err, MU_E_FORMAT, "gguf: tensor '%s': bad dimension count %u", name, nd);
        t->n_dims = (int)nd;
        uint64_t n_el = 1;
        for (int d = 0; d < MU_GGUF_MAX_DIMS; d++) t->ne[d] = 1;
        for (uint32_t d = 0; d < nd; d++) {
            uint64_t ne;
            if ((rc = cur_u64(&c, &ne, err, "tensor dim"))) return rc;
            if (ne == 0 || ne > (uint64_t)INT64_MAX)
                return mu_fail(err, MU_E_FORMAT, "gguf: tensor '%s': bad dimension %u: %llu", name, d,
                               (unsigned long long)ne);
            if (__builtin_mul_overflow(n_el, ne, &n_el) || n_el > (uint64_t)INT64_MAX)
                return mu_fail(err, MU_E_FORMAT, "gguf: tensor '%s': element count overflows", name);
            t->ne[d] = (int64_t)ne;
        }
        t->n_elems = (int64_t)n_el;
        if ((rc = cur_u32(&c, &t->type, err, "tensor type"))) return rc;
        const mu_type_info *ti = mu_type_get(t->type);
        if (ti->blck == 0) return mu_fail(err, MU_E_FORMAT, "gguf: tensor '%s': unknown type %u", name, t->type);
        if (t->ne[0] % ti->blck)
            return mu_fail(err, MU_E_FORMAT, "gguf: tensor '%s': row of %lld is not a multiple of the %s block (%d)",
                           name, (long long)t->ne[0], ti->name, ti->blck);
        size_t row = mu_type_row_bytes(t->type, t->ne[0]);
        size_t bytes;
        if (!mu_mul_ok(row, (size_t)(n_el / (uint64_t)t->ne[0]), &bytes))
            return mu_fail(err, MU_E_FORMAT, "gguf: tensor '%s': byte size overflows", name);
        t->bytes = bytes;
        if ((rc = cur_u64(&c, &t->offset, err, "tensor offset"))) return rc;
        if (t->offset % g->alignment)
            return mu_fail(err, MU_E_FORMAT, "gguf: tensor '%s': offset %llu is not aligned to %u", name,
                           (unsigned long long)t->offset, g->alignment);
        if (hash_insert(g->t_hash, g->t_cap, name, (int32_t)i, t_name_of, g))
            return mu_fail(err, MU_E_FORMAT, "gguf: duplicate tensor: %s", name);
    }

    size_t pos = cur_pos(&c);
    size_t data_off = (pos + g->alignment - 1) / g->alignment * g->alignment;
    if (g->n_tensors && data_off > g->size)
        return mu_fail(err, MU_E_FORMAT, "gguf: truncated file: data section would start at %zu past the end (%zu)",
                       data_off, g->size);
    g->data_off = data_off;
    size_t data_bytes = g->size >= data_off ? g->size - data_off : 0;
    for (uint32_t i = 0; i < g->n_tensors; i++) {
        mu_gguf_tensor *t = &g->tensors[i];
        if (t->offset > data_bytes || t->bytes > data_bytes - t->offset)
            return mu_fail(err, MU_E_FORMAT,
                           "gguf: truncated file: tensor '%s' (%zu bytes at data offset %llu) runs past the end (%zu data bytes)",
                           t->name, t->bytes, (unsigned long long)t->offset, data_bytes);
        t->data = g->base + data_off + t->offset;
    }
    return 0;
}

static void release(mu_gguf *g) {
    if (g->kv)
        for (uint32_t i = 0; i < g->n_kv; i++) {
            free(g->kv[i].name);
            free(g->kv[i].str_off);
        }
    if (g->tensors)
        for (uint32_t i = 0; i < g->n_tensors; i++) free((char *)g->tensors[i].name);
    free(g->kv);
    free(g->tensors);
    free(g->kv_hash);
    free(g->t_hash);
    if (g->mapped && g->base) munmap((void *)g->base, g->size);
    free(g);
}

static int finish_open(mu_gguf *g, mu_gguf **out, mu_err *err) {
    int rc = parse(g, err);
    if (rc) {
        release(g);
        return rc;
    }
    *out = g;
    return 0;
}

int mu_gguf_open_mem(const void *data, size_t n, mu_gguf **out, mu_err *err) {
    mu_gguf *g = calloc(1, sizeof *g);
    if (!g) return mu_fail(err, MU_E_NOMEM, "gguf: out of memory");
    g->base = data;
    g->size = n;
    return finish_open(g, out, err);
}

int mu_gguf_open(const char *path, mu_gguf **out, mu_err *err) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return mu_fail(err, MU_E_IO, "gguf: cannot open %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return mu_fail(err, MU_E_IO, "gguf: cannot stat %s: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return mu_fail(err, MU_E_IO, "gguf: not a regular file: %s", path);
    }
    if (st.st_size < 24) {
        close(fd);
        return mu_fail(err, MU_E_FORMAT, "gguf: truncated file: %s is %lld bytes, a GGUF header needs 24", path,
                       (long long)st.st_size);
    }
    void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);
    if (m == MAP_FAILED) return mu_fail(err, MU_E_IO, "gguf: cannot map %s: %s", path, strerror(e));
    mu_gguf *g = calloc(1, sizeof *g);
    if (!g) {
        munmap(m, (size_t)st.st_size);
        return mu_fail(err, MU_E_NOMEM, "gguf: out of memory");
    }
    g->base = m;
    g->size = (size_t)st.st_size;
    g->mapped = 1;
    return finish_open(g, out, err);
}

void mu_gguf_close(mu_gguf *g) {
    if (g) release(g);
}

uint32_t mu_gguf_version(const mu_gguf *g) { return g->version; }
size_t mu_gguf_file_bytes(const mu_gguf *g) { return g->size; }
const void *mu_gguf_bytes(const mu_gguf *g) { return g->base; }
int mu_gguf_n_kv(const mu_gguf *g) { return (int)g->n_kv; }
const char *mu_gguf_kv_name(const mu_gguf *g, int i) { return g->kv[i].name; }
uint32_t mu_gguf_kv_type(const mu_gguf *g, int i) { return g->kv[i].type; }
int mu_gguf_find(const mu_gguf *g, const char *key) { return hash_find(g->kv_hash, g->kv_cap, key, kv_name_of, g); }

static int get_entry(const mu_gguf *g, const char *key, const kv_entry **e, mu_err *err) {
    int i = mu_gguf_find(g, key);
    if (i < 0) return mu_fail(err, MU_E_MODEL, "model: missing key: %s", key);
    *e = &g->kv[i];
    return 0;
}

/* Converts a scalar integer value; returns 0 on success. */
static int scalar_i64(uint32_t type, const uint8_t *v, int64_t *out) {
    switch (type) {
    case MU_GGUF_U8: *out = *v; return 0;
    case MU_GGUF_I8: *out = (int8_t)*v; return 0;
    case MU_GGUF_BOOL: *out = *v; return 0;
    case MU_GGUF_U16: { uint16_t x; memcpy(&x, v, 2); *out = x; return 0; }
    case MU_GGUF_I16: { int16_t x; memcpy(&x, v, 2); *out = x; return 0; }
    case MU_GGUF_U32: { uint32_t x; memcpy(&x, v, 4); *out = x; return 0; }
    case MU_GGUF_I32: { int32_t x; memcpy(&x, v, 4); *out = x; return 0; }
    case MU_GGUF_U64: { uint64_t x; memcpy(&x, v, 8); if (x > INT64_MAX) return -1; *out = (int64_t)x; return 0; }
    case MU_GGUF_I64: { int64_t x; memcpy(&x, v, 8); *out = x; return 0; }
    }
    return -1;
}

static int scalar_f64(uint32_t type, const uint8_t *v, double *out) {
    if (type == MU_GGUF_F32) { float x; memcpy(&x, v, 4); *out = x; return 0; }
    if (type == MU_GGUF_F64) { double x; memcpy(&x, v, 8); *out = x; return 0; }
    int64_t i;
    if (type != MU_GGUF_BOOL && scalar_i64(type, v, &i) == 0) { *out = (double)i; return 0; }
    return -1;
}

int mu_gguf_get_i64(const mu_gguf *g, const char *key, int64_t *out, mu_err *err) {
    const kv_entry *e;
    int rc = get_entry(g, key, &e, err);
    if (rc) return rc;
    if (e->type == MU_GGUF_BOOL || scalar_i64(e->type, e->val, out))
        return mu_fail(err, MU_E_MODEL, "model: key %s: expected an integer, found type %u", key, e->type);
    return 0;
}

int mu_gguf_get_f64(const mu_gguf *g, const char *key, double *out, mu_err *err) {
    const kv_entry *e;
    int rc = get_entry(g, key, &e, err);
    if (rc) return rc;
    if (scalar_f64(e->type, e->val, out))
        return mu_fail(err, MU_E_MODEL, "model: key %s: expected a number, found type %u", key, e->type);
    return 0;
}

int mu_gguf_get_bool(const mu_gguf *g, const char *key, bool *out, mu_err *err) {
    const kv_entry *e;
    int rc = get_entry(g, key, &e, err);
    if (rc) return rc;
    if (e->type != MU_GGUF_BOOL)
        return mu_fail(err, MU_E_MODEL, "model: key %s: expected a bool, found type %u", key, e->type);
    *out = *e->val != 0;
    return 0;
}

int mu_gguf_get_str(const mu_gguf *g, const char *key, const char **s, size_t *len, mu_err *err) {
    const kv_entry *e;
    int rc = get_entry(g, key, &e, err);
    if (rc) return rc;
    if (e->type != MU_GGUF_STR)
        return mu_fail(err, MU_E_MODEL, "model: key %s: expected a string, found type %u", key, e->type);
    *s = (const char *)e->val;
    *len = e->val_bytes;
    return 0;
}

int mu_gguf_get_arr(const mu_gguf *g, const char *key, mu_gguf_arr *out, mu_err *err) {
    const kv_entry *e;
    int rc = get_entry(g, key, &e, err);
    if (rc) return rc;
    if (e->type != MU_GGUF_ARR)
        return mu_fail(err, MU_E_MODEL, "model: key %s: expected an array, found type %u", key, e->type);
    *out = e->arr;
    out->kv = (int)(e - g->kv);
    return 0;
}

void mu_gguf_arr_str(const mu_gguf *g, const mu_gguf_arr *a, uint64_t i, const char **s, size_t *len) {
    MU_ASSERT(a->type == MU_GGUF_STR && i < a->n);
    const kv_entry *e = &g->kv[a->kv];
    const uint8_t *p = e->val + e->str_off[i];
    uint64_t n;
    memcpy(&n, p, 8);
    *s = (const char *)p + 8;
    *len = (size_t)n;
}

int64_t mu_gguf_arr_i64(const mu_gguf_arr *a, uint64_t i) {
    MU_ASSERT(i < a->n);
    size_t es = mu_gguf_scalar_bytes(a->type);
    int64_t v = 0;
    double d;
    if (scalar_i64(a->type, a->data + i * es, &v) == 0) return v;
    if (scalar_f64(a->type, a->data + i * es, &d) == 0) return (int64_t)d;
    return 0;
}

double mu_gguf_arr_f64(const mu_gguf_arr *a, uint64_t i) {
    MU_ASSERT(i < a->n);
    size_t es = mu_gguf_scalar_bytes(a->type);
    double d = 0;
    if (scalar_f64(a->type, a->data + i * es, &d) == 0) return d;
    int64_t v;
    if (scalar_i64(a->type, a->data + i * es, &v) == 0) return (double)v;
    return 0;
}

int mu_gguf_n_tensors(const mu_gguf *g) { return (int)g->n_tensors; }
const mu_gguf_tensor *mu_gguf_tensor_at(const mu_gguf *g, int i) { return &g->tensors[i]; }
const mu_gguf_tensor *mu_gguf_find_tensor(const mu_gguf *g, const char *name) {
    int32_t i = hash_find(g->t_hash, g->t_cap, name, t_name_of, g);
    return i < 0 ? NULL : &g->tensors[i];
}

int mu_gguf_get_int_in(const mu_gguf *g, const char *key, bool required, int64_t dflt, int64_t lo, int64_t hi,
                       int *out, mu_err *err) {
    int64_t v = dflt;
    if (required || mu_gguf_find(g, key) >= 0) {
        int rc = mu_gguf_get_i64(g, key, &v, err);
        if (rc) return rc;
    }
    if (v < lo || v > hi)
        return mu_fail(err, MU_E_MODEL, "model: key %s out of range: %lld (allowed %lld..%lld)", key, (long long)v,
                       (long long)lo, (long long)hi);
    *out = (int)v;
    return 0;
}

int mu_gguf_get_finite(const mu_gguf *g, const char *key, bool required, float dflt, float *out, mu_err *err) {
    if (!required && mu_gguf_find(g, key) < 0) {
        *out = dflt;
        return 0;
    }
    double v;
    int rc = mu_gguf_get_f64(g, key, &v, err);
    if (rc) return rc;
    if (!isfinite(v)) return mu_fail(err, MU_E_MODEL, "model: key %s is not finite", key);
    *out = (float)v;
    return 0;
}
