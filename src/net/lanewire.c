/* lanewire.c: the prefill lane's frames and manifest (lanewire.h,
 * docs/lane.md "Wire format").
 * Owns: encoding, strict decoding (every byte accounted for, every field in
 * range, reserved bytes zero), the HMAC seal, the expected chunk order.
 * Does not own: I/O, sessions, the ledger.
 * Design: the decoder derives everything it expects (layer table, chunk
 * order, sizes) from its own request and model; the wire only has to agree,
 * so a frame that differs in any field is refused before its rows are
 * looked at, and nothing is installed before the SEAL verifies. */
#include "lanewire.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

/* ---- little-endian helpers ------------------------------------------------ */

static void put32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void put64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t get64(const uint8_t *p) { return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32; }

static int fail(mu_err *err, int code, const char *reason, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail(mu_err *err, int code, const char *reason, const char *fmt, ...) {
    char d[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(d, sizeof d, fmt, ap);
    va_end(ap);
    return mu_fail(err, code, "lane: %s: %s", reason, d);
}
#define FMT(reason, ...) fail(err, MU_E_FORMAT, reason, __VA_ARGS__)
#define BAD(reason, ...) fail(err, MU_E_STATE, reason, __VA_ARGS__)

const char *lane_reason(const mu_err *err) {
    static const char *const words[] = {"frame", "limit", "order", "digest", "seal", "identity", "request",
                                         "layout", "stale", "abort", "busy", "auth", "io", "timeout", NULL};
    if (!err || strncmp(err->msg, "lane: ", 6)) return NULL;
    for (int i = 0; words[i]; i++) {
        size_t l = strlen(words[i]);
        if (!strncmp(err->msg + 6, words[i], l) && err->msg[6 + l] == ':') return words[i];
    }
    return NULL;
}

/* ---- crypto ---------------------------------------------------------------- */

void lane_sha256(const void *p, size_t n, uint8_t out[32]) {
    unsigned len = 32;
    EVP_Digest(p, n, out, &len, EVP_sha256(), NULL);
}

void lane_hmac(const uint8_t key[32], const char *label, const void *p, size_t n, uint8_t out[32]) {
    /* HMAC-SHA-256 over label || 0 || bytes */
    EVP_MAC *mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
    EVP_MAC_CTX *ctx = mac ? EVP_MAC_CTX_new(mac) : NULL;
    MU_ASSERT(ctx);
    OSSL_PARAM params[2] = {OSSL_PARAM_construct_utf8_string("digest", (char *)"SHA256", 0), OSSL_PARAM_construct_end()};
    size_t len = 0;
    MU_ASSERT(EVP_MAC_init(ctx, key, 32, params) == 1);
    EVP_MAC_update(ctx, (const unsigned char *)label, strlen(label) + 1);
    if (n) EVP_MAC_update(ctx, p, n);
    MU_ASSERT(EVP_MAC_final(ctx, out, &len, 32) == 1 && len == 32);
    EVP_MAC_CTX_free(ctx);
    EVP_MAC_free(mac);
}

static void words_digest(const char *label, const uint32_t *tokens, uint32_t n, uint8_t out[32]) {
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    MU_ASSERT(c);
    EVP_DigestInit_ex(c, EVP_sha256(), NULL);
    EVP_DigestUpdate(c, label, strlen(label) + 1);
    uint8_t b[4 * 256];
    for (uint32_t i = 0; i < n;) {
        uint32_t k = 0;
        for (; k < 256 && i < n; k++, i++) put32(b + 4 * k, tokens[i]);
        EVP_DigestUpdate(c, b, 4 * k);
    }
    unsigned len = 32;
    EVP_DigestFinal_ex(c, out, &len);
    EVP_MD_CTX_free(c);
}

void lane_token_digest(const uint32_t *tokens, uint32_t n, uint8_t out[32]) {
    words_digest("muser/lane/v1/tokens", tokens, n, out);
}

void lane_runs_digest(const uint32_t *runs, uint32_t n, uint8_t out[32]) { words_digest("muser/lane/v3/runs", runs, n, out); }

bool lane_eq(const void *a, const void *b, size_t n) { return CRYPTO_memcmp(a, b, n) == 0; }

static bool class_char(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-'; }

bool lane_class_put(char out[LANE_CLASS_LEN], const char *name) {
    size_t l = strlen(name);
    memset(out, 0, LANE_CLASS_LEN);
    if (!l || l >= LANE_CLASS_LEN) return false;
    for (size_t i = 0; i < l; i++)
        if (!class_char(name[i])) return false;
    memcpy(out, name, l);
    return true;
}

bool lane_class_ok(const char f[LANE_CLASS_LEN]) {
    size_t l = 0;
    while (l < LANE_CLASS_LEN && f[l]) {
        if (!class_char(f[l])) return false;
        l++;
    }
    if (!l || l == LANE_CLASS_LEN) return false;
    for (size_t i = l; i < LANE_CLASS_LEN; i++)
        if (f[i]) return false;
    return true;
}

/* ---- frames ------------------------------------------------------------------ */

void lane_frame_header(uint8_t out[LANE_HDR], unsigned type, uint32_t len) {
    memcpy(out, LANE_MAGIC, 4);
    out[4] = (uint8_t)type;
    out[5] = out[6] = out[7] = 0;
    put32(out + 8, len);
}

static uint32_t type_limit(unsigned type) {
    switch (type) {
    case LANE_HELLO: return 256 + 8u * LANE_MAX_TOKENS;
    case LANE_LAYER: return LANE_MAX_FRAME;
    case LANE_BEGIN: case LANE_ABORT: case LANE_ACK: case LANE_INFO: return LANE_MAX_SMALL;
    case LANE_PING: return UINT32_MAX; /* any length is refused below; 0 is the only one */
    case LANE_SEAL: return LANE_MAX_SMALL + 32u * LANE_MAX_CHUNKS;
    default: return 0;
    }
}

int lane_frame_parse(const uint8_t hdr[LANE_HDR], unsigned *type, uint32_t *len, mu_err *err) {
    if (memcmp(hdr, LANE_MAGIC, 4)) return FMT("frame", "bad magic %02x%02x%02x%02x", hdr[0], hdr[1], hdr[2], hdr[3]);
    if (hdr[5] || hdr[6] || hdr[7]) return FMT("frame", "reserved header bytes are not zero");
    unsigned t = hdr[4];
    uint32_t lim = type_limit(t), l = get32(hdr + 8);
    if (!lim) return FMT("frame", "unknown frame type %u", t);
    if (t == LANE_PING && l) return FMT("frame", "PING of %u bytes (it is empty)", l);
    if (l > lim) return FMT("limit", "frame type %u of %u bytes exceeds %u", t, l, lim);
    *type = t;
    *len = l;
    return 0;
}

/* ---- HELLO -------------------------------------------------------------------- */
/* version u32, ask u32, then
 *   HANDOFF: request_id 16, identity 32, kclass 32, n_ctx u32, step u32, n_have u32, n_ship u32,
 *            n_runs u32, n_ship x u32 token, n_runs x u32 run
 *   ENROLL:  secret 32
 *   PROBE:   nothing */

#define HELLO_FIXED 108u

int lane_hello_encode(const lane_hello *h, uint8_t **out, size_t *n, mu_err *err) {
    size_t len = 8;
    if (h->ask == LANE_ASK_HANDOFF) {
        if (h->n_ship > LANE_MAX_TOKENS || h->n_runs > LANE_MAX_TOKENS)
            return FMT("limit", "%u positions or %u runs exceed %u", h->n_ship, h->n_runs, LANE_MAX_TOKENS);
        len = HELLO_FIXED + 4 * (size_t)h->n_ship + 4 * (size_t)h->n_runs;
    } else if (h->ask == LANE_ASK_ENROLL) {
        len += 32;
    }
    uint8_t *p = malloc(len);
    if (!p) return mu_fail(err, MU_E_NOMEM, "lane: out of memory");
    put32(p, h->version);
    put32(p + 4, h->ask);
    if (h->ask == LANE_ASK_HANDOFF) {
        memcpy(p + 8, h->request_id, 16);
        memcpy(p + 24, h->identity, 32);
        memcpy(p + 56, h->kclass, LANE_CLASS_LEN);
        put32(p + 88, h->n_ctx);
        put32(p + 92, h->step);
        put32(p + 96, h->n_have);
        put32(p + 100, h->n_ship);
        put32(p + 104, h->n_runs);
        for (uint32_t i = 0; i < h->n_ship; i++) put32(p + HELLO_FIXED + 4 * i, h->tokens[i]);
        for (uint32_t i = 0; i < h->n_runs; i++) put32(p + HELLO_FIXED + 4 * ((size_t)h->n_ship + i), h->runs[i]);
    } else if (h->ask == LANE_ASK_ENROLL) {
        memcpy(p + 8, h->secret, 32);
    }
    *out = p;
    *n = len;
    return 0;
}

int lane_hello_decode(const uint8_t *p, size_t n, lane_hello *h, mu_err *err) {
    memset(h, 0, sizeof *h);
    if (n < 8) return FMT("frame", "HELLO of %zu bytes is truncated", n);
    h->version = get32(p);
    h->ask = get32(p + 4);
    if (h->version != LANE_VERSION) return FMT("frame", "protocol version %u (this end speaks %u)", h->version, LANE_VERSION);
    if (h->ask == LANE_ASK_PROBE) {
        if (n != 8) return FMT("frame", "PROBE hello of %zu bytes, want 8", n);
        return 0;
    }
    if (h->ask == LANE_ASK_ENROLL) {
        if (n != 40) return FMT("frame", "ENROLL hello of %zu bytes, want 40", n);
        memcpy(h->secret, p + 8, 32);
        return 0;
    }
    if (h->ask != LANE_ASK_HANDOFF) return FMT("frame", "unknown ask %u", h->ask);
    if (n < HELLO_FIXED) return FMT("frame", "HANDOFF hello of %zu bytes is truncated", n);
    memcpy(h->request_id, p + 8, 16);
    memcpy(h->identity, p + 24, 32);
    memcpy(h->kclass, p + 56, LANE_CLASS_LEN);
    h->n_ctx = get32(p + 88);
    h->step = get32(p + 92);
    h->n_have = get32(p + 96);
    h->n_ship = get32(p + 100);
    h->n_runs = get32(p + 104);
    if (!lane_class_ok(h->kclass)) return FMT("frame", "HANDOFF hello: the kernel class is not a name");
    if (h->n_ship < 1 || h->n_ship > LANE_MAX_TOKENS) return FMT("limit", "%u positions asked (1..%u)", h->n_ship, LANE_MAX_TOKENS);
    if (h->step < 1 || h->step > 4096) return FMT("limit", "step %u (1..4096)", h->step);
    if (h->n_have >= h->n_ship) return FMT("limit", "a delta from %u positions of %u (below it)", h->n_have, h->n_ship);
    if ((h->n_runs == 0) != (h->n_have == 0) || h->n_runs > h->n_have)
        return FMT("limit", "%u runs for a held prefix of %u positions", h->n_runs, h->n_have);
    if (h->n_ctx < h->n_ship || h->n_ctx > 16u * 1024 * 1024) return FMT("limit", "context %u for %u positions", h->n_ctx, h->n_ship);
    size_t want = HELLO_FIXED + 4 * (size_t)h->n_ship + 4 * (size_t)h->n_runs;
    if (n != want) return FMT("frame", "HANDOFF hello of %zu bytes, want %zu", n, want);
    h->token_le = p + HELLO_FIXED;
    h->run_le = p + HELLO_FIXED + 4 * (size_t)h->n_ship;
    uint64_t sum = 0;
    for (uint32_t i = 0; i < h->n_runs; i++) {
        uint32_t len = get32(h->run_le + 4 * i) & ~LANE_RUN_SOLO;
        if (len < 1) return FMT("limit", "run %u of the held prefix is empty", i);
        sum += len;
    }
    if (sum != h->n_have) return FMT("limit", "the held prefix's runs cover %llu positions, not %u", (unsigned long long)sum, h->n_have);
    return 0;
}

void lane_hello_tokens(const lane_hello *h, uint32_t *out) {
    for (uint32_t i = 0; i < h->n_ship; i++) out[i] = get32(h->token_le + 4 * i);
}

void lane_hello_runs(const lane_hello *h, uint32_t *out) {
    for (uint32_t i = 0; i < h->n_runs; i++) out[i] = get32(h->run_le + 4 * i);
}

/* ---- manifest ------------------------------------------------------------------ */

void lane_layers_plan(lane_manifest *m, int n_layer, const bool *swa, int n_swa) {
    m->n_layer = (uint32_t)n_layer;
    for (int il = 0; il < n_layer && il < LANE_MAX_LAYERS; il++) {
        lane_layer *L = &m->layers[il];
        L->cls = swa[il] ? LANE_CLASS_SLIDING : LANE_CLASS_FULL;
        uint32_t keep = swa[il] && n_swa > 0 && (uint32_t)n_swa < m->n_ship ? (uint32_t)n_swa : m->n_ship;
        L->lo = m->n_ship - keep > m->n_have ? m->n_ship - keep : m->n_have;
        L->count = m->n_ship - L->lo;
    }
}

static bool chunk_iter(const lane_manifest *m, uint32_t want, uint32_t *count, uint32_t *il, uint32_t *pos0,
                       uint32_t *nn) {
    uint32_t k = 0;
    for (uint64_t a = m->n_have; a < m->n_ship; a += m->step) {
        uint32_t b = (uint32_t)(a + m->step < m->n_ship ? a + m->step : m->n_ship);
        for (uint32_t l = 0; l < m->n_layer; l++) {
            uint32_t lo = m->layers[l].lo > a ? m->layers[l].lo : (uint32_t)a;
            if (lo >= b) continue;
            if (k == want && il) {
                *il = l;
                *pos0 = lo;
                *nn = b - lo;
                return true;
            }
            k++;
        }
    }
    if (count) *count = k;
    return false;
}

uint32_t lane_chunk_count(const lane_manifest *m) {
    uint32_t k = 0;
    chunk_iter(m, UINT32_MAX, &k, NULL, NULL, NULL);
    return k;
}

bool lane_chunk_at(const lane_manifest *m, uint32_t i, uint32_t *il, uint32_t *pos0, uint32_t *n) {
    return chunk_iter(m, i, NULL, il, pos0, n);
}

/* header: "MULM" version u32, request_id 16, identity 32, kclass 32,
 * token_digest 32, runs_digest 32, n_ctx u32, step u32, n_have u32, n_ship u32,
 * generation u64, key_epoch u32, row_bytes u32, n_layer u32, n_layer x
 * (class u8, 3 zero bytes, lo u32, count u32), n_chunks u32 */
#define MF_FIXED (4 + 4 + 16 + 32 + LANE_CLASS_LEN + 32 + 32 + 16 + 8 + 4 + 4 + 4)

static size_t mf_bytes(const lane_manifest *m) { return MF_FIXED + 12 * (size_t)m->n_layer + 4; }

int lane_manifest_encode(const lane_manifest *m, uint8_t **out, size_t *n, mu_err *err) {
    if (m->n_layer < 1 || m->n_layer > LANE_MAX_LAYERS) return FMT("limit", "%u layers", m->n_layer);
    size_t len = mf_bytes(m);
    uint8_t *p = malloc(len), *q = p;
    if (!p) return mu_fail(err, MU_E_NOMEM, "lane: out of memory");
    memcpy(q, "MULM", 4), q += 4;
    put32(q, LANE_VERSION), q += 4;
    memcpy(q, m->request_id, 16), q += 16;
    memcpy(q, m->identity, 32), q += 32;
    memcpy(q, m->kclass, LANE_CLASS_LEN), q += LANE_CLASS_LEN;
    memcpy(q, m->token_digest, 32), q += 32;
    memcpy(q, m->runs_digest, 32), q += 32;
    put32(q, m->n_ctx), q += 4;
    put32(q, m->step), q += 4;
    put32(q, m->n_have), q += 4;
    put32(q, m->n_ship), q += 4;
    put64(q, m->generation), q += 8;
    put32(q, m->key_epoch), q += 4;
    put32(q, m->row_bytes), q += 4;
    put32(q, m->n_layer), q += 4;
    for (uint32_t l = 0; l < m->n_layer; l++) {
        q[0] = m->layers[l].cls;
        q[1] = q[2] = q[3] = 0;
        put32(q + 4, m->layers[l].lo);
        put32(q + 8, m->layers[l].count);
        q += 12;
    }
    put32(q, m->n_chunks), q += 4;
    MU_ASSERT((size_t)(q - p) == len);
    *out = p;
    *n = len;
    return 0;
}

/* Decodes exactly the header at p (n its bytes) and validates it alone. */
int lane_manifest_decode(const uint8_t *p, size_t n, lane_manifest *m, mu_err *err) {
    memset(m, 0, sizeof *m);
    if (n < MF_FIXED + 4) return FMT("frame", "manifest of %zu bytes is truncated", n);
    if (memcmp(p, "MULM", 4)) return FMT("frame", "manifest magic differs");
    if (get32(p + 4) != LANE_VERSION) return FMT("frame", "manifest version %u", get32(p + 4));
    const uint8_t *q = p + 8;
    memcpy(m->request_id, q, 16), q += 16;
    memcpy(m->identity, q, 32), q += 32;
    memcpy(m->kclass, q, LANE_CLASS_LEN), q += LANE_CLASS_LEN;
    memcpy(m->token_digest, q, 32), q += 32;
    memcpy(m->runs_digest, q, 32), q += 32;
    m->n_ctx = get32(q), q += 4;
    m->step = get32(q), q += 4;
    m->n_have = get32(q), q += 4;
    m->n_ship = get32(q), q += 4;
    m->generation = get64(q), q += 8;
    m->key_epoch = get32(q), q += 4;
    m->row_bytes = get32(q), q += 4;
    m->n_layer = get32(q), q += 4;
    if (m->n_layer < 1 || m->n_layer > LANE_MAX_LAYERS) return FMT("limit", "%u layers (1..%u)", m->n_layer, LANE_MAX_LAYERS);
    if (n != mf_bytes(m)) return FMT("frame", "manifest of %zu bytes, its %u layers need %zu", n, m->n_layer, mf_bytes(m));
    if (m->n_ship < 1 || m->n_ship > LANE_MAX_TOKENS) return FMT("limit", "%u positions", m->n_ship);
    if (m->step < 1 || m->step > 4096) return FMT("limit", "step %u", m->step);
    if (!lane_class_ok(m->kclass)) return FMT("frame", "manifest: the kernel class is not a name");
    if (m->n_have >= m->n_ship) return FMT("layout", "a delta from %u positions of %u", m->n_have, m->n_ship);
    if (m->n_ctx < m->n_ship) return FMT("layout", "context %u below %u positions", m->n_ctx, m->n_ship);
    if (m->row_bytes < 2 || m->row_bytes > LANE_MAX_ROW || m->row_bytes % 2) return FMT("limit", "row of %u bytes", m->row_bytes);
    if ((uint64_t)m->step * m->row_bytes * 2 + LANE_LAYER_HDR > LANE_MAX_FRAME)
        return FMT("limit", "a step of %u rows of %u bytes exceeds a frame", m->step, m->row_bytes);
    uint64_t total = 0;
    for (uint32_t l = 0; l < m->n_layer; l++, q += 12) {
        lane_layer *L = &m->layers[l];
        L->cls = q[0];
        if (q[1] || q[2] || q[3]) return FMT("frame", "layer %u: reserved bytes are not zero", l);
        if (L->cls != LANE_CLASS_FULL && L->cls != LANE_CLASS_SLIDING) return FMT("layout", "layer %u: class %u", l, L->cls);
        L->lo = get32(q + 4);
        L->count = get32(q + 8);
        if (L->count < 1 || (uint64_t)L->lo + L->count != m->n_ship || L->lo < m->n_have)
            return FMT("layout", "layer %u ships [%u, +%u), not a tail of %u positions from %u", l, L->lo, L->count,
                       m->n_ship, m->n_have);
        if (L->cls == LANE_CLASS_FULL && L->lo != m->n_have)
            return FMT("layout", "full layer %u starts at %u, not %u", l, L->lo, m->n_have);
        total += (uint64_t)L->count * m->row_bytes * 2;
    }
    if (total > LANE_MAX_TOTAL) return FMT("limit", "handoff of %llu bytes exceeds %llu", (unsigned long long)total, LANE_MAX_TOTAL);
    m->n_chunks = get32(q);
    uint32_t want = lane_chunk_count(m);
    if (m->n_chunks != want) return FMT("layout", "%u chunks declared, the layer table makes %u", m->n_chunks, want);
    return 0;
}

int lane_begin_encode(const lane_manifest *m, const uint8_t key[32], uint8_t **out, size_t *n, mu_err *err) {
    uint8_t *h;
    size_t hn;
    int rc = lane_manifest_encode(m, &h, &hn, err);
    if (rc) return rc;
    uint8_t *p = realloc(h, hn + 32);
    if (!p) {
        free(h);
        return mu_fail(err, MU_E_NOMEM, "lane: out of memory");
    }
    lane_hmac(key, "muser/lane/v1/begin", p, hn, p + hn);
    *out = p;
    *n = hn + 32;
    return 0;
}

int lane_begin_open(const uint8_t *p, size_t n, const uint8_t key[32], lane_manifest *m, mu_err *err) {
    if (n < 32 + MF_FIXED) return FMT("frame", "BEGIN of %zu bytes is truncated", n);
    uint8_t tag[32];
    lane_hmac(key, "muser/lane/v1/begin", p, n - 32, tag);
    if (!lane_eq(tag, p + n - 32, 32)) return BAD("seal", "the BEGIN manifest does not authenticate under this node's key");
    return lane_manifest_decode(p, n - 32, m, err);
}

int lane_seal_encode(const lane_manifest *m, const uint8_t (*digests)[32], const uint8_t key[32], uint8_t **out,
                     size_t *n, mu_err *err) {
    uint8_t *h;
    size_t hn;
    int rc = lane_manifest_encode(m, &h, &hn, err);
    if (rc) return rc;
    size_t len = hn + 32 * (size_t)m->n_chunks + 32;
    uint8_t *p = realloc(h, len);
    if (!p) {
        free(h);
        return mu_fail(err, MU_E_NOMEM, "lane: out of memory");
    }
    if (m->n_chunks) memcpy(p + hn, digests, 32 * (size_t)m->n_chunks);
    lane_hmac(key, "muser/lane/v1/seal", p, len - 32, p + len - 32);
    *out = p;
    *n = len;
    return 0;
}

int lane_seal_open(const uint8_t *p, size_t n, const uint8_t key[32], const lane_manifest *begin,
                   const uint8_t (*want)[32], mu_err *err) {
    size_t hn = mf_bytes(begin), len = hn + 32 * (size_t)begin->n_chunks + 32;
    if (n != len) return FMT("frame", "SEAL of %zu bytes, want %zu", n, len);
    uint8_t tag[32];
    lane_hmac(key, "muser/lane/v1/seal", p, n - 32, tag);
    if (!lane_eq(tag, p + n - 32, 32)) return BAD("seal", "the SEAL manifest does not authenticate under this node's key");
    uint8_t *h;
    size_t bn;
    int rc = lane_manifest_encode(begin, &h, &bn, err);
    if (rc) return rc;
    bool same = bn == hn && !memcmp(h, p, hn);
    free(h);
    if (!same) return BAD("seal", "the SEAL manifest differs from the BEGIN manifest");
    for (uint32_t i = 0; i < begin->n_chunks; i++)
        if (!lane_eq(p + hn + 32 * (size_t)i, want[i], 32))
            return BAD("digest", "chunk %u's rows differ from the digest the manifest seals", i);
    return 0;
}

/* ---- LAYER ------------------------------------------------------------------- */

void lane_layer_header(uint8_t out[LANE_LAYER_HDR], uint32_t seq, uint32_t il, uint32_t pos0, uint32_t n) {
    put32(out, seq);
    put32(out + 4, il);
    put32(out + 8, pos0);
    put32(out + 12, n);
}

int lane_layer_check(const uint8_t *p, size_t n, const lane_manifest *m, uint32_t i, const uint8_t **rows,
                     mu_err *err) {
    if (n < LANE_LAYER_HDR) return FMT("frame", "LAYER of %zu bytes is truncated", n);
    uint32_t seq = get32(p), il = get32(p + 4), pos0 = get32(p + 8), cnt = get32(p + 12);
    uint32_t wil, wpos, wn;
    if (i >= m->n_chunks || !lane_chunk_at(m, i, &wil, &wpos, &wn))
        return BAD("order", "LAYER frame %u after the %u the manifest declares", seq, m->n_chunks);
    if (seq != i) return BAD("order", "LAYER frame %u where frame %u belongs", seq, i);
    if (il != wil || pos0 != wpos || cnt != wn)
        return BAD("order", "frame %u holds layer %u positions [%u, +%u), want layer %u [%u, +%u)", i, il, pos0, cnt,
                   wil, wpos, wn);
    size_t want = LANE_LAYER_HDR + 2 * (size_t)cnt * m->row_bytes;
    if (n != want) return FMT("frame", "frame %u of %zu bytes, its rows need %zu", i, n, want);
    *rows = p + LANE_LAYER_HDR;
    return 0;
}

/* ---- ABORT, ACK, INFO ----------------------------------------------------------- */

int lane_abort_encode(uint32_t code, const char *reason, uint8_t **out, size_t *n, mu_err *err) {
    size_t l = strlen(reason);
    if (l > 1000) l = 1000;
    uint8_t *p = malloc(8 + l);
    if (!p) return mu_fail(err, MU_E_NOMEM, "lane: out of memory");
    put32(p, code);
    put32(p + 4, (uint32_t)l);
    memcpy(p + 8, reason, l);
    *out = p;
    *n = 8 + l;
    return 0;
}

int lane_abort_decode(const uint8_t *p, size_t n, uint32_t *code, char *reason, size_t cap, mu_err *err) {
    if (n < 8) return FMT("frame", "ABORT of %zu bytes is truncated", n);
    uint32_t l = get32(p + 4);
    if (l > 1000 || n != 8 + (size_t)l) return FMT("frame", "ABORT reason of %u bytes in %zu", l, n);
    *code = get32(p);
    size_t k = 0;
    for (uint32_t i = 0; i < l && k + 1 < cap; i++) reason[k++] = p[8 + i] >= 32 && p[8 + i] < 127 ? (char)p[8 + i] : '?';
    if (cap) reason[k] = 0;
    return 0;
}

void lane_ack_encode(const uint8_t request_id[16], bool ok, uint8_t out[20]) {
    memcpy(out, request_id, 16);
    put32(out + 16, ok ? 1 : 0);
}

int lane_ack_decode(const uint8_t *p, size_t n, uint8_t request_id[16], bool *ok, mu_err *err) {
    if (n != 20) return FMT("frame", "ACK of %zu bytes, want 20", n);
    uint32_t v = get32(p + 16);
    if (v > 1) return FMT("frame", "ACK result %u", v);
    memcpy(request_id, p, 16);
    *ok = v == 1;
    return 0;
}

/* version u32, key_epoch u32, identity 32, kclass 32, n_ctx_max u32, name length u32, name */
#define INFO_FIXED (48u + LANE_CLASS_LEN)

int lane_info_encode(const lane_info *i, uint8_t **out, size_t *n, mu_err *err) {
    size_t l = strnlen(i->name, sizeof i->name - 1);
    uint8_t *p = malloc(INFO_FIXED + l);
    if (!p) return mu_fail(err, MU_E_NOMEM, "lane: out of memory");
    put32(p, i->version);
    put32(p + 4, i->key_epoch);
    memcpy(p + 8, i->identity, 32);
    memcpy(p + 40, i->kclass, LANE_CLASS_LEN);
    put32(p + 40 + LANE_CLASS_LEN, i->n_ctx_max);
    put32(p + 44 + LANE_CLASS_LEN, (uint32_t)l);
    memcpy(p + INFO_FIXED, i->name, l);
    *out = p;
    *n = INFO_FIXED + l;
    return 0;
}

int lane_info_decode(const uint8_t *p, size_t n, lane_info *i, mu_err *err) {
    memset(i, 0, sizeof *i);
    if (n < INFO_FIXED) return FMT("frame", "INFO of %zu bytes is truncated", n);
    uint32_t l = get32(p + 44 + LANE_CLASS_LEN);
    if (l >= sizeof i->name || n != INFO_FIXED + (size_t)l) return FMT("frame", "INFO name of %u bytes in %zu", l, n);
    i->version = get32(p);
    i->key_epoch = get32(p + 4);
    if (i->version != LANE_VERSION) return FMT("frame", "protocol version %u (this end speaks %u)", i->version, LANE_VERSION);
    memcpy(i->identity, p + 8, 32);
    memcpy(i->kclass, p + 40, LANE_CLASS_LEN);
    if (!lane_class_ok(i->kclass)) return FMT("frame", "INFO: the kernel class is not a name");
    i->n_ctx_max = get32(p + 40 + LANE_CLASS_LEN);
    const uint8_t *nm = p + INFO_FIXED;
    for (uint32_t k = 0; k < l; k++) i->name[k] = nm[k] >= 32 && nm[k] < 127 ? (char)nm[k] : '?';
    return 0;
}
