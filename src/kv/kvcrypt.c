/* kvcrypt.c: kvpack v1 identities and keys (IDENTITY_V1.md): SHA-256 and
 * HMAC-SHA-256 over framed parts, the HKDF key schedule, the semantic,
 * family, schema and manifest digests, namespace ids, the auxiliary-input
 * root, the token prefix chain and chunk content ids.
 * Owns: the domain strings and the framing of every keyed digest.
 * Does not own: AEAD (kvobj.c). All primitives are OpenSSL 3's.
 * Design: HKDF-SHA-256 with one 32-byte output block is exactly
 * HMAC(HMAC(salt, ikm), info || 0x01) (RFC 5869); it is computed that way
 * from the HMAC below rather than through a second OpenSSL interface. */
#include "kvpack.h"

#include <pthread.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdlib.h>
#include <string.h>

/* SHA-256 and HMAC fetched from the default provider once per process, not
 * per call (a fetch takes a global lock: pack chunks hash on several
 * threads). */
static EVP_MD *g_sha256;
static EVP_MAC *g_hmac;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static void fetch_once(void) {
    g_sha256 = EVP_MD_fetch(NULL, "SHA256", NULL);
    g_hmac = EVP_MAC_fetch(NULL, "HMAC", NULL);
    MU_ASSERT(g_sha256 && g_hmac);
}
static const EVP_MD *sha256_md(void) {
    pthread_once(&g_once, fetch_once);
    return g_sha256;
}

void kv_sha256v(const void *const *parts, const size_t *lens, int n, uint8_t out[32]) {
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    unsigned len = 32;
    MU_ASSERT(c && EVP_DigestInit_ex(c, sha256_md(), NULL));
    for (int i = 0; i < n; i++) MU_ASSERT(EVP_DigestUpdate(c, parts[i], lens[i]));
    MU_ASSERT(EVP_DigestFinal_ex(c, out, &len));
    EVP_MD_CTX_free(c);
}

kv_sha *kv_sha_new(void) {
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    MU_ASSERT(c && EVP_DigestInit_ex(c, sha256_md(), NULL));
    return (kv_sha *)c;
}

void kv_sha_put(kv_sha *c, const void *p, size_t n) { MU_ASSERT(EVP_DigestUpdate((EVP_MD_CTX *)c, p, n)); }

void kv_sha_end(kv_sha *c, uint8_t out[32]) {
    unsigned len = 32;
    MU_ASSERT(EVP_DigestFinal_ex((EVP_MD_CTX *)c, out, &len));
    EVP_MD_CTX_free((EVP_MD_CTX *)c);
}

void kv_sha256(const void *p, size_t n, uint8_t out[32]) {
    const void *parts[1] = {p};
    size_t lens[1] = {n};
    kv_sha256v(parts, lens, 1, out);
}

/* HMAC with a key of any length (HKDF extracts with the salt as key). */
static void hmac_any(const uint8_t *key, size_t key_n, const void *const *parts, const size_t *lens, int n,
                     uint8_t out[32]) {
    pthread_once(&g_once, fetch_once);
    EVP_MAC_CTX *c = EVP_MAC_CTX_new(g_hmac);
    OSSL_PARAM params[2] = {OSSL_PARAM_construct_utf8_string("digest", "SHA256", 0), OSSL_PARAM_construct_end()};
    static const uint8_t empty[1];
    size_t len = 32;
    MU_ASSERT(c && EVP_MAC_init(c, key_n ? key : empty, key_n, params));
    for (int i = 0; i < n; i++) MU_ASSERT(EVP_MAC_update(c, parts[i], lens[i]));
    MU_ASSERT(EVP_MAC_final(c, out, &len, 32) && len == 32);
    EVP_MAC_CTX_free(c);
}

void kv_hmacv(const uint8_t key[32], const void *const *parts, const size_t *lens, int n, uint8_t out[32]) {
    hmac_any(key, 32, parts, lens, n, out);
}

static void le64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void le32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* HKDF-SHA-256 (RFC 5869) with a 32-byte output. */
void kv_hkdf(const uint8_t *ikm, size_t ikm_n, const uint8_t *salt, size_t salt_n, const void *info,
                 size_t info_n, uint8_t out[32]) {
    uint8_t prk[32];
    const void *p1[1] = {ikm};
    size_t l1[1] = {ikm_n};
    hmac_any(salt, salt_n, p1, l1, 1, prk);
    static const uint8_t one = 1;
    const void *p2[2] = {info, &one};
    size_t l2[2] = {info_n, 1};
    hmac_any(prk, 32, p2, l2, 2, out);
    OPENSSL_cleanse(prk, sizeof prk);
}

int kv_key_schedule(const uint8_t root[32], const uint8_t tenant[32], uint64_t epoch, kv_keys *k, mu_err *err) {
    if (!epoch) return kv_fail(err, KV_SEMANTICS, "key epoch must be nonzero");
    uint8_t esalt[40];
    memcpy(esalt, tenant, 32);
    le64(esalt + 32, epoch);
#define STABLE(dst, label) kv_hkdf(root, 32, tenant, 32, label, sizeof label - 1, dst)
#define EPOCH(dst, label) kv_hkdf(root, 32, esalt, 40, label, sizeof label - 1, dst)
    STABLE(k->namespace_, "kvpack/v1/stable/namespace");
    STABLE(k->prefix, "kvpack/v1/stable/prefix");
    EPOCH(k->manifest_auth, "kvpack/v1/epoch/manifest-auth");
    EPOCH(k->manifest_enc, "kvpack/v1/epoch/manifest-encryption");
    STABLE(k->chunk_identity, "kvpack/v1/stable/chunk-identity");
    EPOCH(k->object_identity, "kvpack/v1/epoch/object-identity");
    EPOCH(k->chunk_enc, "kvpack/v1/epoch/chunk-encryption");
#undef STABLE
#undef EPOCH
    return 0;
}

void kv_keys_wipe(kv_keys *k) { OPENSSL_cleanse(k, sizeof *k); }

/* SHA-256(domain || the complete encoding) */
static int digest_of(kv_buf *b, const char *domain, size_t domain_n, uint8_t out[32]) {
    if (b->oom) {
        kv_buf_free(b);
        return MU_E_NOMEM;
    }
    const void *parts[2] = {domain, b->p};
    size_t lens[2] = {domain_n, b->n};
    kv_sha256v(parts, lens, 2, out);
    kv_buf_free(b);
    return 0;
}

int kv_semantic_id(const kv_semantic *s, uint8_t out[32]) {
    static const char d[] = "kvpack/v1/semantic-model";
    const void *parts[6] = {d, s->weights, s->adapters, s->tokenizer, s->position, s->math};
    size_t lens[6] = {sizeof d, 32, 32, 32, 32, 32};
    kv_sha256v(parts, lens, 6, out);
    return 0;
}

int kv_family_id(const kv_family *f, uint8_t out[32]) {
    static const char d[] = "kvpack/v1/representation-family";
    kv_buf b = {0};
    kv_encode_family(&b, f);
    return digest_of(&b, d, sizeof d, out);
}

int kv_schema_id(const kv_schema *s, uint8_t out[32]) {
    static const char d[] = "kvpack/v1/realized-cut-schema";
    kv_buf b = {0};
    kv_encode_schema(&b, s);
    return digest_of(&b, d, sizeof d, out);
}

void kv_manifest_id(const uint8_t *canonical, size_t n, uint8_t out[32]) {
    static const char d[] = "kvpack/v1/manifest";
    const void *parts[2] = {d, canonical};
    size_t lens[2] = {sizeof d, n};
    kv_sha256v(parts, lens, 2, out);
}

void kv_namespace_id(const uint8_t key[32], const void *tenant_id, size_t n, uint8_t out[32]) {
    static const char d[] = "kvpack/v1/namespace";
    uint8_t len[4];
    le32(len, (uint32_t)n);
    const void *parts[3] = {d, len, tenant_id};
    size_t lens[3] = {sizeof d, 4, n};
    kv_hmacv(key, parts, lens, 3, out);
}

static bool zero32(const uint8_t *p) {
    uint8_t a = 0;
    for (int i = 0; i < 32; i++) a |= p[i];
    return !a;
}

int kv_aux_root(const uint8_t key[32], const uint8_t tenant[32], const kv_aux *aux, int n, uint8_t out[32],
                mu_err *err) {
    size_t bytes = 4 + (size_t)n * 80;
    uint8_t *f = malloc(bytes);
    if (!f) return mu_fail(err, MU_E_NOMEM, "kvpack: out of memory");
    le32(f, (uint32_t)n);
    for (int i = 0; i < n; i++) {
        if (zero32(aux[i].type_id) || zero32(aux[i].value_id)) {
            free(f);
            return kv_fail(err, KV_SEMANTICS, "auxiliary identity contains a zero component");
        }
        uint8_t *p = f + 4 + (size_t)i * 80;
        le64(p, (uint64_t)i);
        le32(p + 8, 32);
        memcpy(p + 12, aux[i].type_id, 32);
        le32(p + 44, 32);
        memcpy(p + 48, aux[i].value_id, 32);
    }
    static const char d[] = "kvpack/v1/auxiliary-input-root";
    const void *parts[3] = {d, tenant, f};
    size_t lens[3] = {sizeof d, 32, bytes};
    kv_hmacv(key, parts, lens, 3, out);
    free(f);
    return 0;
}

int kv_input_cut(const uint8_t key[32], const uint8_t tenant[32], const kv_semantic *model, const kv_family *family,
                 const kv_aux *aux, int n_aux, const uint32_t *tokens, size_t n, kv_cut *out, uint8_t (*nodes)[32],
                 mu_err *err) {
    uint8_t sem[32], fam[32], ctx[32], parent[32];
    kv_cut c = {0};
    if (kv_aux_root(key, tenant, aux, n_aux, c.aux_root, err)) return err ? err->code : MU_E_FORMAT;
    kv_semantic_id(model, sem);
    if (kv_family_id(family, fam)) return mu_fail(err, MU_E_NOMEM, "kvpack: out of memory");
    static const char dc[] = "kvpack/v1/prefix-context", dr[] = "kvpack/v1/prefix-root",
                      dn[] = "kvpack/v1/prefix-node";
    {
        const void *parts[5] = {dc, tenant, sem, fam, c.aux_root};
        size_t lens[5] = {sizeof dc, 32, 32, 32, 32};
        kv_hmacv(key, parts, lens, 5, ctx);
    }
    {
        const void *parts[2] = {dr, ctx};
        size_t lens[2] = {sizeof dr, 32};
        kv_hmacv(key, parts, lens, 2, parent);
    }
    uint8_t blk[KV_PREFIX_BLOCK * 4];
    for (size_t s = 0, i = 0; s < n; s += KV_PREFIX_BLOCK, i++) {
        size_t cnt = n - s < KV_PREFIX_BLOCK ? n - s : KV_PREFIX_BLOCK;
        uint8_t head[24];
        le64(head, (uint64_t)i);
        le64(head + 8, (uint64_t)s);
        le32(head + 16, (uint32_t)cnt);
        le32(head + 20, (uint32_t)(cnt * 4));
        for (size_t t = 0; t < cnt; t++) le32(blk + t * 4, tokens[s + t]);
        const void *parts[5] = {dn, ctx, parent, head, blk};
        size_t lens[5] = {sizeof dn, 32, 32, 24, cnt * 4};
        kv_hmacv(key, parts, lens, 5, parent);
        if (nodes) memcpy(nodes[i], parent, 32);
    }
    memcpy(c.token_root, parent, 32);
    c.token_count = n;
    *out = c;
    return 0;
}

/* The parts of a content id's HMAC message before the plaintext. */
typedef struct {
    uint8_t layer[6], nums[28];
    const void *parts[6];
    size_t lens[6];
} cid_head;
static const char CID_DOMAIN[] = "kvpack/v1/chunk-content";

static int cid_parts(const uint8_t tenant[32], const uint8_t family_id[32], const kv_key *state, const kv_span *span,
                     size_t n, cid_head *h, mu_err *err) {
    if (!span->token_count || span->plain_bytes != n)
        return kv_fail(err, KV_SEMANTICS, "chunk plaintext does not match its declared span");
    le32(h->layer, state->layer);
    h->layer[4] = (uint8_t)state->len;
    h->layer[5] = (uint8_t)(state->len >> 8);
    le64(h->nums, span->token_start);
    le64(h->nums + 8, span->token_count);
    le64(h->nums + 16, span->plain_off);
    le32(h->nums + 24, (uint32_t)n);
    const void *parts[6] = {CID_DOMAIN, tenant, family_id, h->layer, state->name, h->nums};
    size_t lens[6] = {sizeof CID_DOMAIN, 32, 32, 6, state->len, 28};
    memcpy(h->parts, parts, sizeof parts);
    memcpy(h->lens, lens, sizeof lens);
    return 0;
}

int kv_chunk_id(const uint8_t key[32], const uint8_t tenant[32], const uint8_t family_id[32], const kv_key *state,
                const kv_span *span, const uint8_t *plain, size_t n, uint8_t out[32], mu_err *err) {
    cid_head h;
    int rc = cid_parts(tenant, family_id, state, span, n, &h, err);
    if (rc) return rc;
    const void *parts[7];
    size_t lens[7];
    memcpy(parts, h.parts, sizeof h.parts);
    memcpy(lens, h.lens, sizeof h.lens);
    parts[6] = plain;
    lens[6] = n;
    kv_hmacv(key, parts, lens, 7, out);
    return 0;
}

void kv_hmac_short(const uint8_t key[32], const uint8_t *const *msg, const size_t *len, int n, uint8_t (*out)[32]) {
    uint8_t ipad[64], opad[64];
    memset(ipad, 0x36, 64);
    memset(opad, 0x5c, 64);
    for (int i = 0; i < 32; i++) ipad[i] ^= key[i], opad[i] ^= key[i];
    uint8_t head[16][KV_SHA_HEAD], inner[16][96];
    kv_sha_job sj[16];
    for (int b = 0; b < n; b += 16) {
        int m = n - b < 16 ? n - b : 16;
        for (int i = 0; i < m; i++) {
            MU_ASSERT(len[b + i] <= KV_SHA_HEAD - 64);
            memcpy(head[i], ipad, 64);
            memcpy(head[i] + 64, msg[b + i], len[b + i]);
            memcpy(inner[i], opad, 64);
            sj[i] = (kv_sha_job){.head = head[i], .head_n = 64 + len[b + i], .out = inner[i] + 64};
        }
        kv_sha256_jobs(sj, m);
        for (int i = 0; i < m; i++) sj[i] = (kv_sha_job){.head = inner[i], .head_n = 96, .out = out[b + i]};
        kv_sha256_jobs(sj, m);
    }
    OPENSSL_cleanse(head, sizeof head);
    OPENSSL_cleanse(inner, sizeof inner);
    OPENSSL_cleanse(ipad, sizeof ipad);
    OPENSSL_cleanse(opad, sizeof opad);
}

/* HMAC-SHA-256 with a 32-byte key (RFC 2104) as two hashes a job each:
 * inner = SHA-256(key ^ ipad || message), out = SHA-256(key ^ opad ||
 * inner); the message's parts before the plaintext go in the job's head. */
#define CID_BATCH 16
int kv_chunk_ids(const uint8_t key[32], const uint8_t tenant[32], const uint8_t family_id[32], const kv_cid_job *jobs,
                 int n, mu_err *err) {
    uint8_t ipad[64], opad[64];
    memset(ipad, 0x36, 64);
    memset(opad, 0x5c, 64);
    for (int i = 0; i < 32; i++) ipad[i] ^= key[i], opad[i] ^= key[i];
    for (int b = 0; b < n; b += CID_BATCH) {
        int m = n - b < CID_BATCH ? n - b : CID_BATCH;
        uint8_t head[CID_BATCH][KV_SHA_HEAD], inner[CID_BATCH][96];
        kv_sha_job sj[CID_BATCH];
        for (int i = 0; i < m; i++) {
            const kv_cid_job *j = &jobs[b + i];
            cid_head h;
            int rc = cid_parts(tenant, family_id, j->state, j->span, j->n, &h, err);
            if (rc) return rc;
            size_t o = 64;
            memcpy(head[i], ipad, 64);
            for (int k = 0; k < 6; k++) {
                if (o + h.lens[k] > KV_SHA_HEAD) return kv_fail(err, KV_BOUNDS, "chunk state name too long");
                memcpy(head[i] + o, h.parts[k], h.lens[k]);
                o += h.lens[k];
            }
            memcpy(inner[i], opad, 64);
            sj[i] = (kv_sha_job){.head = head[i], .head_n = o, .body = j->plain, .body_n = j->n, .out = inner[i] + 64};
        }
        kv_sha256_jobs(sj, m);
        for (int i = 0; i < m; i++) sj[i] = (kv_sha_job){.head = inner[i], .head_n = 96, .out = jobs[b + i].out};
        kv_sha256_jobs(sj, m);
        OPENSSL_cleanse(head, sizeof head);
        OPENSSL_cleanse(inner, sizeof inner);
    }
    OPENSSL_cleanse(ipad, sizeof ipad);
    OPENSSL_cleanse(opad, sizeof opad);
    return 0;
}
