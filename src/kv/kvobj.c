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
    uint8_t a = 0;
    for (size_t i = 0; i < n; i++) a |= p[i];
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

static void object_key(const kv_keys *keys, const uint8_t *tenant, const uint8_t *fam, const uint8_t *content,
                       uint64_t epoch, unsigned codec, unsigned version, bool enc, const uint8_t *salt,
                       const uint8_t *nonce, uint8_t out[32]) {
    static const char d[] = "kvpack/v1/chunk-object";
    uint8_t nums[13];
    wrle(nums, epoch, 8);
    wrle(nums + 8, codec, 2);
    wrle(nums + 10, version, 2);
    nums[12] = enc;
    const void *parts[7] = {d, tenant, fam, content, nums, salt, nonce};
    size_t lens[7] = {sizeof d, 32, 32, 32, 13, 16, 12};
    kv_hmacv(keys->object_identity, parts, lens, 7, out);
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

/* One object, built in place: the header (zeroed), the frame right after
 * it (the raw codec copies the plaintext once, or not at all when the
 * caller read it there already), encrypted in place, the padding zeroed;
 * the plaintext is hashed once for its content id and the object once for
 * its digest, as CHUNK_V1.md defines them. */
int kv_chunk_encode_to(const uint8_t *plain, size_t n, const uint8_t tenant[32], const kv_family *family,
                       const kv_key *state, const kv_span *span, uint64_t epoch, bool encrypt, const kv_keys *keys,
                       const uint8_t *salt_in, const uint8_t *nonce_in, const uint8_t fam_in[32], kv_buf *obj_buf,
                       kv_chunk *out, mu_err *err) {
    if (!epoch) return kv_fail(err, KV_SEMANTICS, "chunk key epoch must be nonzero");
    if (span->plain_bytes != n || !span->token_count)
        return kv_fail(err, KV_SEMANTICS, "chunk plaintext does not match its declared span");
    const kv_fstate *st = family_state(family, state);
    if (!st) return kv_fail(err, KV_SEMANTICS, "chunk state is absent from representation family");
    if (st->codec_version != 1) return kv_fail(err, KV_CODEC, "unsupported chunk codec version");
    if (n < 1 || n > KV_MAX_PLAIN) return kv_fail(err, KV_BOUNDS, "chunk plaintext must be in 1..=4 MiB");
    if (st->codec != KV_CODEC_RAW && st->codec != KV_CODEC_LOSSLESS)
        return kv_fail(err, KV_UNKNOWN_ENUM, "unknown codec %u", st->codec);
    uint8_t fam[32], salt[16] = {0}, nonce[12] = {0};
    int rc;
    if (fam_in) memcpy(fam, fam_in, 32);
    else if (kv_family_id(family, fam)) return NOMEM(err);
    /* room for the largest object this plaintext can make */
    size_t bound = kv_chunk_bound(n);
    if (obj_buf->cap < bound) {
        /* a plaintext the caller put in place came with a buffer of kv_chunk_bound */
        MU_ASSERT(!(plain >= obj_buf->p && plain < obj_buf->p + obj_buf->cap));
        obj_buf->n = 0;
        if (!buf_reserve(obj_buf, bound)) return NOMEM(err);
    }
    uint8_t *h = obj_buf->p, *frame = h + KV_ALIGN;
    size_t frame_n;
    if (st->codec == KV_CODEC_RAW) {
        memcpy(frame, "KVRAW1\0\0", 8);
        wrle(frame + 8, 1, 2);
        wrle(frame + 10, 0, 2);
        wrle(frame + 12, n, 4);
        if (plain != frame + KV_FRAME_HDR) memcpy(frame + KV_FRAME_HDR, plain, n);
        frame_n = KV_FRAME_HDR + n;
    } else {
        obj_buf->n = KV_ALIGN;
        if ((rc = kv_frame_encode(st->codec, plain, n, obj_buf, err))) return rc;
        frame_n = obj_buf->n - KV_ALIGN;
    }
    if ((rc = kv_chunk_id(keys->chunk_identity, tenant, fam, state, span, plain, n, out->chunk_id, err))) return rc;
    if (encrypt) {
        if (salt_in) memcpy(salt, salt_in, 16);
        else MU_ASSERT(RAND_bytes(salt, 16) == 1);
        if (nonce_in) memcpy(nonce, nonce_in, 12);
        else MU_ASSERT(RAND_bytes(nonce, 12) == 1);
    }
    object_key(keys, tenant, fam, out->chunk_id, epoch, st->codec, st->codec_version, encrypt, salt, nonce,
               out->object_key);
    size_t payload = frame_n + (encrypt ? 16 : 0);
    size_t obj = (KV_ALIGN + payload + KV_ALIGN - 1) / KV_ALIGN * KV_ALIGN;
    if (obj > KV_MAX_OBJECT) return kv_fail(err, KV_BOUNDS, "encoded chunk object exceeds bound");
    memset(h, 0, KV_ALIGN);
    memcpy(h, "KVCHK1\0\0", 8);
    wrle(h + 8, 1, 2);
    wrle(h + 10, KV_ALIGN, 2);
    wrle(h + 12, KV_ALIGN, 4);
    wrle(h + 16, encrypt, 4);
    wrle(h + 20, st->codec, 2);
    wrle(h + 22, st->codec_version, 2);
    wrle(h + 24, n, 4);
    wrle(h + 28, frame_n, 4);
    wrle(h + 32, payload, 4);
    wrle(h + 36, obj, 4);
    wrle(h + 40, epoch, 8);
    memcpy(h + 48, tenant, 32);
    memcpy(h + 80, fam, 32);
    memcpy(h + 112, out->chunk_id, 32);
    memcpy(h + 144, out->object_key, 32);
    memcpy(h + 176, salt, 16);
    memcpy(h + 192, nonce, 12);
    kv_sha256(h, KV_ALIGN, h + 204);
    if (encrypt) {
        uint8_t dk[32];
        chunk_data_key(keys, out->chunk_id, out->object_key, salt, dk);
        rc = kv_aead(true, dk, nonce, h, KV_ALIGN, frame, frame_n, frame, frame + frame_n); /* in place */
        OPENSSL_cleanse(dk, sizeof dk);
        if (rc) return mu_fail(err, MU_E_STATE, "kvpack: ChaCha20-Poly1305 encryption failed");
    }
    memset(h + KV_ALIGN + payload, 0, obj - KV_ALIGN - payload);
    obj_buf->n = obj;
    out->plain_bytes = (uint32_t)n;
    kv_sha256(h, obj, out->digest);
    return 0;
}

/* Every check of the decode order up to the AEAD (framing, digests, keys):
 * the fields the rest needs. */
typedef struct {
    bool encrypted;
    unsigned codec;
    uint64_t plain, enc_n;
    uint8_t fam[32];
} chunk_head;

static int chunk_check(const uint8_t *p, size_t n, const kv_ref *ref, const kv_span *span, const uint8_t tenant[32],
                       const kv_family *family, const kv_key *state, const kv_keys *keys, const uint8_t *fam_in,
                       chunk_head *ch, mu_err *err) {
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
    uint8_t dg[32];
    kv_sha256(p, n, dg);
    if (CRYPTO_memcmp(dg, ref->digest, 32)) return kv_fail(err, KV_AUTH, "chunk object digest mismatch");
    static const uint8_t zero[32];
    const void *parts[3] = {p, zero, p + 236};
    size_t lens[3] = {204, 32, KV_ALIGN - 236};
    kv_sha256v(parts, lens, 3, dg); /* the header with its digest field zeroed */
    if (CRYPTO_memcmp(dg, p + 204, 32)) return kv_fail(err, KV_AUTH, "chunk header digest mismatch");
    const kv_fstate *st = family_state(family, state);
    if (!st) return kv_fail(err, KV_SEMANTICS, "chunk state is absent from representation family");
    if (codec != st->codec || version != st->codec_version)
        return kv_fail(err, KV_SEMANTICS, "chunk codec does not match representation family");
    if (fam_in) memcpy(ch->fam, fam_in, 32);
    else if (kv_family_id(family, ch->fam)) return NOMEM(err);
    if (memcmp(p + 48, tenant, 32) || memcmp(p + 80, ch->fam, 32) || rdle(p + 40, 8) != ref->epoch)
        return kv_fail(err, KV_AUTH, "chunk namespace, family, or epoch mismatch");
    const uint8_t *content = p + 112, *okey = p + 144, *salt = p + 176, *nonce = p + 192;
    uint8_t derived[32];
    object_key(keys, p + 48, ch->fam, content, ref->epoch, codec, version, encrypted, salt, nonce, derived);
    if (memcmp(content, ref->chunk_id, 32) || memcmp(okey, ref->object_key, 32) || CRYPTO_memcmp(okey, derived, 32))
        return kv_fail(err, KV_AUTH, "chunk identity or object key mismatch");
    ch->encrypted = encrypted;
    ch->codec = codec;
    ch->plain = plain;
    ch->enc_n = enc_n;
    return 0;
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

int kv_chunk_open(uint8_t *p, size_t n, const kv_ref *ref, const kv_span *span, const uint8_t tenant[32],
                  const kv_family *family, const kv_key *state, const kv_keys *keys, const uint8_t fam[32],
                  uint8_t *out, const uint8_t **plain, mu_err *err) {
    chunk_head ch;
    int rc = chunk_check(p, n, ref, span, tenant, family, state, keys, fam, &ch, err);
    if (rc) return rc;
    const uint8_t *content = p + 112, *okey = p + 144, *salt = p + 176, *nonce = p + 192;
    uint8_t *frame = p + KV_ALIGN;
    if (ch.encrypted) {
        uint8_t dk[32], tag[16];
        chunk_data_key(keys, content, okey, salt, dk);
        memcpy(tag, p + KV_ALIGN + ch.enc_n, 16);
        rc = kv_aead(false, dk, nonce, p, KV_ALIGN, frame, ch.enc_n, frame, tag); /* in place */
        OPENSSL_cleanse(dk, sizeof dk);
        if (rc) return kv_fail(err, KV_AUTH, "chunk AEAD authentication failed");
    }
    const uint8_t *pl = out;
    if (ch.codec == KV_CODEC_RAW) { /* the frame's checks, then the plaintext where it lies */
        if (memcmp(frame, "KVRAW1\0\0", 8)) return kv_fail(err, KV_BAD_MAGIC, "codec frame magic does not match codec");
        if (rdle(frame + 8, 2) != 1) return kv_fail(err, KV_BAD_MAGIC, "unsupported codec frame version");
        if (rdle(frame + 10, 2)) return kv_fail(err, KV_RESERVED, "codec frame reserved field is nonzero");
        if (rdle(frame + 12, 4) != ch.plain) return kv_fail(err, KV_BOUNDS, "codec frame decoded length mismatch");
        if (ch.enc_n - KV_FRAME_HDR != ch.plain) return kv_fail(err, KV_BOUNDS, "raw frame length mismatch");
        pl = frame + KV_FRAME_HDR;
    } else if ((rc = kv_frame_decode(ch.codec, frame, ch.enc_n, ch.plain, out, err))) {
        return rc;
    }
    uint8_t cid[32];
    if ((rc = kv_chunk_id(keys->chunk_identity, p + 48, ch.fam, state, span, pl, ch.plain, cid, err))) return rc;
    if (CRYPTO_memcmp(cid, content, 32)) return kv_fail(err, KV_AUTH, "chunk plaintext identity mismatch");
    *plain = pl;
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
