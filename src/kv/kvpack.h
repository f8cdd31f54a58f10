/* kvpack.h: the kvpack v1 wire format (spec/PACK_V1.md, MANIFEST_V1.md,
 * CHUNK_V1.md, IDENTITY_V1.md of High-Performance-AI-Lab/kvpack), as plain
 * C values, encoders, decoders and the key schedule.
 * Owns: canonical objects (family, realized schema, state declaration,
 * manifest), codec frames, chunk objects, the pack envelope, identities.
 * Does not own: files, engines or models (kvstore.c, kvengine.c).
 * Errors: every rejection is MU_E_FORMAT with the message
 * "kvpack: CATEGORY: reason", CATEGORY being the specification's verdict
 * category (kv_category() reads it back); MU_E_NOMEM for allocation. */
#ifndef MU_KV_KVPACK_H
#define MU_KV_KVPACK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../base/err.h"

#define KV_ALIGN 4096u
#define KV_MAX_PLAIN (4u * 1024 * 1024)
#define KV_FRAME_HDR 16u
#define KV_MAX_CODEC_OVERHEAD (KV_FRAME_HDR + (KV_MAX_PLAIN + 127) / 128)
#define KV_MAX_OBJECT ((uint64_t)KV_ALIGN + KV_MAX_PLAIN + KV_MAX_CODEC_OVERHEAD + 16 + KV_ALIGN)
#define KV_MAX_RANK 8
#define KV_MAX_DEPTH 7
#define KV_PREFIX_BLOCK 256
#define KV_MAX_NAME 255
#define KV_MAX_STATES 65536u
#define KV_MAX_CHUNKS 65536u
#define KV_MAX_DEPS 64u
#define KV_MAX_MANIFEST (256ull * 1024 * 1024)

enum { KV_CACHE_ORDINARY = 1 };
enum { KV_CODEC_RAW = 1, KV_CODEC_LOSSLESS = 2 };
enum { KV_LAYOUT_CONTIGUOUS = 1, KV_LAYOUT_STRIDED = 2 };
enum { KV_MODE_NATIVE = 1, KV_MODE_PORTABLE = 2 };
enum { KV_AXIS_DIRECT = 1, KV_AXIS_GATHER = 2, KV_AXIS_TAIL = 3 };
enum { KV_DTYPE_F16 = 6 };

/* The verdict categories, in the reference's spelling. */
typedef enum {
    KV_TRUNCATED, KV_BAD_MAGIC, KV_RESERVED, KV_BOUNDS, KV_UNKNOWN_ENUM, KV_SEMANTICS, KV_GRAPH, KV_CODEC,
    KV_AUTH, KV_CHECKSUM, KV_N_CATEGORIES
} kv_cat;
extern const char *const kv_cat_names[KV_N_CATEGORIES];
int kv_fail(mu_err *err, kv_cat cat, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* The category name of a kvpack rejection in err, NULL for other errors. */
const char *kv_category(const mu_err *err);
/* Bytes per element of a dtype (0: not a fixed-width dtype). */
unsigned kv_dtype_width(unsigned dtype);

/* ---- memory: every decoded object lives in one arena ------------------ */
typedef struct kv_mem kv_mem;
kv_mem *kv_mem_new(void);
void kv_mem_free(kv_mem *m);
void *kv_alloc(kv_mem *m, size_t n, size_t size); /* zeroed; NULL on overflow or failure */

/* ---- values ----------------------------------------------------------- */
/* A state key: (layer, UTF-8 name); name is not NUL-terminated and lives
 * in the arena (decoded) or wherever the builder put it. */
typedef struct {
    uint32_t layer;
    uint16_t len;
    const uint8_t *name;
} kv_key;
/* Canonical order: layer, then the name's bytes. */
int kv_key_cmp(const kv_key *a, const kv_key *b);

typedef struct {
    kv_key key;
    uint16_t cache_kind, dtype, codec, codec_version, layout, axis_rule;
    uint8_t token_axis;
    uint64_t elements;
    uint8_t rank;
    uint64_t dims[KV_MAX_RANK]; /* 0 = the token dimension */
    uint16_t n_deps;
    kv_key *deps;
} kv_fstate;

typedef struct {
    uint8_t abi[32];
    uint16_t mode;
    uint32_t page_tokens;
    uint8_t topology[32], shard_map[32];
    uint32_t n_states;
    kv_fstate *states;
} kv_family;

typedef struct {
    uint8_t rank;
    uint64_t dims[KV_MAX_RANK];
} kv_shape;

typedef struct {
    uint64_t token_start, token_count, plain_off;
    uint32_t plain_bytes;
} kv_span;

typedef struct {
    uint8_t token_root[32], aux_root[32];
    uint64_t token_count;
} kv_cut;

typedef struct {
    kv_key key;
    kv_shape full, segment;
    uint8_t n_strides;
    uint64_t strides[KV_MAX_RANK];
    uint64_t logical_start, logical_count, phys_off, phys_span, phys_complete, abs_pos, window;
    uint32_t n_spans;
    kv_span *spans;
} kv_rstate;

typedef struct {
    uint32_t id, n_keys;
    kv_key *keys;
} kv_group;

typedef struct {
    uint8_t kind, depth; /* kind 0 full, 1 delta */
    uint8_t parent[32];
    kv_cut parent_cut;
    uint32_t n_states;
    kv_rstate *states;
    uint32_t n_groups;
    kv_group *groups;
    uint64_t segment_bytes, complete_bytes;
} kv_schema;

typedef struct {
    kv_key key;
    kv_shape full, segment;
    uint8_t n_strides;
    uint64_t strides[KV_MAX_RANK];
    uint64_t logical_start, logical_count, abs_pos, window;
    uint32_t group;
} kv_decl;

typedef struct {
    uint8_t chunk_id[32], object_key[32], digest[32];
    uint64_t epoch;
    uint32_t plain_bytes, object_bytes;
} kv_ref;

typedef struct {
    kv_key key;
    uint32_t n_chunks;
    kv_ref *chunks;
} kv_pstate;

typedef struct {
    uint8_t weights[32], adapters[32], tokenizer[32], position[32], math[32];
} kv_semantic;

typedef struct {
    uint8_t tenant[32];
    uint64_t epoch;
    kv_semantic model;
    kv_cut cut;
    kv_family family;
    kv_schema schema;
    uint32_t n_states;
    kv_pstate *states;
} kv_manifest;

/* ---- growable byte buffer for encoders -------------------------------- */
typedef struct {
    uint8_t *p;
    size_t n, cap;
    bool oom;
} kv_buf;
void kv_buf_free(kv_buf *b);

/* ---- canonical objects (kvwire.c) ------------------------------------- */
/* Encoders append to b (b->oom on allocation failure). */
void kv_encode_family(kv_buf *b, const kv_family *f);
void kv_encode_schema(kv_buf *b, const kv_schema *s);
void kv_encode_decl(kv_buf *b, const kv_decl *d);
void kv_encode_manifest(kv_buf *b, const kv_manifest *m);
/* Decoders: the complete canonical decode and byte-identical re-encode;
 * semantic adds validation (family: kv_validate_family; manifest:
 * kv_validate_manifest). Results live in mem. */
int kv_decode_family(const uint8_t *p, size_t n, bool semantic, kv_mem *mem, kv_family *out, mu_err *err);
int kv_decode_schema(const uint8_t *p, size_t n, kv_mem *mem, kv_schema *out, mu_err *err);
int kv_decode_decl(const uint8_t *p, size_t n, kv_mem *mem, kv_decl *out, mu_err *err);
int kv_decode_manifest(const uint8_t *p, size_t n, bool semantic, kv_mem *mem, kv_manifest *out, mu_err *err);
int kv_validate_family(const kv_family *f, mu_err *err);
int kv_validate_manifest(const kv_manifest *m, mu_err *err);

/* ---- identities and keys (kvcrypt.c) ---------------------------------- */
typedef struct {
    uint8_t namespace_[32], prefix[32], manifest_auth[32], manifest_enc[32], chunk_identity[32],
        object_identity[32], chunk_enc[32];
} kv_keys;
int kv_key_schedule(const uint8_t root[32], const uint8_t tenant[32], uint64_t epoch, kv_keys *out, mu_err *err);
void kv_keys_wipe(kv_keys *k);

void kv_sha256(const void *p, size_t n, uint8_t out[32]);
/* Incremental SHA-256 (allocation failure is an abort: a few bytes). */
typedef struct kv_sha kv_sha;
kv_sha *kv_sha_new(void);
void kv_sha_put(kv_sha *c, const void *p, size_t n);
void kv_sha_end(kv_sha *c, uint8_t out[32]); /* frees c */
/* SHA-256 / HMAC-SHA-256 over n parts. */
void kv_sha256v(const void *const *parts, const size_t *lens, int n, uint8_t out[32]);
/* HKDF-SHA-256 (RFC 5869) with one 32-byte output block. */
void kv_hkdf(const uint8_t *ikm, size_t ikm_n, const uint8_t *salt, size_t salt_n, const void *info, size_t info_n,
             uint8_t out[32]);
void kv_hmacv(const uint8_t key[32], const void *const *parts, const size_t *lens, int n, uint8_t out[32]);
/* HMAC-SHA-256 of n messages of at most KV_SHA_HEAD - 64 bytes each under
 * one key, through kv_sha256_jobs (kvsha.c): kv_hmacv's values. */
void kv_hmac_short(const uint8_t key[32], const uint8_t *const *msg, const size_t *len, int n, uint8_t (*out)[32]);

/* Many SHA-256 messages at once (kvsha.c): out = SHA-256(head || body),
 * head at most KV_SHA_HEAD bytes. kv_sha256_jobs hashes 16 at a time in
 * AVX-512 lanes where the CPU has them (kvsha_avx512.c), else one by one
 * through OpenSSL as kv_sha256_jobs_ref always does; MUSER_KV_SHA=ref in
 * the environment forces the reference (benchmarks). */
#define KV_SHA_HEAD 512
typedef struct {
    const uint8_t *head, *body;
    size_t head_n, body_n;
    uint8_t *out;
} kv_sha_job;
void kv_sha256_jobs(const kv_sha_job *jobs, int n);
void kv_sha256_jobs_ref(const kv_sha_job *jobs, int n);
bool kv_sha256_lanes(void); /* whether kv_sha256_jobs uses the lanes */
/* The content ids of n chunks (kv_chunk_id of each) through kv_sha256_jobs. */
typedef struct {
    const kv_key *state;
    const kv_span *span;
    const uint8_t *plain;
    size_t n;
    uint8_t *out;
} kv_cid_job;
int kv_chunk_ids(const uint8_t key[32], const uint8_t tenant[32], const uint8_t family_id[32], const kv_cid_job *jobs,
                 int n, mu_err *err);

int kv_semantic_id(const kv_semantic *s, uint8_t out[32]);
int kv_family_id(const kv_family *f, uint8_t out[32]);
int kv_schema_id(const kv_schema *s, uint8_t out[32]);
void kv_manifest_id(const uint8_t *canonical, size_t n, uint8_t out[32]);
void kv_namespace_id(const uint8_t key[32], const void *tenant_id, size_t n, uint8_t out[32]);
typedef struct {
    uint8_t type_id[32], value_id[32];
} kv_aux;
int kv_aux_root(const uint8_t key[32], const uint8_t tenant[32], const kv_aux *aux, int n, uint8_t out[32],
                mu_err *err);
/* The prefix chain: the cut of tokens[0, n); nodes (may be NULL) receives
 * the id after each block of 256 (ceil(n / 256) entries). */
int kv_input_cut(const uint8_t prefix_key[32], const uint8_t tenant[32], const kv_semantic *model,
                 const kv_family *family, const kv_aux *aux, int n_aux, const uint32_t *tokens, size_t n,
                 kv_cut *out, uint8_t (*nodes)[32], mu_err *err);
int kv_chunk_id(const uint8_t key[32], const uint8_t tenant[32], const uint8_t family_id[32], const kv_key *state,
                const kv_span *span, const uint8_t *plain, size_t n, uint8_t out[32], mu_err *err);

/* ---- codec frames, chunks, packs (kvobj.c) ---------------------------- */
/* ChaCha20-Poly1305 (RFC 8439): enc seals in[0, n) into out and tag; else
 * opens, 0 only when the tag authenticates. */
int kv_aead(bool enc, const uint8_t key[32], const uint8_t nonce[12], const uint8_t *aad, size_t aad_n,
            const uint8_t *in, size_t n, uint8_t *out, uint8_t tag[16]);
int kv_frame_encode(unsigned codec, const uint8_t *plain, size_t n, kv_buf *out, mu_err *err);
/* Decodes a frame whose plaintext must be exactly want bytes into out
 * (capacity want); rejects non-canonical packetizations. */
int kv_frame_decode(unsigned codec, const uint8_t *p, size_t n, size_t want, uint8_t *out, mu_err *err);

typedef struct {
    uint8_t chunk_id[32], object_key[32], digest[32];
    uint32_t plain_bytes;
    kv_buf data; /* the complete aligned object */
} kv_chunk;
/* salt/nonce: NULL draws random ones when encrypt (tests pass fixed ones). */
int kv_chunk_encode(const uint8_t *plain, size_t n, const uint8_t tenant[32], const kv_family *family,
                    const kv_key *state, const kv_span *span, uint64_t epoch, bool encrypt, const kv_keys *keys,
                    const uint8_t *salt, const uint8_t *nonce, kv_chunk *out, mu_err *err);
/* Verifies an object against its authenticated reference and decodes its
 * plaintext (span->plain_bytes bytes) into out. */
int kv_chunk_decode(const uint8_t *p, size_t n, const kv_ref *ref, const kv_span *span, const uint8_t tenant[32],
                    const kv_family *family, const kv_key *state, const kv_keys *keys, uint8_t *out, mu_err *err);
/* kv_chunk_encode into *obj (reused across calls: its capacity grows, its
 * bytes are the object, obj->n its length; out->data is left empty). plain
 * may already lie where the raw codec puts it, obj->p + KV_ALIGN +
 * KV_FRAME_HDR (then obj must hold the largest object of n bytes:
 * kv_chunk_bound). fam: the family's id when the caller has it, else NULL. */
int kv_chunk_encode_to(const uint8_t *plain, size_t n, const uint8_t tenant[32], const kv_family *family,
                       const kv_key *state, const kv_span *span, uint64_t epoch, bool encrypt, const kv_keys *keys,
                       const uint8_t *salt, const uint8_t *nonce, const uint8_t fam[32], kv_buf *obj, kv_chunk *out,
                       mu_err *err);
/* kv_chunk_encode_to of many objects (random salts and nonces), each
 * step's hashes through kv_sha256_jobs; fam: the family's id. The same
 * bytes as one at a time. */
typedef struct {
    const uint8_t *plain;
    size_t n;
    const kv_key *state;
    const kv_span *span;
    kv_buf *obj;
    kv_chunk *out;
} kv_enc_item;
int kv_chunk_encode_many(const kv_enc_item *it, int n_items, const uint8_t tenant[32], const kv_family *family,
                         uint64_t epoch, bool encrypt, const kv_keys *keys, const uint8_t fam[32], mu_err *err);
static inline size_t kv_chunk_bound(size_t n) { return KV_ALIGN + KV_FRAME_HDR + n + (n + 127) / 128 + 16 + KV_ALIGN; }
/* kv_chunk_decode without copies: the same checks in the same order, the
 * object decrypted in place (p is modified), *plain pointing at the
 * plaintext: inside p for the raw codec, else out (span->plain_bytes). */
int kv_chunk_open(uint8_t *p, size_t n, const kv_ref *ref, const kv_span *span, const uint8_t tenant[32],
                  const kv_family *family, const kv_key *state, const kv_keys *keys, const uint8_t fam[32],
                  uint8_t *out, const uint8_t **plain, mu_err *err);

/* kv_chunk_open of many objects, each step's hashes through
 * kv_sha256_jobs, with the verdict kv_chunk_open gives item after item;
 * fam: the family's id. */
typedef struct {
    uint8_t *p;
    size_t n;
    const kv_ref *ref;
    const kv_span *span;
    const kv_key *state;
    uint8_t *out;
    const uint8_t *plain; /* set */
} kv_dec_item;
int kv_chunk_open_many(kv_dec_item *it, int n, const uint8_t tenant[32], const kv_family *family, const kv_keys *keys,
                       const uint8_t fam[32], mu_err *err);
/* Objects verified before (kvobj.c): kv_chunk_open_many skips the header
 * digest, the object key and the content id of an object whose digest,
 * reference and context passed every check before in this process, or
 * that kv_chunk_encode_many made; every comparison, the AEAD and the codec
 * still run, so the verdict is the one a full check gives. */
void kv_memo_set(bool on); /* on or off (tests), and forget everything */
void kv_memo_clear(void);
uint64_t kv_memo_hits(void); /* objects opened through the memo since the process started */

int kv_pack_encode(const kv_manifest *m, const kv_keys *keys, bool encrypt, const uint8_t *salt,
                   const uint8_t *nonce, kv_buf *out, uint8_t id[32], mu_err *err);
/* The full decode order of PACK_V1.md; the manifest lives in mem. */
int kv_pack_decode(const uint8_t *p, size_t n, const kv_keys *keys, kv_mem *mem, kv_manifest *out, mu_err *err);
/* Header fields without a key (framing checks and the header digest only). */
typedef struct {
    uint8_t tenant[32], manifest_id[32];
    uint64_t epoch, stored_bytes, plain_bytes;
    bool encrypted;
} kv_pack_header;
int kv_pack_header_read(const uint8_t *p, size_t n, kv_pack_header *out, mu_err *err);

/* ---- the store (kvengine.c) ------------------------------------------ */
/* The token sidecar tokens.kvtok (docs/kvpack.md "The token sidecar"):
 * seal n ids (and n_tail more after them) for a pack whose cut has token_root; open checks the head,
 * the count against the pack's token_count, and the tag; *out malloc'ed. */
int kv_tok_seal(const uint8_t root[32], const uint8_t token_root[32], const int32_t *tokens, int n,
                const int32_t *tail, int n_tail, kv_buf *out, mu_err *err);
/* *out holds the token_count ids and then *n_tail (may be NULL) more. */
int kv_tok_open(const uint8_t root[32], const uint8_t token_root[32], uint64_t token_count, const uint8_t *p,
                size_t len, int32_t **out, int *n_tail, mu_err *err);
struct mu_kv_ident;
struct mu_session;
/* The pack at dir, for engine id and a session like s, holds a prefix of
 * tokens[0, n): *n_pack its length (0: it holds something else). A status
 * when the pack cannot be read, does not authenticate, or belongs to
 * another identity. */
int kv_pack_prefix_of(const char *dir, const uint8_t root[32], const struct mu_kv_ident *id,
                      const struct mu_session *s, const int32_t *tokens, int n, int *n_pack, mu_err *err);

#endif
