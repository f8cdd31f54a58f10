/* kvwire.c: the canonical objects of kvpack v1 (MANIFEST_V1.md,
 * IDENTITY_V1.md): representation family, realized cut schema, state
 * declaration and cut manifest; their encoders, canonical decoders and the
 * semantic validation.
 * Owns: the byte layouts and the checks, in the order the specification and
 * its reference apply them, so that a rejection names the same verdict
 * category. Does not own: crypto, chunks, packs (kvobj.c, kvcrypt.c).
 * Design: decoders read sequentially through a bounds-checked reader and
 * allocate each array from the arena with a capacity bounded by the bytes
 * left, so a hostile count cannot make a large allocation; then the decoded
 * value is encoded again and must give back the exact input.
 * One extension over the Python reference: the TailWindow token-axis rule
 * (3) of MANIFEST_V1.md, which the reference does not decode yet; muser
 * needs it for sliding-window layers (docs/kvpack.md). */
#include "kvpack.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const kv_cat_names[KV_N_CATEGORIES] = {
    "truncated", "bad_magic", "reserved", "bounds", "unknown_enum", "semantics", "graph", "codec",
    "authentication", "checksum"};

int kv_fail(mu_err *err, kv_cat cat, const char *fmt, ...) {
    char msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return mu_fail(err, MU_E_FORMAT, "kvpack: %s: %s", kv_cat_names[cat], msg);
}

const char *kv_category(const mu_err *err) {
    if (!err || err->code != MU_E_FORMAT || strncmp(err->msg, "kvpack: ", 8)) return NULL;
    for (int c = 0; c < KV_N_CATEGORIES; c++) {
        size_t n = strlen(kv_cat_names[c]);
        if (!strncmp(err->msg + 8, kv_cat_names[c], n) && err->msg[8 + n] == ':') return kv_cat_names[c];
    }
    return NULL;
}

unsigned kv_dtype_width(unsigned dtype) {
    static const unsigned w[10] = {0, 1, 4, 1, 2, 4, 2, 2, 4, 8};
    return dtype < 10 ? w[dtype] : 0;
}

/* ---- arena ------------------------------------------------------------- */

struct kv_mem {
    struct kv_mem *next; /* blocks, newest first; the head is the handle */
};

kv_mem *kv_mem_new(void) { return calloc(1, sizeof(kv_mem)); }

void kv_mem_free(kv_mem *m) {
    if (!m) return;
    kv_mem *b = m->next;
    while (b) {
        kv_mem *n = b->next;
        free(b);
        b = n;
    }
    free(m);
}

void *kv_alloc(kv_mem *m, size_t n, size_t size) {
    size_t bytes;
    if (__builtin_mul_overflow(n, size, &bytes) || bytes > SIZE_MAX - 64) return NULL;
    kv_mem *b = calloc(1, 64 + (bytes ? bytes : 1));
    if (!b) return NULL;
    b->next = m->next;
    m->next = b;
    return (uint8_t *)b + 64;
}

/* ---- buffers ----------------------------------------------------------- */

void kv_buf_free(kv_buf *b) {
    free(b->p);
    memset(b, 0, sizeof *b);
}

static void put(kv_buf *b, const void *p, size_t n) {
    if (b->oom) return;
    if (b->cap - b->n < n) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap - b->n < n) {
            if (cap > SIZE_MAX / 2) {
                b->oom = true;
                return;
            }
            cap *= 2;
        }
        uint8_t *q = realloc(b->p, cap);
        if (!q) {
            b->oom = true;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, p, n);
    b->n += n;
}
static void put8(kv_buf *b, uint8_t v) { put(b, &v, 1); }
static void put16(kv_buf *b, uint16_t v) {
    uint8_t x[2] = {(uint8_t)v, (uint8_t)(v >> 8)};
    put(b, x, 2);
}
static void put32(kv_buf *b, uint32_t v) {
    uint8_t x[4];
    for (int i = 0; i < 4; i++) x[i] = (uint8_t)(v >> (8 * i));
    put(b, x, 4);
}
static void put64(kv_buf *b, uint64_t v) {
    uint8_t x[8];
    for (int i = 0; i < 8; i++) x[i] = (uint8_t)(v >> (8 * i));
    put(b, x, 8);
}

/* ---- reader ------------------------------------------------------------ */

typedef struct {
    const uint8_t *p;
    size_t n, off;
    kv_mem *mem;
    mu_err *err;
} rd;

static int take(rd *r, size_t n, const uint8_t **out) {
    if (n > r->n - r->off) return kv_fail(r->err, KV_TRUNCATED, "truncated canonical object");
    *out = r->p + r->off;
    r->off += n;
    return 0;
}
static uint64_t le(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}
#define RD(r, n, dst)                                                                                        \
    do {                                                                                                     \
        const uint8_t *q_ = NULL;                                                                                   \
        int rc_ = take(r, n, &q_);                                                                           \
        if (rc_) return rc_;                                                                                 \
        dst = le(q_, n);                                                                                     \
    } while (0)
#define RDID(r, dst)                                                                                         \
    do {                                                                                                     \
        const uint8_t *q_ = NULL;                                                                                   \
        int rc_ = take(r, 32, &q_);                                                                          \
        if (rc_) return rc_;                                                                                 \
        memcpy(dst, q_, 32);                                                                                 \
    } while (0)
#define TRY(x)                                                                                               \
    do {                                                                                                     \
        int rc_ = (x);                                                                                       \
        if (rc_) return rc_;                                                                                 \
    } while (0)

/* Strict UTF-8 (what Python's bytes.decode accepts): no overlongs, no
 * surrogates, nothing above U+10FFFF. */
static bool utf8_ok(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        int len;
        uint32_t cp, min;
        if ((c & 0xE0) == 0xC0) len = 2, cp = c & 0x1F, min = 0x80;
        else if ((c & 0xF0) == 0xE0) len = 3, cp = c & 0x0F, min = 0x800;
        else if ((c & 0xF8) == 0xF0) len = 4, cp = c & 0x07, min = 0x10000;
        else return false;
        if (n - i < (size_t)len) return false;
        for (int k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80) return false;
            cp = cp << 6 | (s[i + k] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
        i += (size_t)len;
    }
    return true;
}

static int rd_magic(rd *r, const char *magic) {
    if (r->n < 8) return kv_fail(r->err, KV_TRUNCATED, "truncated canonical object");
    if (memcmp(r->p, magic, 8)) return kv_fail(r->err, KV_BAD_MAGIC, "invalid canonical object magic");
    r->off = 8;
    return 0;
}

static int rd_key(rd *r, kv_key *k) {
    uint64_t layer, len;
    RD(r, 4, layer);
    RD(r, 2, len);
    const uint8_t *q = NULL;
    TRY(take(r, (size_t)len, &q));
    if (!utf8_ok(q, (size_t)len)) return kv_fail(r->err, KV_SEMANTICS, "state name is not UTF-8");
    k->layer = (uint32_t)layer;
    k->len = (uint16_t)len;
    k->name = q; /* points into the input, which the arena copy below replaces */
    uint8_t *copy = kv_alloc(r->mem, len ? len : 1, 1);
    if (!copy) return mu_fail(r->err, MU_E_NOMEM, "kvpack: out of memory");
    memcpy(copy, q, (size_t)len);
    k->name = copy;
    return 0;
}

static void put_key(kv_buf *b, const kv_key *k) {
    put32(b, k->layer);
    put16(b, k->len);
    put(b, k->name, k->len);
}

int kv_key_cmp(const kv_key *a, const kv_key *b) {
    if (a->layer != b->layer) return a->layer < b->layer ? -1 : 1;
    size_t n = a->len < b->len ? a->len : b->len;
    int c = n ? memcmp(a->name, b->name, n) : 0;
    if (c) return c < 0 ? -1 : 1;
    return a->len < b->len ? -1 : a->len > b->len;
}

/* An array of count items of at least min_bytes each on the wire: capacity
 * bounded by what is left to read (more items cannot decode). */
static void *rd_array(rd *r, uint64_t count, size_t min_bytes, size_t size) {
    uint64_t fit = (r->n - r->off) / min_bytes + 1;
    return kv_alloc(r->mem, (size_t)(count < fit ? count : fit), size);
}
#define OOM(r) mu_fail((r)->err, MU_E_NOMEM, "kvpack: out of memory")

static int rd_shape(rd *r, kv_shape *s) {
    uint64_t rank;
    RD(r, 1, rank);
    if (rank == 0 || rank > KV_MAX_RANK) return kv_fail(r->err, KV_BOUNDS, "state rank must be in 1..=8");
    s->rank = (uint8_t)rank;
    for (unsigned i = 0; i < rank; i++) RD(r, 8, s->dims[i]);
    for (unsigned i = 0; i < rank; i++)
        if (!s->dims[i]) return kv_fail(r->err, KV_BOUNDS, "state dimensions must be nonzero");
    return 0;
}
static void put_shape(kv_buf *b, const kv_shape *s) {
    put8(b, s->rank);
    for (unsigned i = 0; i < s->rank; i++) put64(b, s->dims[i]);
}

static int rd_cut(rd *r, kv_cut *c) {
    RDID(r, c->token_root);
    RDID(r, c->aux_root);
    RD(r, 8, c->token_count);
    return 0;
}
static void put_cut(kv_buf *b, const kv_cut *c) {
    put(b, c->token_root, 32);
    put(b, c->aux_root, 32);
    put64(b, c->token_count);
}

static int rd_enum(rd *r, int bytes, const unsigned *ok, int n_ok, const char *what, uint16_t *out) {
    uint64_t v;
    RD(r, bytes, v);
    for (int i = 0; i < n_ok; i++)
        if (v == ok[i]) {
            *out = (uint16_t)v;
            return 0;
        }
    return kv_fail(r->err, KV_UNKNOWN_ENUM, "unknown %s %llu", what, (unsigned long long)v);
}

/* ---- family ------------------------------------------------------------ */

static int rd_fstate(rd *r, kv_fstate *s) {
    static const unsigned kinds[] = {KV_CACHE_ORDINARY}, dtypes[] = {1, 2, 3, 4, 5, 6, 7, 8, 9},
                          codecs[] = {KV_CODEC_RAW, KV_CODEC_LOSSLESS},
                          layouts[] = {KV_LAYOUT_CONTIGUOUS, KV_LAYOUT_STRIDED},
                          rules[] = {KV_AXIS_DIRECT, KV_AXIS_GATHER, KV_AXIS_TAIL};
    TRY(rd_key(r, &s->key));
    TRY(rd_enum(r, 2, kinds, 1, "cache kind", &s->cache_kind));
    TRY(rd_enum(r, 2, dtypes, 9, "dtype", &s->dtype));
    TRY(rd_enum(r, 2, codecs, 2, "codec", &s->codec));
    uint64_t v;
    RD(r, 2, v);
    s->codec_version = (uint16_t)v;
    TRY(rd_enum(r, 2, layouts, 2, "layout", &s->layout));
    TRY(rd_enum(r, 2, rules, 3, "token axis rule", &s->axis_rule));
    RD(r, 1, v);
    s->token_axis = (uint8_t)v;
    RD(r, 1, v);
    if (v) return kv_fail(r->err, KV_RESERVED, "family state reserved byte is nonzero");
    RD(r, 8, s->elements);
    RD(r, 1, v);
    if (v == 0 || v > KV_MAX_RANK) return kv_fail(r->err, KV_BOUNDS, "family state rank is outside bounds");
    s->rank = (uint8_t)v;
    for (unsigned i = 0; i < s->rank; i++) RD(r, 8, s->dims[i]);
    RD(r, 2, v);
    if (v > KV_MAX_DEPS) return kv_fail(r->err, KV_BOUNDS, "too many state dependencies");
    s->n_deps = (uint16_t)v;
    if (v && !(s->deps = rd_array(r, v, 6, sizeof *s->deps))) return OOM(r);
    for (unsigned i = 0; i < s->n_deps; i++) TRY(rd_key(r, &s->deps[i]));
    return 0;
}

static void put_fstate(kv_buf *b, const kv_fstate *s) {
    put_key(b, &s->key);
    put16(b, s->cache_kind);
    put16(b, s->dtype);
    put16(b, s->codec);
    put16(b, s->codec_version);
    put16(b, s->layout);
    put16(b, s->axis_rule);
    put8(b, s->token_axis);
    put8(b, 0);
    put64(b, s->elements);
    put8(b, s->rank);
    for (unsigned i = 0; i < s->rank; i++) put64(b, s->dims[i]);
    put16(b, s->n_deps);
    for (unsigned i = 0; i < s->n_deps; i++) put_key(b, &s->deps[i]);
}

static int rd_family_body(rd *r, kv_family *f) {
    static const unsigned modes[] = {KV_MODE_NATIVE, KV_MODE_PORTABLE};
    RDID(r, f->abi);
    TRY(rd_enum(r, 2, modes, 2, "representation mode", &f->mode));
    uint64_t v;
    RD(r, 2, v);
    if (v) return kv_fail(r->err, KV_RESERVED, "family reserved field is nonzero");
    RD(r, 4, f->page_tokens);
    RDID(r, f->topology);
    RDID(r, f->shard_map);
    RD(r, 4, v);
    if (v == 0 || v > KV_MAX_STATES) return kv_fail(r->err, KV_BOUNDS, "family state count is outside bounds");
    f->n_states = (uint32_t)v;
    if (!(f->states = rd_array(r, v, 36, sizeof *f->states))) return OOM(r);
    for (uint32_t i = 0; i < f->n_states; i++) TRY(rd_fstate(r, &f->states[i]));
    return 0;
}

static void put_family_body(kv_buf *b, const kv_family *f) {
    put(b, f->abi, 32);
    put16(b, f->mode);
    put16(b, 0);
    put32(b, f->page_tokens);
    put(b, f->topology, 32);
    put(b, f->shard_map, 32);
    put32(b, f->n_states);
    for (uint32_t i = 0; i < f->n_states; i++) put_fstate(b, &f->states[i]);
}

static void put_head(kv_buf *b, const char *magic) {
    put(b, magic, 8);
    put16(b, 1);
    put16(b, 0);
}

void kv_encode_family(kv_buf *b, const kv_family *f) {
    put_head(b, "KVFAM1\0\0");
    put_family_body(b, f);
}

/* Version and reserved field after the magic. */
static int rd_version(rd *r, const char *what) {
    uint64_t v;
    RD(r, 2, v);
    if (v != 1) return kv_fail(r->err, KV_BAD_MAGIC, "unsupported %s version", what);
    RD(r, 2, v);
    if (v) return kv_fail(r->err, KV_RESERVED, "%s reserved field is nonzero", what);
    return 0;
}

static int rd_finish(rd *r) {
    if (r->off != r->n) return kv_fail(r->err, KV_RESERVED, "trailing canonical bytes");
    return 0;
}

typedef void (*enc_fn)(kv_buf *, const void *);
static int canonical(rd *r, enc_fn enc, const void *v, const char *what) {
    kv_buf b = {0};
    enc(&b, v);
    if (b.oom) {
        kv_buf_free(&b);
        return OOM(r);
    }
    bool same = b.n == r->n && !memcmp(b.p, r->p, r->n);
    kv_buf_free(&b);
    if (!same) return kv_fail(r->err, KV_RESERVED, "%s encoding is not canonical", what);
    return 0;
}

static void enc_family(kv_buf *b, const void *v) { kv_encode_family(b, v); }

int kv_decode_family(const uint8_t *p, size_t n, bool semantic, kv_mem *mem, kv_family *out, mu_err *err) {
    rd r = {p, n, 0, mem, err};
    kv_family f = {0};
    TRY(rd_magic(&r, "KVFAM1\0\0"));
    TRY(rd_version(&r, "family"));
    TRY(rd_family_body(&r, &f));
    TRY(rd_finish(&r));
    TRY(canonical(&r, enc_family, &f, "family"));
    if (semantic) TRY(kv_validate_family(&f, err));
    *out = f;
    return 0;
}

/* ---- realized schema --------------------------------------------------- */

static int rd_kind(rd *r, kv_schema *s) {
    uint64_t tag, depth, v;
    RD(r, 1, tag);
    RD(r, 1, depth);
    RD(r, 2, v);
    if (v) return kv_fail(r->err, KV_RESERVED, "manifest-kind reserved field is nonzero");
    if (tag == 0) {
        if (depth) return kv_fail(r->err, KV_RESERVED, "full manifest carries a delta depth");
        s->kind = 0;
        s->depth = 0;
        return 0;
    }
    if (tag == 1) {
        s->kind = 1;
        s->depth = (uint8_t)depth;
        RDID(r, s->parent);
        return rd_cut(r, &s->parent_cut);
    }
    return kv_fail(r->err, KV_UNKNOWN_ENUM, "unknown manifest kind %llu", (unsigned long long)tag);
}

static void put_kind(kv_buf *b, const kv_schema *s) {
    put8(b, s->kind);
    put8(b, s->depth);
    put16(b, 0);
    if (s->kind == 1) {
        put(b, s->parent, 32);
        put_cut(b, &s->parent_cut);
    }
}

static int rd_strides(rd *r, uint8_t *n, uint64_t *st) {
    uint64_t v;
    RD(r, 1, v);
    if (v > KV_MAX_RANK) return kv_fail(r->err, KV_BOUNDS, "too many state strides");
    *n = (uint8_t)v;
    for (unsigned i = 0; i < v; i++) RD(r, 8, st[i]);
    return 0;
}

static int rd_rstate(rd *r, kv_rstate *s) {
    TRY(rd_key(r, &s->key));
    TRY(rd_shape(r, &s->full));
    TRY(rd_shape(r, &s->segment));
    TRY(rd_strides(r, &s->n_strides, s->strides));
    RD(r, 8, s->logical_start);
    RD(r, 8, s->logical_count);
    RD(r, 8, s->phys_off);
    RD(r, 8, s->phys_span);
    RD(r, 8, s->phys_complete);
    RD(r, 8, s->abs_pos);
    RD(r, 8, s->window);
    uint64_t v;
    RD(r, 4, v);
    if (v == 0 || v > KV_MAX_CHUNKS) return kv_fail(r->err, KV_BOUNDS, "state chunk-span count is outside bounds");
    s->n_spans = (uint32_t)v;
    if (!(s->spans = rd_array(r, v, 28, sizeof *s->spans))) return OOM(r);
    for (uint32_t i = 0; i < s->n_spans; i++) {
        RD(r, 8, s->spans[i].token_start);
        RD(r, 8, s->spans[i].token_count);
        RD(r, 8, s->spans[i].plain_off);
        RD(r, 4, s->spans[i].plain_bytes);
    }
    return 0;
}

static void put_rstate(kv_buf *b, const kv_rstate *s) {
    put_key(b, &s->key);
    put_shape(b, &s->full);
    put_shape(b, &s->segment);
    put8(b, s->n_strides);
    for (unsigned i = 0; i < s->n_strides; i++) put64(b, s->strides[i]);
    put64(b, s->logical_start);
    put64(b, s->logical_count);
    put64(b, s->phys_off);
    put64(b, s->phys_span);
    put64(b, s->phys_complete);
    put64(b, s->abs_pos);
    put64(b, s->window);
    put32(b, s->n_spans);
    for (uint32_t i = 0; i < s->n_spans; i++) {
        put64(b, s->spans[i].token_start);
        put64(b, s->spans[i].token_count);
        put64(b, s->spans[i].plain_off);
        put32(b, s->spans[i].plain_bytes);
    }
}

static int rd_schema_body(rd *r, kv_schema *s) {
    TRY(rd_kind(r, s));
    uint64_t v;
    RD(r, 4, v);
    if (v == 0 || v > KV_MAX_STATES) return kv_fail(r->err, KV_BOUNDS, "realized state count is outside bounds");
    s->n_states = (uint32_t)v;
    if (!(s->states = rd_array(r, v, 100, sizeof *s->states))) return OOM(r);
    for (uint32_t i = 0; i < s->n_states; i++) TRY(rd_rstate(r, &s->states[i]));
    RD(r, 4, v);
    if (v == 0 || v > KV_MAX_STATES) return kv_fail(r->err, KV_BOUNDS, "atomic-group count is outside bounds");
    s->n_groups = (uint32_t)v;
    if (!(s->groups = rd_array(r, v, 8, sizeof *s->groups))) return OOM(r);
    for (uint32_t i = 0; i < s->n_groups; i++) {
        kv_group *g = &s->groups[i];
        RD(r, 4, g->id);
        RD(r, 4, v);
        if (v == 0 || v > KV_MAX_STATES)
            return kv_fail(r->err, KV_BOUNDS, "atomic-group state count is outside bounds");
        g->n_keys = (uint32_t)v;
        if (!(g->keys = rd_array(r, v, 6, sizeof *g->keys))) return OOM(r);
        for (uint32_t k = 0; k < g->n_keys; k++) TRY(rd_key(r, &g->keys[k]));
    }
    RD(r, 8, s->segment_bytes);
    RD(r, 8, s->complete_bytes);
    return 0;
}

static void put_schema_body(kv_buf *b, const kv_schema *s) {
    put_kind(b, s);
    put32(b, s->n_states);
    for (uint32_t i = 0; i < s->n_states; i++) put_rstate(b, &s->states[i]);
    put32(b, s->n_groups);
    for (uint32_t i = 0; i < s->n_groups; i++) {
        put32(b, s->groups[i].id);
        put32(b, s->groups[i].n_keys);
        for (uint32_t k = 0; k < s->groups[i].n_keys; k++) put_key(b, &s->groups[i].keys[k]);
    }
    put64(b, s->segment_bytes);
    put64(b, s->complete_bytes);
}

void kv_encode_schema(kv_buf *b, const kv_schema *s) {
    put_head(b, "KVRCS1\0\0");
    put_schema_body(b, s);
}
static void enc_schema(kv_buf *b, const void *v) { kv_encode_schema(b, v); }

int kv_decode_schema(const uint8_t *p, size_t n, kv_mem *mem, kv_schema *out, mu_err *err) {
    rd r = {p, n, 0, mem, err};
    kv_schema s = {0};
    TRY(rd_magic(&r, "KVRCS1\0\0"));
    TRY(rd_version(&r, "realized-schema"));
    TRY(rd_schema_body(&r, &s));
    TRY(rd_finish(&r));
    TRY(canonical(&r, enc_schema, &s, "realized-schema"));
    *out = s;
    return 0;
}

/* ---- state declaration ------------------------------------------------- */

void kv_encode_decl(kv_buf *b, const kv_decl *d) {
    put_head(b, "KVSTS1\0\0");
    put_key(b, &d->key);
    put_shape(b, &d->full);
    put_shape(b, &d->segment);
    put8(b, d->n_strides);
    for (unsigned i = 0; i < d->n_strides; i++) put64(b, d->strides[i]);
    put64(b, d->logical_start);
    put64(b, d->logical_count);
    put64(b, d->abs_pos);
    put64(b, d->window);
    put32(b, d->group);
}
static void enc_decl(kv_buf *b, const void *v) { kv_encode_decl(b, v); }

int kv_decode_decl(const uint8_t *p, size_t n, kv_mem *mem, kv_decl *out, mu_err *err) {
    rd r = {p, n, 0, mem, err};
    kv_decl d = {0};
    TRY(rd_magic(&r, "KVSTS1\0\0"));
    TRY(rd_version(&r, "state-schema"));
    TRY(rd_key(&r, &d.key));
    TRY(rd_shape(&r, &d.full));
    TRY(rd_shape(&r, &d.segment));
    TRY(rd_strides(&r, &d.n_strides, d.strides));
    RD(&r, 8, d.logical_start);
    RD(&r, 8, d.logical_count);
    RD(&r, 8, d.abs_pos);
    RD(&r, 8, d.window);
    RD(&r, 4, d.group);
    TRY(rd_finish(&r));
    TRY(canonical(&r, enc_decl, &d, "state-schema"));
    *out = d;
    return 0;
}

/* ---- manifest ---------------------------------------------------------- */

void kv_encode_manifest(kv_buf *b, const kv_manifest *m) {
    put_head(b, "KVMNF1\0\0");
    put(b, m->tenant, 32);
    put64(b, m->epoch);
    put(b, m->model.weights, 32);
    put(b, m->model.adapters, 32);
    put(b, m->model.tokenizer, 32);
    put(b, m->model.position, 32);
    put(b, m->model.math, 32);
    put_cut(b, &m->cut);
    put_family_body(b, &m->family);
    put_schema_body(b, &m->schema);
    put32(b, m->n_states);
    for (uint32_t i = 0; i < m->n_states; i++) {
        const kv_pstate *s = &m->states[i];
        put_key(b, &s->key);
        put32(b, s->n_chunks);
        for (uint32_t c = 0; c < s->n_chunks; c++) {
            const kv_ref *f = &s->chunks[c];
            put(b, f->chunk_id, 32);
            put(b, f->object_key, 32);
            put(b, f->digest, 32);
            put64(b, f->epoch);
            put32(b, f->plain_bytes);
            put32(b, f->object_bytes);
        }
    }
}
static void enc_manifest(kv_buf *b, const void *v) { kv_encode_manifest(b, v); }

int kv_decode_manifest(const uint8_t *p, size_t n, bool semantic, kv_mem *mem, kv_manifest *out, mu_err *err) {
    if (n > KV_MAX_MANIFEST) return kv_fail(err, KV_BOUNDS, "manifest exceeds production bound");
    rd r = {p, n, 0, mem, err};
    kv_manifest m = {0};
    TRY(rd_magic(&r, "KVMNF1\0\0"));
    TRY(rd_version(&r, "manifest"));
    RDID(&r, m.tenant);
    RD(&r, 8, m.epoch);
    RDID(&r, m.model.weights);
    RDID(&r, m.model.adapters);
    RDID(&r, m.model.tokenizer);
    RDID(&r, m.model.position);
    RDID(&r, m.model.math);
    TRY(rd_cut(&r, &m.cut));
    TRY(rd_family_body(&r, &m.family));
    TRY(rd_schema_body(&r, &m.schema));
    uint64_t v;
    RD(&r, 4, v);
    if (v == 0 || v > KV_MAX_STATES) return kv_fail(err, KV_BOUNDS, "manifest state count is outside bounds");
    m.n_states = (uint32_t)v;
    if (!(m.states = rd_array(&r, v, 10, sizeof *m.states))) return OOM(&r);
    for (uint32_t i = 0; i < m.n_states; i++) {
        kv_pstate *s = &m.states[i];
        TRY(rd_key(&r, &s->key));
        RD(&r, 4, v);
        if (v == 0 || v > KV_MAX_CHUNKS) return kv_fail(err, KV_BOUNDS, "state chunk count is outside bounds");
        s->n_chunks = (uint32_t)v;
        if (!(s->chunks = rd_array(&r, v, 112, sizeof *s->chunks))) return OOM(&r);
        for (uint32_t c = 0; c < s->n_chunks; c++) {
            kv_ref *f = &s->chunks[c];
            RDID(&r, f->chunk_id);
            RDID(&r, f->object_key);
            RDID(&r, f->digest);
            RD(&r, 8, f->epoch);
            RD(&r, 4, f->plain_bytes);
            RD(&r, 4, f->object_bytes);
        }
    }
    TRY(rd_finish(&r));
    TRY(canonical(&r, enc_manifest, &m, "manifest"));
    if (semantic) TRY(kv_validate_manifest(&m, err));
    *out = m;
    return 0;
}

/* ---- validation -------------------------------------------------------- */

static bool zero32(const uint8_t *p) {
    uint8_t acc = 0;
    for (int i = 0; i < 32; i++) acc |= p[i];
    return acc == 0;
}

static bool mul64(uint64_t a, uint64_t b, uint64_t *out) { return !__builtin_mul_overflow(a, b, out); }
static bool add64(uint64_t a, uint64_t b, uint64_t *out) { return !__builtin_add_overflow(a, b, out); }

static const kv_fstate *fstate_find(const kv_family *f, const kv_key *k) {
    /* states are in canonical order once validated: binary search */
    uint32_t lo = 0, hi = f->n_states;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        int c = kv_key_cmp(&f->states[mid].key, k);
        if (!c) return &f->states[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

/* Depth-first cycle check: color 0 new, 1 visiting, 2 done. */
static int visit(const kv_family *f, uint32_t i, uint8_t *color, mu_err *err) {
    if (color[i] == 2) return 0;
    if (color[i] == 1) return kv_fail(err, KV_GRAPH, "state dependency cycle");
    color[i] = 1;
    const kv_fstate *s = &f->states[i];
    for (unsigned d = 0; d < s->n_deps; d++) {
        const kv_fstate *t = fstate_find(f, &s->deps[d]);
        TRY(visit(f, (uint32_t)(t - f->states), color, err));
    }
    color[i] = 2;
    return 0;
}

int kv_validate_family(const kv_family *f, mu_err *err) {
    if (zero32(f->abi) || zero32(f->topology) || zero32(f->shard_map))
        return kv_fail(err, KV_SEMANTICS, "representation family contains a zero identity");
    if (!f->page_tokens) return kv_fail(err, KV_SEMANTICS, "representation family page size must be nonzero");
    if (f->n_states < 1 || f->n_states > KV_MAX_STATES)
        return kv_fail(err, KV_BOUNDS, "family state count is outside bounds");
    /* order first (the dependency look-ups below rely on it); the reference
     * checks it state by state, in the same loop as the rest, so an earlier
     * state's other fault wins: keep that order */
    for (uint32_t i = 0; i < f->n_states; i++) {
        const kv_fstate *s = &f->states[i];
        if (s->key.len < 1 || s->key.len > KV_MAX_NAME || memchr(s->key.name, 0, s->key.len))
            return kv_fail(err, KV_SEMANTICS, "state key name is outside canonical bounds");
        if (i && kv_key_cmp(&f->states[i - 1].key, &s->key) >= 0)
            return kv_fail(err, KV_SEMANTICS, "family states are not unique canonical order");
        if (s->codec_version != 1) return kv_fail(err, KV_CODEC, "unsupported family codec version");
        if (s->rank == 0 || s->rank > KV_MAX_RANK || s->token_axis >= s->rank)
            return kv_fail(err, KV_SEMANTICS, "family token axis is outside its rank");
        int n_tok = 0, tok = -1;
        uint64_t el = 1;
        for (unsigned d = 0; d < s->rank; d++) {
            if (!s->dims[d]) {
                n_tok++;
                tok = (int)d;
            }
        }
        if (n_tok != 1 || tok != s->token_axis)
            return kv_fail(err, KV_SEMANTICS, "family must have exactly one declared token dimension");
        for (unsigned d = 0; d < s->rank; d++)
            if (s->dims[d] && !mul64(el, s->dims[d], &el))
                return kv_fail(err, KV_BOUNDS, "family elements-per-token overflows u64");
        if (el != s->elements || el == 0) return kv_fail(err, KV_SEMANTICS, "family elements-per-token is not canonical");
        if (!kv_dtype_width(s->dtype)) return kv_fail(err, KV_SEMANTICS, "family dtype has no fixed width");
        if (s->layout == KV_LAYOUT_CONTIGUOUS && s->axis_rule == KV_AXIS_GATHER)
            return kv_fail(err, KV_SEMANTICS, "contiguous family cannot require strided token gathering");
        if (f->mode == KV_MODE_PORTABLE && (s->layout != KV_LAYOUT_CONTIGUOUS || s->axis_rule == KV_AXIS_GATHER))
            return kv_fail(err, KV_SEMANTICS, "portable family requires contiguous direct token streams");
        for (unsigned d = 0; d < s->n_deps; d++) {
            const kv_key *k = &s->deps[d];
            if (!kv_key_cmp(k, &s->key)) return kv_fail(err, KV_GRAPH, "state depends on itself");
            /* membership needs the whole list in order: scan linearly here */
            bool found = false;
            for (uint32_t j = 0; j < f->n_states && !found; j++) found = !kv_key_cmp(&f->states[j].key, k);
            if (!found) return kv_fail(err, KV_GRAPH, "state dependency is missing");
            if (d && kv_key_cmp(&s->deps[d - 1], k) >= 0)
                return kv_fail(err, KV_GRAPH, "state dependencies are not unique canonical order");
        }
    }
    uint8_t *color = calloc(f->n_states, 1);
    if (!color) return mu_fail(err, MU_E_NOMEM, "kvpack: out of memory");
    int rc = 0;
    for (uint32_t i = 0; i < f->n_states && !rc; i++) rc = visit(f, i, color, err);
    free(color);
    return rc;
}

static int check_shape(const kv_shape *sh, const kv_fstate *f, uint64_t tokens, mu_err *err) {
    if (sh->rank != f->rank) return kv_fail(err, KV_SEMANTICS, "realized shape rank does not match family rank");
    for (unsigned i = 0; i < sh->rank; i++) {
        uint64_t want = f->dims[i] ? f->dims[i] : tokens;
        if (sh->dims[i] != want || ((i == f->token_axis) != (f->dims[i] == 0)))
            return kv_fail(err, KV_SEMANTICS, "realized shape does not satisfy static family dimensions");
    }
    return 0;
}

static int footprint(const kv_shape *sh, const uint64_t *st, uint64_t width, uint64_t *out, mu_err *err) {
    uint64_t last = 0, t;
    for (unsigned i = 0; i < sh->rank; i++)
        if (!mul64(sh->dims[i] - 1, st[i], &t) || !add64(last, t, &last))
            return kv_fail(err, KV_BOUNDS, "state physical footprint overflows u64");
    if (!add64(last, 1, &last) || !mul64(last, width, out))
        return kv_fail(err, KV_BOUNDS, "state physical footprint overflows u64");
    return 0;
}

static int shape_elements(const kv_shape *sh, uint64_t *out, mu_err *err) {
    uint64_t r = 1;
    for (unsigned i = 0; i < sh->rank; i++)
        if (!mul64(r, sh->dims[i], &r)) return kv_fail(err, KV_BOUNDS, "shape element count overflows u64");
    *out = r;
    return 0;
}

static int check_groups(const kv_manifest *m, mu_err *err) {
    const kv_family *f = &m->family;
    uint8_t *seen = calloc(f->n_states, 1);
    if (!seen) return mu_fail(err, MU_E_NOMEM, "kvpack: out of memory");
    int rc = 0;
    uint32_t prev_id = 0, n_seen = 0;
    for (uint32_t g = 0; g < m->schema.n_groups && !rc; g++) {
        const kv_group *G = &m->schema.groups[g];
        if (G->id == 0 || G->id <= prev_id) {
            rc = kv_fail(err, KV_SEMANTICS, "atomic groups are not unique canonical order");
            break;
        }
        prev_id = G->id;
        for (uint32_t k = 0; k < G->n_keys; k++) {
            const kv_fstate *s = fstate_find(f, &G->keys[k]);
            if (!s) {
                rc = kv_fail(err, KV_GRAPH, "atomic group names an unknown state");
                break;
            }
            if (k && kv_key_cmp(&G->keys[k - 1], &G->keys[k]) >= 0) {
                rc = kv_fail(err, KV_SEMANTICS, "atomic-group states are not unique canonical order");
                break;
            }
            if (seen[s - f->states]) {
                rc = kv_fail(err, KV_GRAPH, "state appears in multiple atomic groups");
                break;
            }
            seen[s - f->states] = 1;
            n_seen++;
        }
    }
    if (!rc && n_seen != f->n_states)
        rc = kv_fail(err, KV_GRAPH, "atomic groups do not cover the complete family inventory");
    free(seen);
    return rc;
}

int kv_validate_manifest(const kv_manifest *m, mu_err *err) {
    static const uint64_t max_restored = 4ull << 40;
    if (zero32(m->tenant)) return kv_fail(err, KV_SEMANTICS, "tenant namespace is zero");
    if (!m->epoch) return kv_fail(err, KV_SEMANTICS, "key epoch must be nonzero");
    if (zero32(m->model.weights) || zero32(m->model.adapters) || zero32(m->model.tokenizer) ||
        zero32(m->model.position) || zero32(m->model.math))
        return kv_fail(err, KV_SEMANTICS, "semantic model identity contains a zero component");
    if (zero32(m->cut.token_root) || zero32(m->cut.aux_root) || !m->cut.token_count)
        return kv_fail(err, KV_SEMANTICS, "input cut identity is invalid");
    TRY(kv_validate_family(&m->family, err));
    const kv_schema *S = &m->schema;
    uint64_t start, count, n = m->cut.token_count;
    if (S->kind == 0) {
        start = 0;
        count = n;
    } else {
        if (zero32(S->parent) || zero32(S->parent_cut.token_root) || zero32(S->parent_cut.aux_root))
            return kv_fail(err, KV_GRAPH, "delta parent identity is invalid");
        if (S->depth == 0 || S->depth > KV_MAX_DEPTH) return kv_fail(err, KV_GRAPH, "delta depth is outside 1..=7");
        if (memcmp(S->parent_cut.aux_root, m->cut.aux_root, 32) || !S->parent_cut.token_count ||
            S->parent_cut.token_count >= n)
            return kv_fail(err, KV_GRAPH, "delta parent cut is not a compatible strict prefix");
        start = S->parent_cut.token_count;
        count = n - start;
    }
    if (S->n_states != m->family.n_states || m->n_states != m->family.n_states || S->n_states > KV_MAX_STATES)
        return kv_fail(err, KV_BOUNDS, "manifest, family, and schema state counts differ or exceed bounds");
    TRY(check_groups(m, err));
    uint64_t seg_total = 0, all_total = 0;
    for (uint32_t i = 0; i < S->n_states; i++) {
        const kv_fstate *F = &m->family.states[i];
        const kv_rstate *R = &S->states[i];
        const kv_pstate *P = &m->states[i];
        if (kv_key_cmp(&F->key, &R->key) || kv_key_cmp(&R->key, &P->key))
            return kv_fail(err, KV_SEMANTICS, "family, realized schema, and payload state order differ");
        /* TailWindow (MANIFEST_V1.md): full manifests only; one trailing
         * range whose stored count replaces the token dimension of both
         * shapes, stored compactly (physical offset zero) */
        bool tail = F->axis_rule == KV_AXIS_TAIL;
        uint64_t s0 = start, cnt = count, full_tokens = n;
        if (tail) {
            if (S->kind != 0) return kv_fail(err, KV_SEMANTICS, "TailWindow state in a delta manifest");
            cnt = R->logical_count;
            if (cnt == 0 || cnt > n) return kv_fail(err, KV_SEMANTICS, "TailWindow range is empty or exceeds the cut");
            s0 = n - cnt;
            full_tokens = cnt;
        }
        TRY(check_shape(&R->full, F, full_tokens, err));
        TRY(check_shape(&R->segment, F, cnt, err));
        if (R->logical_start != s0 || R->logical_count != cnt || R->abs_pos != n || R->window != 0)
            return kv_fail(err, KV_SEMANTICS, "realized state range does not match the exact manifest cut");
        if (R->n_strides != R->full.rank) return kv_fail(err, KV_SEMANTICS, "realized state strides do not match its rank");
        for (unsigned d = 0; d < R->n_strides; d++)
            if (!R->strides[d]) return kv_fail(err, KV_SEMANTICS, "realized state strides do not match its rank");
        if (F->layout == KV_LAYOUT_CONTIGUOUS) {
            uint64_t want = 1;
            for (int d = R->full.rank - 1; d >= 0; d--) {
                if (R->strides[d] != want) return kv_fail(err, KV_SEMANTICS, "contiguous state has noncanonical strides");
                if (!mul64(want, R->full.dims[d], &want))
                    return kv_fail(err, KV_BOUNDS, "contiguous stride calculation overflows u64");
            }
        }
        uint64_t width = kv_dtype_width(F->dtype), el = 0, seg_bytes, all_bytes, off, span, all_phys, bpt;
        if (!width) return kv_fail(err, KV_SEMANTICS, "family dtype has no fixed width");
        TRY(shape_elements(&R->segment, &el, err));
        if (!mul64(el, width, &seg_bytes)) return kv_fail(err, KV_BOUNDS, "segment byte count overflows u64");
        TRY(shape_elements(&R->full, &el, err));
        if (!mul64(el, width, &all_bytes)) return kv_fail(err, KV_BOUNDS, "complete byte count overflows u64");
        if (tail) off = 0;
        else if (!mul64(s0, R->strides[F->token_axis], &off) || !mul64(off, width, &off))
            return kv_fail(err, KV_BOUNDS, "physical token offset overflows u64");
        TRY(footprint(&R->segment, R->strides, width, &span, err));
        TRY(footprint(&R->full, R->strides, width, &all_phys, err));
        if (R->phys_off != off || R->phys_span != span || R->phys_complete != all_phys)
            return kv_fail(err, KV_SEMANTICS, "realized physical span is not canonical");
        if (!R->n_spans || R->n_spans > KV_MAX_CHUNKS || P->n_chunks != R->n_spans)
            return kv_fail(err, KV_BOUNDS, "state chunk count is outside bounds");
        if (!mul64(F->elements, width, &bpt)) return kv_fail(err, KV_BOUNDS, "bytes per token overflows u64");
        if (bpt == 0 || bpt > KV_MAX_PLAIN) return kv_fail(err, KV_BOUNDS, "one state token does not fit in a bounded chunk");
        uint64_t tok = s0, boff;
        if (!mul64(s0, bpt, &boff)) return kv_fail(err, KV_BOUNDS, "state plaintext base offset overflows u64");
        for (uint32_t c = 0; c < R->n_spans; c++) {
            const kv_span *sp = &R->spans[c];
            const kv_ref *ref = &P->chunks[c];
            if (sp->token_start != tok || sp->token_count == 0 || sp->plain_off != boff)
                return kv_fail(err, KV_SEMANTICS, "chunk spans are not a contiguous token/byte partition");
            uint64_t bytes;
            if (!mul64(sp->token_count, bpt, &bytes)) return kv_fail(err, KV_BOUNDS, "chunk span byte count overflows u64");
            if (bytes != sp->plain_bytes || bytes == 0 || bytes > KV_MAX_PLAIN || ref->plain_bytes != sp->plain_bytes)
                return kv_fail(err, KV_SEMANTICS, "chunk span has a noncanonical plaintext size");
            if (zero32(ref->chunk_id) || zero32(ref->object_key) || zero32(ref->digest) || !ref->epoch)
                return kv_fail(err, KV_SEMANTICS, "chunk reference contains a zero identity");
            if (ref->object_bytes % KV_ALIGN || ref->object_bytes <= KV_ALIGN || ref->object_bytes > KV_MAX_OBJECT)
                return kv_fail(err, KV_SEMANTICS, "chunk object size is not aligned");
            if (!add64(tok, sp->token_count, &tok)) return kv_fail(err, KV_BOUNDS, "chunk token range overflows u64");
            if (!add64(boff, bytes, &boff)) return kv_fail(err, KV_BOUNDS, "chunk byte range overflows u64");
        }
        uint64_t end, end_off;
        if (!add64(s0, cnt, &end)) return kv_fail(err, KV_BOUNDS, "state token range overflows u64");
        if (!mul64(end, bpt, &end_off)) return kv_fail(err, KV_BOUNDS, "state plaintext end offset overflows u64");
        if (tok != end || boff != end_off)
            return kv_fail(err, KV_SEMANTICS, "chunk spans do not cover the complete realized state segment");
        if (!add64(seg_total, seg_bytes, &seg_total))
            return kv_fail(err, KV_BOUNDS, "segment restored byte total overflows u64");
        if (!add64(all_total, all_bytes, &all_total))
            return kv_fail(err, KV_BOUNDS, "complete restored byte total overflows u64");
    }
    if (S->segment_bytes != seg_total || S->complete_bytes != all_total || S->complete_bytes > max_restored)
        return kv_fail(err, KV_BOUNDS, "manifest restored byte totals are invalid");
    return 0;
}
