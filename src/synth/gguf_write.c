/* gguf_write.c: GGUF v3 writer.
 * Owns: metadata serialization (kept as one growing byte buffer in insertion
 * order), tensor infos and their aligned offsets, buffered streaming of the
 * data section, the "<path>.tmp then rename" discipline.
 * Does not own: which keys or tensors a model has (synth.c), reading (gguf.c).
 * Key design choice: tensor data is never held in memory; callers stream it
 * in tensor order through a 4 MiB buffer (writes at least that large go
 * straight to the file), and the writer inserts the alignment padding, so a
 * 17 GB model needs only the caller's working rows. */
#include "gguf_write.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../base/mem.h"
#include "../kern/quant.h"
#include "../gguf/gguf.h"

#define WBUF_BYTES (4u << 20)

typedef struct {
    char *name;
    uint32_t type;
    int n_dims;
    int64_t ne[MU_GGUF_MAX_DIMS];
    uint64_t offset; /* relative to the data section */
    uint64_t bytes;
} wtensor;

struct mu_gguf_writer {
    /* metadata, serialized */
    uint8_t *kv;
    size_t kv_len, kv_cap;
    uint64_t n_kv;
    char **keys;
    size_t n_keys_cap;
    /* tensors */
    wtensor *t;
    int n_t, cap_t;
    uint64_t data_bytes; /* end of the last tensor, unpadded */
    /* output */
    int fd;
    char *path, *tmp;
    uint8_t *buf;
    size_t buf_len;
    uint64_t written; /* data-section bytes written so far */
    int cur;          /* first tensor not yet complete */
    int state;        /* 0 building, 1 open, 2 closed, 3 failed */
};

/* ---- building ---------------------------------------------------------- */

int mu_gguf_writer_new(mu_gguf_writer **out, mu_err *err) {
    mu_gguf_writer *w = calloc(1, sizeof *w);
    if (!w) return mu_fail(err, MU_E_NOMEM, "gguf_write: out of memory");
    w->fd = -1;
    *out = w;
    return 0;
}

void mu_gguf_writer_free(mu_gguf_writer *w) {
    if (!w) return;
    if (w->fd >= 0) close(w->fd);
    if (w->tmp && w->state != 2) unlink(w->tmp);
    for (uint64_t i = 0; i < w->n_kv; i++) free(w->keys[i]);
    for (int i = 0; i < w->n_t; i++) free(w->t[i].name);
    free(w->keys);
    free(w->t);
    free(w->kv);
    free(w->buf);
    free(w->path);
    free(w->tmp);
    free(w);
}

static int kv_reserve(mu_gguf_writer *w, size_t more, mu_err *err) {
    size_t need;
    if (!mu_add_ok(w->kv_len, more, &need)) return mu_fail(err, MU_E_NOMEM, "gguf_write: metadata too large");
    if (need <= w->kv_cap) return 0;
    size_t cap = w->kv_cap ? w->kv_cap : 4096;
    while (cap < need) {
        if (!mu_mul_ok(cap, 2, &cap)) return mu_fail(err, MU_E_NOMEM, "gguf_write: metadata too large");
    }
    uint8_t *p = realloc(w->kv, cap);
    if (!p) return mu_fail(err, MU_E_NOMEM, "gguf_write: out of memory for metadata");
    w->kv = p;
    w->kv_cap = cap;
    return 0;
}

static void kv_put(mu_gguf_writer *w, const void *p, size_t n) {
    memcpy(w->kv + w->kv_len, p, n);
    w->kv_len += n;
}
static void kv_u32(mu_gguf_writer *w, uint32_t v) { kv_put(w, &v, 4); }
static void kv_u64(mu_gguf_writer *w, uint64_t v) { kv_put(w, &v, 8); }

static int building(mu_gguf_writer *w, mu_err *err) {
    if (w->state != 0) return mu_fail(err, MU_E_STATE, "gguf_write: metadata and tensors must be set before open");
    return 0;
}

/* Registers the key (rejecting duplicates), reserves room for its header
 * plus `payload` bytes and writes the key string and value type. */
static int kv_begin(mu_gguf_writer *w, const char *key, uint32_t type, size_t payload, mu_err *err) {
    int rc = building(w, err);
    if (rc) return rc;
    size_t klen = key ? strlen(key) : 0;
    if (klen == 0 || klen > 65535) return mu_fail(err, MU_E_ARG, "gguf_write: bad key name length: %zu", klen);
    for (uint64_t i = 0; i < w->n_kv; i++)
        if (!strcmp(w->keys[i], key)) return mu_fail(err, MU_E_ARG, "gguf_write: duplicate key: %s", key);
    size_t need;
    if (!mu_add_ok(klen + 12, payload, &need)) return mu_fail(err, MU_E_NOMEM, "gguf_write: value too large: %s", key);
    if ((rc = kv_reserve(w, need, err))) return rc;
    if (w->n_kv == w->n_keys_cap) {
        size_t cap = w->n_keys_cap ? w->n_keys_cap * 2 : 64;
        char **k = realloc(w->keys, cap * sizeof *k);
        if (!k) return mu_fail(err, MU_E_NOMEM, "gguf_write: out of memory for keys");
        w->keys = k;
        w->n_keys_cap = cap;
    }
    char *copy = strdup(key);
    if (!copy) return mu_fail(err, MU_E_NOMEM, "gguf_write: out of memory for keys");
    w->keys[w->n_kv++] = copy;
    kv_u64(w, klen);
    kv_put(w, key, klen);
    kv_u32(w, type);
    return 0;
}

static int set_scalar(mu_gguf_writer *w, const char *key, uint32_t type, const void *v, size_t n, mu_err *err) {
    int rc = kv_begin(w, key, type, n, err);
    if (rc) return rc;
    kv_put(w, v, n);
    return 0;
}

int mu_gguf_writer_set_u32(mu_gguf_writer *w, const char *key, uint32_t v, mu_err *err) {
    return set_scalar(w, key, MU_GGUF_U32, &v, 4, err);
}
int mu_gguf_writer_set_i32(mu_gguf_writer *w, const char *key, int32_t v, mu_err *err) {
    return set_scalar(w, key, MU_GGUF_I32, &v, 4, err);
}
int mu_gguf_writer_set_u64(mu_gguf_writer *w, const char *key, uint64_t v, mu_err *err) {
    return set_scalar(w, key, MU_GGUF_U64, &v, 8, err);
}
int mu_gguf_writer_set_f32(mu_gguf_writer *w, const char *key, float v, mu_err *err) {
    return set_scalar(w, key, MU_GGUF_F32, &v, 4, err);
}
int mu_gguf_writer_set_f64(mu_gguf_writer *w, const char *key, double v, mu_err *err) {
    return set_scalar(w, key, MU_GGUF_F64, &v, 8, err);
}
int mu_gguf_writer_set_bool(mu_gguf_writer *w, const char *key, bool v, mu_err *err) {
    uint8_t b = v ? 1 : 0;
    return set_scalar(w, key, MU_GGUF_BOOL, &b, 1, err);
}

int mu_gguf_writer_set_str(mu_gguf_writer *w, const char *key, const char *s, size_t len, mu_err *err) {
    if (!s && len) return mu_fail(err, MU_E_ARG, "gguf_write: NULL string for key: %s", key ? key : "?");
    int rc = kv_begin(w, key, MU_GGUF_STR, len + 8, err);
    if (rc) return rc;
    kv_u64(w, len);
    if (len) kv_put(w, s, len);
    return 0;
}


int mu_gguf_writer_set_arr(mu_gguf_writer *w, const char *key, uint32_t elem_type, const void *data,
                           uint64_t n, mu_err *err) {
    size_t eb = mu_gguf_scalar_bytes(elem_type), bytes;
    if (!eb) return mu_fail(err, MU_E_ARG, "gguf_write: bad array element type: %u", elem_type);
    if (n > SIZE_MAX || !mu_mul_ok((size_t)n, eb, &bytes) || bytes > SIZE_MAX - 16)
        return mu_fail(err, MU_E_NOMEM, "gguf_write: array too large: %s", key ? key : "?");
    if (!data && n) return mu_fail(err, MU_E_ARG, "gguf_write: NULL array for key: %s", key ? key : "?");
    if (elem_type == MU_GGUF_BOOL)
        for (uint64_t i = 0; i < n; i++)
            if (((const uint8_t *)data)[i] > 1)
                return mu_fail(err, MU_E_ARG, "gguf_write: bool array %s holds %u", key ? key : "?",
                               ((const uint8_t *)data)[i]);
    int rc = kv_begin(w, key, MU_GGUF_ARR, bytes + 12, err);
    if (rc) return rc;
    kv_u32(w, elem_type);
    kv_u64(w, n);
    if (bytes) kv_put(w, data, bytes);
    return 0;
}

int mu_gguf_writer_set_arr_str(mu_gguf_writer *w, const char *key, const char *const *s,
                               const size_t *lens, uint64_t n, mu_err *err) {
    size_t total = 12;
    for (uint64_t i = 0; i < n; i++) {
        if (!s[i]) return mu_fail(err, MU_E_ARG, "gguf_write: NULL string %llu in %s", (unsigned long long)i,
                                  key ? key : "?");
        size_t len = lens ? lens[i] : strlen(s[i]);
        if (!mu_add_ok(total, len + 8, &total)) return mu_fail(err, MU_E_NOMEM, "gguf_write: array too large");
    }
    int rc = kv_begin(w, key, MU_GGUF_ARR, total, err);
    if (rc) return rc;
    kv_u32(w, MU_GGUF_STR);
    kv_u64(w, n);
    for (uint64_t i = 0; i < n; i++) {
        size_t len = lens ? lens[i] : strlen(s[i]);
        kv_u64(w, len);
        kv_put(w, s[i], len);
    }
    return 0;
}

static uint64_t align_up(uint64_t v) { return (v + MU_GGUF_ALIGN - 1) / MU_GGUF_ALIGN * MU_GGUF_ALIGN; }

int mu_gguf_writer_add_tensor(mu_gguf_writer *w, const char *name, uint32_t type, int n_dims,
                              const int64_t *ne, mu_err *err) {
    int rc = building(w, err);
    if (rc) return rc;
    size_t nlen = name ? strlen(name) : 0;
    if (nlen == 0 || nlen >= 64) return mu_fail(err, MU_E_ARG, "gguf_write: bad tensor name length: %zu", nlen);
    if (n_dims < 1 || n_dims > MU_GGUF_MAX_DIMS)
        return mu_fail(err, MU_E_ARG, "gguf_write: tensor %s: bad dimension count: %d", name, n_dims);
    const mu_type_info *ti = mu_type_get(type);
    if (ti->blck == 0) return mu_fail(err, MU_E_ARG, "gguf_write: tensor %s: unknown type: %u", name, type);
    uint64_t n_rows = 1;
    for (int d = 0; d < n_dims; d++) {
        if (ne[d] <= 0 || ne[d] > (int64_t)1 << 40)
            return mu_fail(err, MU_E_ARG, "gguf_write: tensor %s: bad dimension %d: %lld", name, d, (long long)ne[d]);
        if (d > 0) {
            if (__builtin_mul_overflow(n_rows, (uint64_t)ne[d], &n_rows))
                return mu_fail(err, MU_E_ARG, "gguf_write: tensor %s: too large", name);
        }
    }
    uint64_t row = mu_type_row_bytes(type, ne[0]), bytes;
    if (row == 0)
        return mu_fail(err, MU_E_ARG, "gguf_write: tensor %s: row of %lld is not a multiple of %s's block %d", name,
                       (long long)ne[0], ti->name, ti->blck);
    if (__builtin_mul_overflow(row, n_rows, &bytes)) return mu_fail(err, MU_E_ARG, "gguf_write: tensor %s: too large", name);
    for (int i = 0; i < w->n_t; i++)
        if (!strcmp(w->t[i].name, name)) return mu_fail(err, MU_E_ARG, "gguf_write: duplicate tensor: %s", name);
    if (w->n_t == w->cap_t) {
        int cap = w->cap_t ? w->cap_t * 2 : 64;
        wtensor *t = realloc(w->t, (size_t)cap * sizeof *t);
        if (!t) return mu_fail(err, MU_E_NOMEM, "gguf_write: out of memory for tensors");
        w->t = t;
        w->cap_t = cap;
    }
    wtensor *t = &w->t[w->n_t];
    memset(t, 0, sizeof *t);
    if (!(t->name = strdup(name))) return mu_fail(err, MU_E_NOMEM, "gguf_write: out of memory for tensors");
    t->type = type;
    t->n_dims = n_dims;
    for (int d = 0; d < n_dims; d++) t->ne[d] = ne[d];
    t->offset = align_up(w->data_bytes);
    t->bytes = bytes;
    w->data_bytes = t->offset + bytes;
    w->n_t++;
    return 0;
}

uint64_t mu_gguf_writer_tensor_bytes(const mu_gguf_writer *w, int i) {
    return i >= 0 && i < w->n_t ? w->t[i].bytes : 0;
}

static uint64_t header_bytes(const mu_gguf_writer *w) {
    uint64_t h = 4 + 4 + 8 + 8 + w->kv_len;
    for (int i = 0; i < w->n_t; i++) h += 8 + strlen(w->t[i].name) + 4 + 8 * (uint64_t)w->t[i].n_dims + 4 + 8;
    return h;
}

uint64_t mu_gguf_writer_file_bytes(const mu_gguf_writer *w) {
    return align_up(header_bytes(w)) + w->data_bytes;
}

/* ---- output ------------------------------------------------------------ */

static int fd_write(mu_gguf_writer *w, const void *p, size_t n, mu_err *err) {
    const uint8_t *b = p;
    while (n) {
        ssize_t k = write(w->fd, b, n > (1u << 30) ? (1u << 30) : n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            w->state = 3;
            return mu_fail(err, MU_E_IO, "gguf_write: write failed: %s: %s", w->tmp, k < 0 ? strerror(errno) : "no progress");
        }
        b += k;
        n -= (size_t)k;
    }
    return 0;
}

static int flush_buf(mu_gguf_writer *w, mu_err *err) {
    int rc = w->buf_len ? fd_write(w, w->buf, w->buf_len, err) : 0;
    w->buf_len = 0;
    return rc;
}

/* Buffered raw output. */
static int out_put(mu_gguf_writer *w, const void *p, size_t n, mu_err *err) {
    if (n == 0) return 0;
    if (w->buf_len + n > WBUF_BYTES) {
        int rc = flush_buf(w, err);
        if (rc) return rc;
        if (n >= WBUF_BYTES) return fd_write(w, p, n, err);
    }
    memcpy(w->buf + w->buf_len, p, n);
    w->buf_len += n;
    return 0;
}

static int out_zeros(mu_gguf_writer *w, size_t n, mu_err *err) {
    static const uint8_t z[MU_GGUF_ALIGN];
    while (n) {
        size_t k = n < sizeof z ? n : sizeof z;
        int rc = out_put(w, z, k, err);
        if (rc) return rc;
        n -= k;
    }
    return 0;
}

int mu_gguf_writer_open(mu_gguf_writer *w, const char *path, mu_err *err) {
    int rc = building(w, err);
    if (rc) return rc;
    size_t plen = path ? strlen(path) : 0;
    if (!plen) return mu_fail(err, MU_E_ARG, "gguf_write: empty output path");
    w->path = strdup(path);
    w->tmp = malloc(plen + 5);
    w->buf = malloc(WBUF_BYTES);
    if (!w->path || !w->tmp || !w->buf) return mu_fail(err, MU_E_NOMEM, "gguf_write: out of memory");
    memcpy(w->tmp, path, plen);
    memcpy(w->tmp + plen, ".tmp", 5);
    w->fd = open(w->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (w->fd < 0) {
        int e = errno;
        free(w->tmp);
        w->tmp = NULL; /* nothing of ours to remove */
        return mu_fail(err, MU_E_IO, "gguf_write: cannot create: %s.tmp: %s", path, strerror(e));
    }
    w->state = 1;
    uint32_t magic_version[2] = {0x46554747u /* "GGUF" */, 3};
    uint64_t counts[2] = {(uint64_t)w->n_t, w->n_kv};
    if ((rc = out_put(w, magic_version, 8, err)) || (rc = out_put(w, counts, 16, err)) ||
        (rc = out_put(w, w->kv, w->kv_len, err)))
        return rc;
    for (int i = 0; i < w->n_t; i++) {
        const wtensor *t = &w->t[i];
        uint64_t nlen = strlen(t->name);
        uint32_t nd = (uint32_t)t->n_dims;
        if ((rc = out_put(w, &nlen, 8, err)) || (rc = out_put(w, t->name, nlen, err)) || (rc = out_put(w, &nd, 4, err)))
            return rc;
        for (int d = 0; d < t->n_dims; d++) {
            uint64_t v = (uint64_t)t->ne[d];
            if ((rc = out_put(w, &v, 8, err))) return rc;
        }
        if ((rc = out_put(w, &t->type, 4, err)) || (rc = out_put(w, &t->offset, 8, err))) return rc;
    }
    uint64_t h = header_bytes(w);
    return out_zeros(w, align_up(h) - h, err);
}

int mu_gguf_writer_write(mu_gguf_writer *w, const void *data, size_t n, mu_err *err) {
    if (w->state != 1) return mu_fail(err, MU_E_STATE, "gguf_write: write before open or after failure");
    const uint8_t *p = data;
    while (n) {
        /* find the tensor holding position `written` (padding first if between tensors) */
        int i = w->cur;
        while (i < w->n_t && w->t[i].offset + w->t[i].bytes <= w->written) i++;
        w->cur = i;
        if (i == w->n_t) {
            w->state = 3;
            return mu_fail(err, MU_E_ARG, "gguf_write: more tensor data than declared: %s", w->tmp);
        }
        int rc;
        if (w->written < w->t[i].offset) {
            if ((rc = out_zeros(w, w->t[i].offset - w->written, err))) return rc;
            w->written = w->t[i].offset;
        }
        uint64_t room = w->t[i].offset + w->t[i].bytes - w->written;
        size_t k = n < room ? n : (size_t)room;
        if ((rc = out_put(w, p, k, err))) return rc;
        w->written += k;
        p += k;
        n -= k;
    }
    return 0;
}

int mu_gguf_writer_close(mu_gguf_writer *w, mu_err *err) {
    if (w->state != 1) return mu_fail(err, MU_E_STATE, "gguf_write: close before open or after failure");
    if (w->written != w->data_bytes) {
        w->state = 3;
        return mu_fail(err, MU_E_ARG, "gguf_write: %llu of %llu tensor data bytes written: %s",
                       (unsigned long long)w->written, (unsigned long long)w->data_bytes, w->tmp);
    }
    int rc = flush_buf(w, err);
    if (rc) return rc;
    int fd = w->fd;
    w->fd = -1;
    if (close(fd) != 0) {
        w->state = 3;
        return mu_fail(err, MU_E_IO, "gguf_write: close failed: %s: %s", w->tmp, strerror(errno));
    }
    if (rename(w->tmp, w->path) != 0) {
        w->state = 3;
        return mu_fail(err, MU_E_IO, "gguf_write: rename failed: %s: %s", w->path, strerror(errno));
    }
    w->state = 2;
    return 0;
}
