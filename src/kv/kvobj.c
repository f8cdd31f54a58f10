/* kvobj.c: the kvpack v1 objects that carry bytes: codec frames (raw and
 * the PackBits-style lossless codec), authenticated chunk objects
 * (CHUNK_V1.md) and the authenticated manifest envelope (PACK_V1.md).
 * Owns: their layouts, the verification orders of the specification (all
 * framing before any digest, digests before keys, keys before AEAD, AEAD
 * before the codec, the codec before the content id), ChaCha20-Poly1305
 * through OpenSSL, and wiping derived data keys.
 * Does not own: files (kvstore.c). The stats sidecar of the Python
 * reference's header tail is not part of the normative CHUNK_V1.md header
 * (bytes 236.. are zero) and is rejected as reserved bytes. */
#include "kvpack.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rdle(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}
static void wrle(uint8_t *p, uint64_t v, int n) {
    for (int i = 0; i < n; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static bool all_zero(const uint8_t *p, size_t n) {
    uint64_t a = 0, w;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        memcpy(&w, p + i, 8);
        a |= w;
    }
    for (; i < n; i++) a |= p[i];
    return !a;
}
static bool buf_reserve(kv_buf *b, size_t n) {
    if (b->oom) return false;
    if (b->cap - b->n >= n) return true;
    size_t cap = b->n + n;
    uint8_t *p = realloc(b->p, cap);
    if (!p) return (b->oom = true, false);
    b->p = p;
    b->cap = cap;
    return true;
}
#define NOMEM(err) mu_fail(err, MU_E_NOMEM, "kvpack: out of memory")

/* ---- codec frames ------------------------------------------------------ */

static size_t run_len(const uint8_t *p, size_t n, size_t i) {
    size_t len = 1;
    while (i + len < n && len < 128 && p[i + len] == p[i]) len++;
    return len;
}

int kv_frame_encode(unsigned codec, const uint8_t *plain, size_t n, kv_buf *out, mu_err *err) {
    if (n < 1 || n > KV_MAX_PLAIN) return kv_fail(err, KV_BOUNDS, "chunk plaintext must be in 1..=4 MiB");
    if (codec != KV_CODEC_RAW && codec != KV_CODEC_LOSSLESS)
        return kv_fail(err, KV_UNKNOWN_ENUM, "unknown codec %u", codec);
    size_t bound = KV_FRAME_HDR + n + (codec == KV_CODEC_RAW ? 0 : (n + 127) / 128);
    if (!buf_reserve(out, bound)) return NOMEM(err);
    uint8_t *o = out->p + out->n, *h = o;
    memcpy(h, codec == KV_CODEC_RAW ? "KVRAW1\0\0" : "KVRLE1\0\0", 8);
    wrle(h + 8, 1, 2);
    wrle(h + 10, 0, 2);
    wrle(h + 12, n, 4);
    o += KV_FRAME_HDR;
    if (codec == KV_CODEC_RAW) {
        memcpy(o, plain, n);
        o += n;
    } else {
        /* a repeat packet for every run of >= 3 equal bytes (at most 128);
         * everything else in the longest literal packets (<= 128) that end
         * before such a run */
        size_t i = 0;
        while (i < n) {
            size_t rep = run_len(plain, n, i);
            if (rep >= 3) {
                *o++ = (uint8_t)(0x80 | (rep - 1));
                *o++ = plain[i];
                i += rep;
                continue;
            }
            size_t start = i;
            i += rep;
            while (i < n && i - start < 128) {
                rep = run_len(plain, n, i);
                if (rep >= 3) break;
                if (i - start + rep > 128) {
                    i = start + 128;
                    break;
                }
                i += rep;
            }
            *o++ = (uint8_t)(i - start - 1);
            memcpy(o, plain + start, i - start);
            o += i - start;
        }
    }
    out->n = (size_t)(o - out->p);
    return 0;
}

int kv_frame_decode(unsigned codec, const uint8_t *p, size_t n, size_t want, uint8_t *out, mu_err *err) {
    if (n < KV_FRAME_HDR) return kv_fail(err, KV_TRUNCATED, "truncated codec frame");
    if (codec != KV_CODEC_RAW && codec != KV_CODEC_LOSSLESS)
        return kv_fail(err, KV_UNKNOWN_ENUM, "unknown codec %u", codec);
    if (memcmp(p, codec == KV_CODEC_RAW ? "KVRAW1\0\0" : "KVRLE1\0\0", 8))
        return kv_fail(err, KV_BAD_MAGIC, "codec frame magic does not match codec");
    if (rdle(p + 8, 2) != 1) return kv_fail(err, KV_BAD_MAGIC, "unsupported codec frame version");
    if (rdle(p + 10, 2)) return kv_fail(err, KV_RESERVED, "codec frame reserved field is nonzero");
    if (rdle(p + 12, 4) != want || want < 1 || want > KV_MAX_PLAIN)
        return kv_fail(err, KV_BOUNDS, "codec frame decoded length mismatch");
    const uint8_t *q = p + KV_FRAME_HDR;
    size_t m = n - KV_FRAME_HDR;
    if (codec == KV_CODEC_RAW) {
        if (m != want) return kv_fail(err, KV_BOUNDS, "raw frame length mismatch");
        memcpy(out, q, want);
        return 0;
    }
    size_t i = 0, w = 0;
    while (i < m) {
        uint8_t c = q[i++];
        size_t len = (size_t)(c & 0x7F) + 1;
        if (c & 0x80) {
            if (i >= m) return kv_fail(err, KV_TRUNCATED, "truncated lossless repeat packet");
            uint8_t v = q[i++];
            if (w + len > want) return kv_fail(err, KV_BOUNDS, "lossless frame expands past bound");
            memset(out + w, v, len);
        } else {
            if (len > m - i) return kv_fail(err, KV_TRUNCATED, "truncated lossless literal packet");
            if (w + len > want) return kv_fail(err, KV_BOUNDS, "lossless frame expands past bound");
            memcpy(out + w, q + i, len);
            i += len;
        }
        w += len;
    }
    if (w != want) return kv_fail(err, KV_BOUNDS, "lossless decoded length mismatch");
    /* canonical: re-encode and compare */
    kv_buf b = {0};
    int rc = kv_frame_encode(codec, out, want, &b, err);
    if (!rc && (b.n != n || memcmp(b.p, p, n))) rc = kv_fail(err, KV_RESERVED, "codec frame is not canonical");
    kv_buf_free(&b);
    return rc;
}

/* ---- AEAD: ChaCha20-Poly1305 (RFC 8439) ------------------------------- */

int kv_aead(bool enc, const uint8_t key[32], const uint8_t nonce[12], const uint8_t *aad, size_t aad_n,
            const uint8_t *in, size_t n, uint8_t *out, uint8_t tag[16]) {
    EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
    int ok = c && EVP_CipherInit_ex(c, EVP_chacha20_poly1305(), NULL, NULL, NULL, enc) &&
             EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_AEAD_SET_IVLEN, 12, NULL) &&
             EVP_CipherInit_ex(c, NULL, NULL, key, nonce, enc);
    int len = 0;
    if (ok && !enc) ok = EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_AEAD_SET_TAG, 16, tag);
    if (ok && aad_n) ok = EVP_CipherUpdate(c, NULL, &len, aad, (int)aad_n);
    if (ok && n) ok = EVP_CipherUpdate(c, out, &len, in, (int)n);
    if (ok) ok = EVP_CipherFinal_ex(c, out + (n ? len : 0), &len);
    if (ok && enc) ok = EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_AEAD_GET_TAG, 16, tag);
    EVP_CIPHER_CTX_free(c);
    return ok ? 0 : -1;
}

/* HKDF data key: info = label (with its NUL) || a || b (b may be NULL). */
static void hkdf_label(const uint8_t key[32], const uint8_t *salt, size_t salt_n, const char *label, size_t label_n,
                       const uint8_t *a, const uint8_t *b, uint8_t out[32]) {
    uint8_t info[128];
    MU_ASSERT(label_n + 64 <= sizeof info);
    memcpy(info, label, label_n);
    memcpy(info + label_n, a, 32);
    if (b) memcpy(info + label_n + 32, b, 32);
    kv_hkdf(key, 32, salt, salt_n, info, label_n + (b ? 64 : 32), out);
}

/* ---- chunks ------------------------------------------------------------ */

static const kv_fstate *family_state(const kv_family *f, const kv_key *k) {
    for (uint32_t i = 0; i < f->n_states; i++)
        if (!kv_key_cmp(&f->states[i].key, k)) return &f->states[i];
    return NULL;
}

/* The object key's HMAC message (OKEY_MSG bytes); object_key hashes one,
 * kv_hmac_short a batch's. */
#define OKEY_MSG (sizeof "kvpack/v1/chunk-object" + 3 * 32 + 13 + 16 + 12)
static void okey_msg(uint8_t *m, const uint8_t *tenant, const uint8_t *fam, const uint8_t *content, uint64_t epoch,
                     unsigned codec, unsigned version, bool enc, const uint8_t *salt, const uint8_t *nonce) {
    static const char d[] = "kvpack/v1/chunk-object";
    memcpy(m, d, sizeof d), m += sizeof d;
    memcpy(m, tenant, 32), memcpy(m + 32, fam, 32), memcpy(m + 64, content, 32), m += 96;
    wrle(m, epoch, 8);
    wrle(m + 8, codec, 2);
    wrle(m + 10, version, 2);
    m[12] = enc;
    memcpy(m + 13, salt, 16);
    memcpy(m + 29, nonce, 12);
}

static void object_key(const kv_keys *keys, const uint8_t *tenant, const uint8_t *fam, const uint8_t *content,
                       uint64_t epoch, unsigned codec, unsigned version, bool enc, const uint8_t *salt,
                       const uint8_t *nonce, uint8_t out[32]) {
    uint8_t m[OKEY_MSG];
    okey_msg(m, tenant, fam, content, epoch, codec, version, enc, salt, nonce);
    const void *parts[1] = {m};
    size_t lens[1] = {OKEY_MSG};
    kv_hmacv(keys->object_identity, parts, lens, 1, out);
}

static void chunk_data_key(const kv_keys *keys, const uint8_t *content, const uint8_t *okey, const uint8_t *salt,
                           uint8_t out[32]) {
    static const char d[] = "kvpack/v1/chunk-aead";
    hkdf_label(keys->chunk_enc, salt, 16, d, sizeof d, content, okey, out);
}

int kv_chunk_encode(const uint8_t *plain, size_t n, const uint8_t tenant[32], const kv_family *family,
                    const kv_key *state, const kv_span *span, uint64_t epoch, bool encrypt, const kv_keys *keys,
                    const uint8_t *salt_in, const uint8_t *nonce_in, kv_chunk *out, mu_err *err) {
    kv_chunk c = {0};
    int rc = kv_chunk_encode_to(plain, n, tenant, family, state, span, epoch, encrypt, keys, salt_in, nonce_in, NULL,
                                &c.data, &c, err);
    if (rc) {
        kv_buf_free(&c.data);
        return rc;
    }
    *out = c;
    return 0;
}

/* ---- objects verified before ------------------------------------------- */
/*
 * A chunk object whose digest (SHA-256 of all its bytes, computed anew on
 * every open) equals its reference's holds the same bytes as every other
 * object with that digest. The checks of the open that follow from those
 * bytes and the open's context alone (the header digest, the object key,
 * the content id) then give the verdict they gave the first time. The
 * memo remembers, per process, a hash of (the identity and object keys,
 * the digest, tenant, family, state, span and the reference's fields) for
 * every object that passed every check or that this process wrote; an
 * open of such an object skips those three computations and still makes
 * every comparison (against the header's own values), the framing checks,
 * the AEAD and the codec. Only whole successes enter it, so an object that
 * fails is always checked in full. Direct-mapped, a slot per 32-byte key:
 * a key that collides evicts the older one (a miss costs the full check,
 * never a different verdict). MUSER_KV_MEMO=0 turns it off.
 */
#define MEMO_SLOTS 65536 /* 2 MiB: 78 packs of 2048 positions of the full shape */
static const char MEMO_DOMAIN[] = "muser/kvpack/v1/verified-object";
static pthread_mutex_t g_memo_mu = PTHREAD_MUTEX_INITIALIZER;
static uint8_t (*g_memo)[32];
static atomic_int g_memo_on = -1;
static atomic_ullong g_memo_hits;

static bool memo_on(void) {
    int on = atomic_load(&g_memo_on);
    if (on < 0) {
        const char *e = getenv("MUSER_KV_MEMO");
        on = !(e && !strcmp(e, "0"));
        atomic_store(&g_memo_on, on);
    }
    return on;
}

void kv_memo_set(bool on) {
    atomic_store(&g_memo_on, on);
    kv_memo_clear();
}

void kv_memo_clear(void) {
    pthread_mutex_lock(&g_memo_mu);
    if (g_memo) memset(g_memo, 0, (size_t)MEMO_SLOTS * 32);
    pthread_mutex_unlock(&g_memo_mu);
}

uint64_t kv_memo_hits(void) { return atomic_load(&g_memo_hits); }

/* The memo keys of n objects (their digests as computed, their references'
 * fields or the writer's own, their state and span) under the identity and
 * object keys, tenant and family id, through kv_sha256_jobs; ok[i] false
 * where a state name makes the message too long (never remembered). */
typedef struct {
    const uint8_t *dg, *chunk_id, *object_key;
    uint64_t epoch;
    uint32_t plain_bytes, object_bytes;
    const kv_key *state;
    const kv_span *span;
} memo_in;

static void memo_keys(const kv_keys *keys, const uint8_t tenant[32], const uint8_t fam[32], const memo_in *in,
                      int n, uint8_t (*out)[32], bool *ok) {
    uint8_t head[16][KV_SHA_HEAD];
    kv_sha_job sj[16];
    for (int b = 0; b < n; b += 16) {
        int m = n - b < 16 ? n - b : 16, k = 0;
        for (int i = 0; i < m; i++) {
            const memo_in *x = &in[b + i];
            size_t len = sizeof MEMO_DOMAIN + 7 * 32 + 6 + x->state->len + 28 + 16;
            ok[b + i] = len <= KV_SHA_HEAD;
            if (!ok[b + i]) continue;
            uint8_t *h = head[k];
            memcpy(h, MEMO_DOMAIN, sizeof MEMO_DOMAIN), h += sizeof MEMO_DOMAIN;
            const uint8_t *f32[7] = {keys->chunk_identity, keys->object_identity, x->dg, tenant, fam, x->chunk_id,
                                     x->object_key};
            for (int q = 0; q < 7; q++) memcpy(h, f32[q], 32), h += 32;
            wrle(h, x->state->layer, 4), wrle(h + 4, x->state->len, 2), h += 6;
            if (x->state->len) memcpy(h, x->state->name, x->state->len), h += x->state->len;
            wrle(h, x->span->token_start, 8), wrle(h + 8, x->span->token_count, 8);
            wrle(h + 16, x->span->plain_off, 8), wrle(h + 24, x->span->plain_bytes, 4), h += 28;
            wrle(h, x->epoch, 8), wrle(h + 8, x->plain_bytes, 4), wrle(h + 12, x->object_bytes, 4), h += 16;
            sj[k] = (kv_sha_job){.head = head[k], .head_n = (size_t)(h - head[k]), .out = out[b + i]};
            k++;
        }
        kv_sha256_jobs(sj, k);
        OPENSSL_cleanse(head, sizeof head);
    }
}

static size_t memo_slot(const uint8_t key[32]) { return (size_t)rdle(key, 4) & (MEMO_SLOTS - 1); }

/* hit[i]: whether key i is remembered (where ok[i]) */
static void memo_find(uint8_t (*key)[32], const bool *ok, int n, bool *hit) {
    pthread_mutex_lock(&g_memo_mu);
    for (int i = 0; i < n; i++) hit[i] = g_memo && ok[i] && !memcmp(g_memo[memo_slot(key[i])], key[i], 32);
    pthread_mutex_unlock(&g_memo_mu);
}

static void memo_put(uint8_t (*key)[32], const bool *ok, int n) {
    pthread_mutex_lock(&g_memo_mu);
    if (!g_memo) g_memo = calloc(MEMO_SLOTS, 32);
    for (int i = 0; g_memo && i < n; i++)
        if (ok[i]) memcpy(g_memo[memo_slot(key[i])], key[i], 32);
    pthread_mutex_unlock(&g_memo_mu);
}

/* One object, built in place in three steps around its three hashes:
 * enc_frame checks and writes the frame right after the header (the raw
 * codec copies the plaintext once, or not at all when the caller read it
 * there already); the content id (HMAC over the plaintext); enc_head
 * derives the object key and writes the header (digest field zero); its
 * digest; enc_seal writes it, encrypts the frame in place and zeroes the
 * padding; the object's digest, as CHUNK_V1.md defines them.
 * kv_chunk_encode_to hashes one object at a time through OpenSSL,
 * kv_chunk_encode_many each step's hashes of many objects at once. */
typedef struct {
    const kv_fstate *st;
    size_t frame_n, payload, obj;
    uint8_t salt[16], nonce[12];
} enc_state;

static int enc_frame(const uint8_t *plain, size_t n, const kv_family *family, const kv_key *state,
                     const kv_span *span, uint64_t epoch, kv_buf *obj_buf, enc_state *es, mu_err *err) {
    if (!epoch) return kv_fail(err, KV_SEMANTICS, "chunk key epoch must be nonzero");
    if (span->plain_bytes != n || !span->token_count)
        return kv_fail(err, KV_SEMANTICS, "chunk plaintext does not match its declared span");
    const kv_fstate *st = family_state(family, state);
    if (!st) return kv_fail(err, KV_SEMANTICS, "chunk state is absent from representation family");
    if (st->codec_version != 1) return kv_fail(err, KV_CODEC, "unsupported chunk codec version");
    if (n < 1 || n > KV_MAX_PLAIN) return kv_fail(err, KV_BOUNDS, "chunk plaintext must be in 1..=4 MiB");
    if (st->codec != KV_CODEC_RAW && st->codec != KV_CODEC_LOSSLESS)
        return kv_fail(err, KV_UNKNOWN_ENUM, "unknown codec %u", st->codec);
    es->st = st;
    /* room for the largest object this plaintext can make */
    size_t bound = kv_chunk_bound(n);
    if (obj_buf->cap < bound) {
        /* a plaintext the caller put in place came with a buffer of kv_chunk_bound */
        MU_ASSERT(!(plain >= obj_buf->p && plain < obj_buf->p + obj_buf->cap));
        obj_buf->n = 0;
        if (!buf_reserve(obj_buf, bound)) return NOMEM(err);
    }
    uint8_t *frame = obj_buf->p + KV_ALIGN;
    if (st->codec == KV_CODEC_RAW) {
        memcpy(frame, "KVRAW1\0\0", 8);
        wrle(frame + 8, 1, 2);
        wrle(frame + 10, 0, 2);
        wrle(frame + 12, n, 4);
        if (plain != frame + KV_FRAME_HDR) memcpy(frame + KV_FRAME_HDR, plain, n);
        es->frame_n = KV_FRAME_HDR + n;
    } else {
        obj_buf->n = KV_ALIGN;
        int rc = kv_frame_encode(st->codec, plain, n, obj_buf, err);
        if (rc) return rc;
        es->frame_n = obj_buf->n - KV_ALIGN;
    }
    return 0;
}

static void enc_salt(bool encrypt, const uint8_t *salt_in, const uint8_t *nonce_in, enc_state *es) {
    memset(es->salt, 0, 16);
    memset(es->nonce, 0, 12);
    if (encrypt) {
        if (salt_in) memcpy(es->salt, salt_in, 16);
        else MU_ASSERT(RAND_bytes(es->salt, 16) == 1);
        if (nonce_in) memcpy(es->nonce, nonce_in, 12);
        else MU_ASSERT(RAND_bytes(es->nonce, 12) == 1);
    }
}

/* keys: NULL when enc_salt ran and out->object_key holds the key already */
static int enc_head(uint8_t *h, size_t n, const uint8_t tenant[32], const uint8_t fam[32], uint64_t epoch,
                    bool encrypt, const kv_keys *keys, const uint8_t *salt_in, const uint8_t *nonce_in,
                    enc_state *es, kv_chunk *out, mu_err *err) {
    const kv_fstate *st = es->st;
    if (keys) {
        enc_salt(encrypt, salt_in, nonce_in, es);
        object_key(keys, tenant, fam, out->chunk_id, epoch, st->codec, st->codec_version, encrypt, es->salt,
                   es->nonce, out->object_key);
    }
    es->payload = es->frame_n + (encrypt ? 16 : 0);
    es->obj = (KV_ALIGN + es->payload + KV_ALIGN - 1) / KV_ALIGN * KV_ALIGN;
    if (es->obj > KV_MAX_OBJECT) return kv_fail(err, KV_BOUNDS, "encoded chunk object exceeds bound");
    memset(h, 0, KV_ALIGN);
    memcpy(h, "KVCHK1\0\0", 8);
    wrle(h + 8, 1, 2);
    wrle(h + 10, KV_ALIGN, 2);
    wrle(h + 12, KV_ALIGN, 4);
    wrle(h + 16, encrypt, 4);
    wrle(h + 20, st->codec, 2);
    wrle(h + 22, st->codec_version, 2);
    wrle(h + 24, n, 4);
    wrle(h + 28, es->frame_n, 4);
    wrle(h + 32, es->payload, 4);
    wrle(h + 36, es->obj, 4);
    wrle(h + 40, epoch, 8);
    memcpy(h + 48, tenant, 32);
    memcpy(h + 80, fam, 32);
    memcpy(h + 112, out->chunk_id, 32);
    memcpy(h + 144, out->object_key, 32);
    memcpy(h + 176, es->salt, 16);
    memcpy(h + 192, es->nonce, 12);
    return 0;
}

/* h + 204 holds the header's digest already */
static int enc_seal(kv_buf *obj_buf, size_t n, bool encrypt, const kv_keys *keys, const enc_state *es,
                    kv_chunk *out, mu_err *err) {
    uint8_t *h = obj_buf->p, *frame = h + KV_ALIGN;
    if (encrypt) {
        uint8_t dk[32];
        chunk_data_key(keys, out->chunk_id, out->object_key, es->salt, dk);
        int rc = kv_aead(true, dk, es->nonce, h, KV_ALIGN, frame, es->frame_n, frame, frame + es->frame_n);
        OPENSSL_cleanse(dk, sizeof dk);
        if (rc) return mu_fail(err, MU_E_STATE, "kvpack: ChaCha20-Poly1305 encryption failed");
    }
    memset(h + KV_ALIGN + es->payload, 0, es->obj - KV_ALIGN - es->payload);
    obj_buf->n = es->obj;
    out->plain_bytes = (uint32_t)n;
    return 0;
}

int kv_chunk_encode_to(const uint8_t *plain, size_t n, const uint8_t tenant[32], const kv_family *family,
                       const kv_key *state, const kv_span *span, uint64_t epoch, bool encrypt, const kv_keys *keys,
                       const uint8_t *salt_in, const uint8_t *nonce_in, const uint8_t fam_in[32], kv_buf *obj_buf,
                       kv_chunk *out, mu_err *err) {
    enc_state es;
    uint8_t fam[32];
    int rc = enc_frame(plain, n, family, state, span, epoch, obj_buf, &es, err);
    if (rc) return rc;
    if (fam_in) memcpy(fam, fam_in, 32);
    else if (kv_family_id(family, fam)) return NOMEM(err);
    if ((rc = kv_chunk_id(keys->chunk_identity, tenant, fam, state, span, plain, n, out->chunk_id, err))) return rc;
    if ((rc = enc_head(obj_buf->p, n, tenant, fam, epoch, encrypt, keys, salt_in, nonce_in, &es, out, err)))
        return rc;
    kv_sha256(obj_buf->p, KV_ALIGN, obj_buf->p + 204);
    if ((rc = enc_seal(obj_buf, n, encrypt, keys, &es, out, err))) return rc;
    kv_sha256(obj_buf->p, es.obj, out->digest);
    return 0;
}

int kv_chunk_encode_many(const kv_enc_item *it, int n_items, const uint8_t tenant[32], const kv_family *family,
                         uint64_t epoch, bool encrypt, const kv_keys *keys, const uint8_t fam[32], mu_err *err) {
    enum { B = 16 };
    enc_state es[B];
    kv_cid_job cj[B];
    kv_sha_job sj[B];
    for (int b = 0; b < n_items; b += B) {
        int m = n_items - b < B ? n_items - b : B;
        int rc;
        for (int i = 0; i < m; i++) {
            const kv_enc_item *x = &it[b + i];
            if ((rc = enc_frame(x->plain, x->n, family, x->state, x->span, epoch, x->obj, &es[i], err))) return rc;
            cj[i] = (kv_cid_job){.state = x->state, .span = x->span, .n = x->n, .out = x->out->chunk_id,
                                 .plain = es[i].st->codec == KV_CODEC_RAW ? x->obj->p + KV_ALIGN + KV_FRAME_HDR
                                                                          : x->plain};
        }
        if ((rc = kv_chunk_ids(keys->chunk_identity, tenant, fam, cj, m, err))) return rc;
        /* the object keys, their HMACs together */
        uint8_t msg[B][OKEY_MSG], okey[B][32];
        const uint8_t *mp[B];
        size_t ml[B];
        for (int i = 0; i < m; i++) {
            const kv_fstate *st = es[i].st;
            enc_salt(encrypt, NULL, NULL, &es[i]);
            okey_msg(msg[i], tenant, fam, it[b + i].out->chunk_id, epoch, st->codec, st->codec_version, encrypt,
                     es[i].salt, es[i].nonce);
            mp[i] = msg[i], ml[i] = OKEY_MSG;
        }
        kv_hmac_short(keys->object_identity, mp, ml, m, okey);
        for (int i = 0; i < m; i++) {
            const kv_enc_item *x = &it[b + i];
            memcpy(x->out->object_key, okey[i], 32);
            if ((rc = enc_head(x->obj->p, x->n, tenant, fam, epoch, encrypt, NULL, NULL, NULL, &es[i], x->out, err)))
                return rc;
            sj[i] = (kv_sha_job){.body = x->obj->p, .body_n = KV_ALIGN, .out = x->obj->p + 204};
        }
        kv_sha256_jobs(sj, m);
        for (int i = 0; i < m; i++) {
            const kv_enc_item *x = &it[b + i];
            if ((rc = enc_seal(x->obj, x->n, encrypt, keys, &es[i], x->out, err))) return rc;
            sj[i] = (kv_sha_job){.body = x->obj->p, .body_n = es[i].obj, .out = x->out->digest};
        }
        kv_sha256_jobs(sj, m);
        if (fam && memo_on()) { /* what this process wrote opens without the checks its bytes decide */
            memo_in mi[B];
            uint8_t mk[B][32];
            bool ok[B];
            for (int i = 0; i < m; i++) {
                const kv_enc_item *x = &it[b + i];
                mi[i] = (memo_in){.dg = x->out->digest, .chunk_id = x->out->chunk_id, .object_key = x->out->object_key,
                                  .epoch = epoch, .plain_bytes = (uint32_t)x->n, .object_bytes = (uint32_t)es[i].obj,
                                  .state = x->state, .span = x->span};
            }
            memo_keys(keys, tenant, fam, mi, m, mk, ok);
            memo_put(mk, ok, m);
        }
    }
    return 0;
}

/* The header fields the steps after the checks need. */
typedef struct {
    bool encrypted;
    unsigned codec;
    uint64_t plain, enc_n;
    uint8_t fam[32];
} chunk_head;

/* The checks before the digests. */
static int chunk_pre(const uint8_t *p, size_t n, const kv_ref *ref, const kv_span *span, chunk_head *ch,
                     mu_err *err) {
    if (n < KV_ALIGN || n > KV_MAX_OBJECT || n % KV_ALIGN) return kv_fail(err, KV_BOUNDS, "invalid chunk object length");
    if (memcmp(p, "KVCHK1\0\0", 8)) return kv_fail(err, KV_BAD_MAGIC, "invalid production chunk magic");
    if (rdle(p + 8, 2) != 1 || rdle(p + 10, 2) != KV_ALIGN || rdle(p + 12, 4) != KV_ALIGN)
        return kv_fail(err, KV_BAD_MAGIC, "invalid chunk header contract");
    uint32_t flags = (uint32_t)rdle(p + 16, 4);
    if (flags & ~1u) return kv_fail(err, KV_RESERVED, "unknown chunk flags");
    unsigned codec = (unsigned)rdle(p + 20, 2), version = (unsigned)rdle(p + 22, 2);
    if (codec != KV_CODEC_RAW && codec != KV_CODEC_LOSSLESS)
        return kv_fail(err, KV_UNKNOWN_ENUM, "unknown codec %u", codec);
    if (version != 1) return kv_fail(err, KV_CODEC, "unsupported chunk codec version");
    uint64_t plain = rdle(p + 24, 4), enc_n = rdle(p + 28, 4), payload = rdle(p + 32, 4), obj = rdle(p + 36, 4);
    if (plain == 0 || plain > KV_MAX_PLAIN || enc_n < KV_FRAME_HDR || enc_n > KV_MAX_PLAIN + KV_MAX_CODEC_OVERHEAD ||
        obj != n)
        return kv_fail(err, KV_BOUNDS, "invalid chunk size fields");
    bool encrypted = flags & 1;
    if (payload != enc_n + (encrypted ? 16 : 0))
        return kv_fail(err, KV_BOUNDS, "chunk payload length does not match encryption mode");
    uint64_t end = KV_ALIGN + payload;
    if (end > n) return kv_fail(err, KV_TRUNCATED, "truncated chunk payload");
    if (!all_zero(p + end, n - end)) return kv_fail(err, KV_RESERVED, "chunk padding is nonzero");
    if (!all_zero(p + 236, KV_ALIGN - 236)) return kv_fail(err, KV_RESERVED, "chunk header reserved bytes are nonzero");
    if (!encrypted && !all_zero(p + 176, 28))
        return kv_fail(err, KV_RESERVED, "unencrypted chunk salt or nonce is nonzero");
    if (n != ref->object_bytes || plain != ref->plain_bytes || plain != span->plain_bytes)
        return kv_fail(err, KV_BOUNDS, "chunk reference size mismatch");
    ch->encrypted = encrypted;
    ch->codec = codec;
    ch->plain = plain;
    ch->enc_n = enc_n;
    return 0;
}

/* The header's first bytes as its digest reads them (digest field zero):
 * the rest of the header is p + 236 on. */
static void header_head(const uint8_t *p, uint8_t out[236]) {
    memcpy(out, p, 204);
    memset(out + 204, 0, 32);
}

/* The checks from the digests on: dg the object's digest, hdg the
 * header's. */
static int chunk_post(const uint8_t *p, const kv_ref *ref, const uint8_t tenant[32], const kv_family *family,
                      const kv_key *state, const kv_keys *keys, const uint8_t *fam_in, const uint8_t dg[32],
                      const uint8_t hdg[32], const uint8_t *okey_in, chunk_head *ch, mu_err *err) {
    if (CRYPTO_memcmp(dg, ref->digest, 32)) return kv_fail(err, KV_AUTH, "chunk object digest mismatch");
    if (CRYPTO_memcmp(hdg, p + 204, 32)) return kv_fail(err, KV_AUTH, "chunk header digest mismatch");
    unsigned version = (unsigned)rdle(p + 22, 2);
    const kv_fstate *st = family_state(family, state);
    if (!st) return kv_fail(err, KV_SEMANTICS, "chunk state is absent from representation family");
    if (ch->codec != st->codec || version != st->codec_version)
        return kv_fail(err, KV_SEMANTICS, "chunk codec does not match representation family");
    if (fam_in) memcpy(ch->fam, fam_in, 32);
    else if (kv_family_id(family, ch->fam)) return NOMEM(err);
    if (memcmp(p + 48, tenant, 32) || memcmp(p + 80, ch->fam, 32) || rdle(p + 40, 8) != ref->epoch)
        return kv_fail(err, KV_AUTH, "chunk namespace, family, or epoch mismatch");
    const uint8_t *content = p + 112, *okey = p + 144, *salt = p + 176, *nonce = p + 192;
    uint8_t derived[32];
    if (okey_in) memcpy(derived, okey_in, 32); /* derived with the batch's, or remembered */
    else object_key(keys, p + 48, ch->fam, content, ref->epoch, ch->codec, version, ch->encrypted, salt, nonce, derived);
    if (memcmp(content, ref->chunk_id, 32) || memcmp(okey, ref->object_key, 32) || CRYPTO_memcmp(okey, derived, 32))
        return kv_fail(err, KV_AUTH, "chunk identity or object key mismatch");
    return 0;
}

/* Every check of the decode order up to the AEAD (framing, digests, keys):
 * the fields the rest needs. */
static int chunk_check(const uint8_t *p, size_t n, const kv_ref *ref, const kv_span *span, const uint8_t tenant[32],
                       const kv_family *family, const kv_key *state, const kv_keys *keys, const uint8_t *fam_in,
                       chunk_head *ch, mu_err *err) {
    int rc = chunk_pre(p, n, ref, span, ch, err);
    if (rc) return rc;
    uint8_t dg[32], hdg[32], head[236];
    kv_sha256(p, n, dg);
    header_head(p, head);
    const void *parts[2] = {head, p + 236};
    size_t lens[2] = {236, KV_ALIGN - 236};
    kv_sha256v(parts, lens, 2, hdg);
    return chunk_post(p, ref, tenant, family, state, keys, fam_in, dg, hdg, NULL, ch, err);
}

int kv_chunk_decode(const uint8_t *p, size_t n, const kv_ref *ref, const kv_span *span, const uint8_t tenant[32],
                    const kv_family *family, const kv_key *state, const kv_keys *keys, uint8_t *out, mu_err *err) {
    chunk_head ch;
    int rc = chunk_check(p, n, ref, span, tenant, family, state, keys, NULL, &ch, err);
    if (rc) return rc;
    const uint8_t *content = p + 112, *okey = p + 144, *salt = p + 176, *nonce = p + 192;
    const uint8_t *frame = p + KV_ALIGN;
    uint8_t *dec = NULL;
    if (ch.encrypted) {
        dec = malloc(ch.enc_n ? ch.enc_n : 1);
        if (!dec) return NOMEM(err);
        uint8_t dk[32], tag[16];
        chunk_data_key(keys, content, okey, salt, dk);
        memcpy(tag, p + KV_ALIGN + ch.enc_n, 16);
        rc = kv_aead(false, dk, nonce, p, KV_ALIGN, frame, ch.enc_n, dec, tag);
        OPENSSL_cleanse(dk, sizeof dk);
        if (rc) {
            free(dec);
            return kv_fail(err, KV_AUTH, "chunk AEAD authentication failed");
        }
        frame = dec;
    }
    rc = kv_frame_decode(ch.codec, frame, ch.enc_n, ch.plain, out, err);
    if (dec) {
        OPENSSL_cleanse(dec, ch.enc_n);
        free(dec);
    }
    if (rc) return rc;
    uint8_t cid[32];
    if ((rc = kv_chunk_id(keys->chunk_identity, p + 48, ch.fam, state, span, out, ch.plain, cid, err))) return rc;
    if (CRYPTO_memcmp(cid, content, 32)) return kv_fail(err, KV_AUTH, "chunk plaintext identity mismatch");
    return 0;
}

/* After chunk_check: the AEAD in place and the codec; *plain the
 * plaintext (inside p for the raw codec, else out). */
static int open_body(uint8_t *p, const chunk_head *ch, const kv_keys *keys, uint8_t *out, const uint8_t **plain,
                     mu_err *err) {
    const uint8_t *content = p + 112, *okey = p + 144, *salt = p + 176, *nonce = p + 192;
    uint8_t *frame = p + KV_ALIGN;
    int rc;
    if (ch->encrypted) {
        uint8_t dk[32], tag[16];
        chunk_data_key(keys, content, okey, salt, dk);
        memcpy(tag, p + KV_ALIGN + ch->enc_n, 16);
        rc = kv_aead(false, dk, nonce, p, KV_ALIGN, frame, ch->enc_n, frame, tag); /* in place */
        OPENSSL_cleanse(dk, sizeof dk);
        if (rc) return kv_fail(err, KV_AUTH, "chunk AEAD authentication failed");
    }
    if (ch->codec == KV_CODEC_RAW) { /* the frame's checks, then the plaintext where it lies */
        if (memcmp(frame, "KVRAW1\0\0", 8)) return kv_fail(err, KV_BAD_MAGIC, "codec frame magic does not match codec");
        if (rdle(frame + 8, 2) != 1) return kv_fail(err, KV_BAD_MAGIC, "unsupported codec frame version");
        if (rdle(frame + 10, 2)) return kv_fail(err, KV_RESERVED, "codec frame reserved field is nonzero");
        if (rdle(frame + 12, 4) != ch->plain) return kv_fail(err, KV_BOUNDS, "codec frame decoded length mismatch");
        if (ch->enc_n - KV_FRAME_HDR != ch->plain) return kv_fail(err, KV_BOUNDS, "raw frame length mismatch");
        *plain = frame + KV_FRAME_HDR;
        return 0;
    }
    if ((rc = kv_frame_decode(ch->codec, frame, ch->enc_n, ch->plain, out, err))) return rc;
    *plain = out;
    return 0;
}

static int cid_check(const uint8_t *p, const chunk_head *ch, const kv_span *span, const kv_key *state,
                     const kv_keys *keys, const uint8_t *pl, mu_err *err) {
    uint8_t cid[32];
    int rc = kv_chunk_id(keys->chunk_identity, p + 48, ch->fam, state, span, pl, ch->plain, cid, err);
    if (rc) return rc;
    if (CRYPTO_memcmp(cid, p + 112, 32)) return kv_fail(err, KV_AUTH, "chunk plaintext identity mismatch");
    return 0;
}

int kv_chunk_open(uint8_t *p, size_t n, const kv_ref *ref, const kv_span *span, const uint8_t tenant[32],
                  const kv_family *family, const kv_key *state, const kv_keys *keys, const uint8_t fam[32],
                  uint8_t *out, const uint8_t **plain, mu_err *err) {
    chunk_head ch;
    const uint8_t *pl = NULL;
    int rc = chunk_check(p, n, ref, span, tenant, family, state, keys, fam, &ch, err);
    if (!rc) rc = open_body(p, &ch, keys, out, &pl, err);
    if (!rc) rc = cid_check(p, &ch, span, state, keys, pl, err);
    if (!rc) *plain = pl;
    return rc;
}

/* Each step over the whole batch, its hashes through kv_sha256_jobs. The
 * verdict is the one kv_chunk_open item after item gives: a failure before
 * anything is decrypted redoes the batch that way; one while decrypting
 * item i first checks the content ids of the items before it. */
static int open_batch(kv_dec_item *it, int m, const uint8_t tenant[32], const kv_family *family, const kv_keys *keys,
                      const uint8_t fam[32], mu_err *err) {
    enum { B = 16 };
    chunk_head ch[B];
    uint8_t dg[B][32], hdg[B][32], head[B][236];
    kv_sha_job sj[B] = {0}; /* zeroed: GCC at -O1 cannot see that every job used is set */
    kv_cid_job cj[B];
    uint8_t cids[B][32], mk[B][32];
    bool known[B] = {0}, mok[B] = {0};
    const bool memo = fam && memo_on(); /* the key binds the family's id */
    int rc = 0, nj = 0;
    bool redo = false;
    for (int i = 0; i < m && !redo; i++) redo = chunk_pre(it[i].p, it[i].n, it[i].ref, it[i].span, &ch[i], NULL) != 0;
    if (!redo) {
        /* the objects' digests, then the headers' of the objects not remembered (a lane idles once its
         * message ends: objects together, headers together) */
        for (int i = 0; i < m; i++) sj[i] = (kv_sha_job){.body = it[i].p, .body_n = it[i].n, .out = dg[i]};
        kv_sha256_jobs(sj, m);
        if (memo) {
            memo_in mi[B];
            for (int i = 0; i < m; i++) {
                const kv_ref *r = it[i].ref;
                mi[i] = (memo_in){.dg = dg[i], .chunk_id = r->chunk_id, .object_key = r->object_key,
                                  .epoch = r->epoch, .plain_bytes = r->plain_bytes, .object_bytes = r->object_bytes,
                                  .state = it[i].state, .span = it[i].span};
            }
            memo_keys(keys, tenant, fam, mi, m, mk, mok);
            memo_find(mk, mok, m, known);
            for (int i = 0; i < m; i++) known[i] = known[i] && !CRYPTO_memcmp(dg[i], it[i].ref->digest, 32);
        }
        for (int i = 0; i < m; i++) {
            if (known[i]) {
                memcpy(hdg[i], it[i].p + 204, 32);
                continue;
            }
            header_head(it[i].p, head[i]);
            sj[nj++] = (kv_sha_job){.head = head[i], .head_n = 236, .body = it[i].p + 236, .body_n = KV_ALIGN - 236,
                                    .out = hdg[i]};
        }
        kv_sha256_jobs(sj, nj);
        /* the object keys of the objects not remembered, their HMACs together (the same values chunk_post
         * would derive one by one, compared at the same step) */
        uint8_t msg[B][OKEY_MSG], okey[B][32];
        const uint8_t *mp[B], *oin[B];
        size_t ml[B];
        int at[B], no = 0;
        for (int i = 0; i < m; i++) {
            const uint8_t *p = it[i].p;
            oin[i] = known[i] ? p + 144 : NULL;
            if (known[i] || !fam) continue;
            okey_msg(msg[no], p + 48, fam, p + 112, it[i].ref->epoch, ch[i].codec, (unsigned)rdle(p + 22, 2),
                     ch[i].encrypted, p + 176, p + 192);
            mp[no] = msg[no], ml[no] = OKEY_MSG, at[no++] = i;
        }
        kv_hmac_short(keys->object_identity, mp, ml, no, okey);
        for (int k = 0; k < no; k++) oin[at[k]] = okey[k];
        for (int i = 0; i < m && !redo; i++)
            redo = chunk_post(it[i].p, it[i].ref, tenant, family, it[i].state, keys, fam, dg[i], hdg[i], oin[i],
                              &ch[i], NULL) != 0;
    }
    if (redo) { /* nothing decrypted yet */
        for (int i = 0; i < m; i++)
            if ((rc = kv_chunk_open(it[i].p, it[i].n, it[i].ref, it[i].span, tenant, family, it[i].state, keys, fam,
                                    it[i].out, &it[i].plain, err)))
                return rc;
        return 0;
    }
    nj = 0;
    for (int i = 0; i < m; i++) {
        if ((rc = open_body(it[i].p, &ch[i], keys, it[i].out, &it[i].plain, err))) {
            for (int j = 0; j < i; j++) {
                int rj = cid_check(it[j].p, &ch[j], it[j].span, it[j].state, keys, it[j].plain, err);
                if (rj) return rj;
            }
            return rc;
        }
        if (known[i]) memcpy(cids[i], it[i].p + 112, 32); /* remembered: the content id these bytes had */
        else
            cj[nj++] = (kv_cid_job){.state = it[i].state, .span = it[i].span, .plain = it[i].plain, .n = ch[i].plain,
                                    .out = cids[i]};
    }
    /* one tenant and family for the batch: chunk_post checked each header's */
    if ((rc = kv_chunk_ids(keys->chunk_identity, tenant, ch[0].fam, cj, nj, err))) return rc;
    for (int i = 0; i < m; i++)
        if (CRYPTO_memcmp(cids[i], it[i].p + 112, 32)) return kv_fail(err, KV_AUTH, "chunk plaintext identity mismatch");
    if (memo) {
        int nk = 0;
        for (int i = 0; i < m; i++) nk += known[i], mok[i] = mok[i] && !known[i];
        atomic_fetch_add(&g_memo_hits, (unsigned long long)nk);
        memo_put(mk, mok, m);
    }
    return 0;
}

int kv_chunk_open_many(kv_dec_item *it, int n, const uint8_t tenant[32], const kv_family *family, const kv_keys *keys,
                       const uint8_t fam[32], mu_err *err) {
    for (int b = 0; b < n; b += 16) {
        int rc = open_batch(it + b, n - b < 16 ? n - b : 16, tenant, family, keys, fam, err);
        if (rc) return rc;
    }
    return 0;
}

/* ---- packs ------------------------------------------------------------- */

static void manifest_data_key(const kv_keys *keys, const uint8_t *id, const uint8_t *salt, uint8_t out[32]) {
    static const char d[] = "kvpack/v1/manifest-aead";
    hkdf_label(keys->manifest_enc, salt, 16, d, sizeof d, id, NULL, out);
}

static void pack_auth(const kv_keys *keys, const uint8_t *header, const uint8_t *body, size_t body_n, uint64_t epoch,
                      uint64_t file_n, uint8_t out[32]) {
    static const char d[] = "kvpack/v1/manifest-auth";
    uint8_t nums[24];
    wrle(nums, body_n, 8);
    wrle(nums + 8, epoch, 8);
    wrle(nums + 16, file_n, 8);
    const void *parts[4] = {d, header, body, nums};
    size_t lens[4] = {sizeof d, KV_ALIGN, body_n, 24};
    kv_hmacv(keys->manifest_auth, parts, lens, 4, out);
}

int kv_pack_encode(const kv_manifest *m, const kv_keys *keys, bool encrypt, const uint8_t *salt_in,
                   const uint8_t *nonce_in, kv_buf *out, uint8_t id[32], mu_err *err) {
    int rc = kv_validate_manifest(m, err);
    if (rc) return rc;
    kv_buf canon = {0};
    kv_encode_manifest(&canon, m);
    if (canon.oom) return NOMEM(err);
    if (canon.n > KV_MAX_MANIFEST) {
        kv_buf_free(&canon);
        return kv_fail(err, KV_BOUNDS, "manifest exceeds production bound");
    }
    uint8_t mid[32], salt[16] = {0}, nonce[12] = {0};
    kv_manifest_id(canon.p, canon.n, mid);
    size_t stored = canon.n + (encrypt ? 16 : 0), file_n = 2 * KV_ALIGN + stored;
    if (encrypt) {
        if (salt_in) memcpy(salt, salt_in, 16);
        else MU_ASSERT(RAND_bytes(salt, 16) == 1);
        if (nonce_in) memcpy(nonce, nonce_in, 12);
        else MU_ASSERT(RAND_bytes(nonce, 12) == 1);
    }
    kv_buf o = {0};
    if (!buf_reserve(&o, file_n)) {
        kv_buf_free(&canon);
        return NOMEM(err);
    }
    uint8_t *h = o.p, *body = o.p + KV_ALIGN, *f = o.p + KV_ALIGN + stored;
    memset(o.p, 0, file_n);
    memcpy(h, "KVPKP1\0\0", 8);
    wrle(h + 8, 1, 2);
    wrle(h + 10, KV_ALIGN, 2);
    wrle(h + 12, KV_ALIGN, 4);
    wrle(h + 16, encrypt, 4);
    wrle(h + 24, stored, 8);
    wrle(h + 32, canon.n, 8);
    wrle(h + 40, m->epoch, 8);
    memcpy(h + 56, m->tenant, 32);
    memcpy(h + 88, mid, 32);
    memcpy(h + 120, salt, 16);
    memcpy(h + 136, nonce, 12);
    kv_sha256(h, KV_ALIGN, h + 148);
    if (encrypt) {
        uint8_t dk[32];
        manifest_data_key(keys, mid, salt, dk);
        rc = kv_aead(true, dk, nonce, h, KV_ALIGN, canon.p, canon.n, body, body + canon.n);
        OPENSSL_cleanse(dk, sizeof dk);
        if (rc) {
            kv_buf_free(&canon);
            kv_buf_free(&o);
            return mu_fail(err, MU_E_STATE, "kvpack: ChaCha20-Poly1305 encryption failed");
        }
    } else {
        memcpy(body, canon.p, canon.n);
    }
    kv_buf_free(&canon);
    memcpy(f, "KVCMT1\0\0", 8);
    wrle(f + 8, 1, 2);
    wrle(f + 10, KV_ALIGN, 2);
    wrle(f + 16, stored, 8);
    wrle(f + 24, m->epoch, 8);
    wrle(f + 40, file_n, 8);
    memcpy(f + 48, mid, 32);
    pack_auth(keys, h, body, stored, m->epoch, file_n, f + 80);
    o.n = file_n;
    *out = o;
    if (id) memcpy(id, mid, 32);
    return 0;
}

static int parse_header(const uint8_t *p, size_t n, kv_pack_header *o, mu_err *err) {
    if (n < KV_ALIGN) return kv_fail(err, KV_TRUNCATED, "truncated production pack header");
    if (memcmp(p, "KVPKP1\0\0", 8)) return kv_fail(err, KV_BAD_MAGIC, "invalid production pack magic");
    if (rdle(p + 8, 2) != 1 || rdle(p + 10, 2) != KV_ALIGN || rdle(p + 12, 4) != KV_ALIGN)
        return kv_fail(err, KV_BAD_MAGIC, "invalid production pack header contract");
    uint32_t flags = (uint32_t)rdle(p + 16, 4);
    if (flags & ~1u) return kv_fail(err, KV_RESERVED, "unknown pack flags");
    if (rdle(p + 20, 4) || rdle(p + 48, 8) || !all_zero(p + 180, KV_ALIGN - 180))
        return kv_fail(err, KV_RESERVED, "pack header reserved bytes are nonzero");
    o->encrypted = flags & 1;
    if (!o->encrypted && !all_zero(p + 120, 28))
        return kv_fail(err, KV_RESERVED, "unencrypted manifest salt or nonce is nonzero");
    memcpy(o->tenant, p + 56, 32);
    memcpy(o->manifest_id, p + 88, 32);
    o->epoch = rdle(p + 40, 8);
    o->stored_bytes = rdle(p + 24, 8);
    o->plain_bytes = rdle(p + 32, 8);
    return 0;
}

static int header_digest(const uint8_t *p, mu_err *err) {
    uint8_t *h = malloc(KV_ALIGN), dg[32];
    if (!h) return NOMEM(err);
    memcpy(h, p, KV_ALIGN);
    memset(h + 148, 0, 32);
    kv_sha256(h, KV_ALIGN, dg);
    free(h);
    if (memcmp(dg, p + 148, 32)) return kv_fail(err, KV_CHECKSUM, "pack header digest mismatch");
    return 0;
}

int kv_pack_header_read(const uint8_t *p, size_t n, kv_pack_header *out, mu_err *err) {
    kv_pack_header h;
    int rc = parse_header(p, n, &h, err);
    if (!rc) rc = header_digest(p, err);
    if (!rc) *out = h;
    return rc;
}

int kv_pack_decode(const uint8_t *p, size_t n, const kv_keys *keys, kv_mem *mem, kv_manifest *out, mu_err *err) {
    if (n < 2 * KV_ALIGN) return kv_fail(err, KV_TRUNCATED, "truncated production pack");
    kv_pack_header h;
    int rc = parse_header(p, n, &h, err);
    if (rc) return rc;
    if (h.stored_bytes > KV_MAX_MANIFEST + 16 || h.plain_bytes > KV_MAX_MANIFEST)
        return kv_fail(err, KV_BOUNDS, "manifest exceeds production bound");
    const uint8_t *f = p + n - KV_ALIGN, *body = p + KV_ALIGN;
    size_t body_n = n - 2 * KV_ALIGN;
    if (memcmp(f, "KVCMT1\0\0", 8)) return kv_fail(err, KV_BAD_MAGIC, "invalid production commit footer magic");
    if (rdle(f + 8, 2) != 1 || rdle(f + 10, 2) != KV_ALIGN || rdle(f + 12, 4) || rdle(f + 32, 8) ||
        !all_zero(f + 112, KV_ALIGN - 112))
        return kv_fail(err, KV_RESERVED, "invalid production commit footer");
    if (body_n != h.stored_bytes || rdle(f + 16, 8) != h.stored_bytes || rdle(f + 24, 8) != h.epoch ||
        rdle(f + 40, 8) != n || memcmp(f + 48, h.manifest_id, 32))
        return kv_fail(err, KV_BOUNDS, "pack footer binding mismatch");
    if ((rc = header_digest(p, err))) return rc;
    uint8_t tag[32];
    pack_auth(keys, p, body, body_n, h.epoch, n, tag);
    if (CRYPTO_memcmp(tag, f + 80, 32)) return kv_fail(err, KV_AUTH, "manifest HMAC authentication failed");
    const uint8_t *canon = body;
    size_t canon_n = body_n;
    uint8_t *dec = NULL;
    if (h.encrypted) {
        if (body_n < 16) return kv_fail(err, KV_TRUNCATED, "truncated encrypted manifest");
        canon_n = body_n - 16;
        dec = malloc(canon_n ? canon_n : 1);
        if (!dec) return NOMEM(err);
        uint8_t dk[32], t[16];
        manifest_data_key(keys, h.manifest_id, p + 120, dk);
        memcpy(t, body + canon_n, 16);
        rc = kv_aead(false, dk, p + 136, p, KV_ALIGN, body, canon_n, dec, t);
        OPENSSL_cleanse(dk, sizeof dk);
        if (rc) {
            free(dec);
            return kv_fail(err, KV_AUTH, "manifest AEAD authentication failed");
        }
        canon = dec;
    }
    uint8_t mid[32];
    kv_manifest_id(canon, canon_n, mid);
    if (canon_n != h.plain_bytes || memcmp(mid, h.manifest_id, 32)) {
        free(dec);
        return kv_fail(err, KV_AUTH, "manifest content identity mismatch");
    }
    kv_manifest m;
    rc = kv_decode_manifest(canon, canon_n, false, mem, &m, err);
    free(dec);
    if (rc) return rc;
    if (memcmp(m.tenant, h.tenant, 32) || m.epoch != h.epoch)
        return kv_fail(err, KV_AUTH, "manifest header identity mismatch");
    if ((rc = kv_validate_manifest(&m, err))) return rc;
    *out = m;
    return 0;
}
