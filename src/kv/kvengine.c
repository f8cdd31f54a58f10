/* kvengine.c: Muse Glimmer sessions as kvpack v1 packs (include/muser_kv.h).
 * Owns: the identity a pack binds (docs/kvpack.md "Identity"), the state
 * layout (one state per layer and role, (il, "attention.k") and
 * (il, "attention.v"), F16 rows [token][n_head_kv][head_dim]; full layers
 * "direct" over positions 0..n-1, sliding layers "TailWindow" over the last
 * min(n, n_swa) positions), export, verification and restore.
 * Does not own: the wire format (kvwire.c, kvobj.c, kvcrypt.c) or files
 * (kvstore.c).
 * Design: restore checks the identity first, then installs each layer's
 * rows chunk by chunk, as each verifies, into a session that holds no
 * positions (rows beyond n_past are not state), and commits n_past only
 * when every chunk has verified; any failure resets the session, so nothing
 * half-installed is ever visible. */
#include <dirent.h>
#include <pthread.h>
#include <stdatomic.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/rand.h>

#include "../../include/muser_kv.h"
#include "../engine/engine.h"
#include "../gguf/gguf.h"
#include "../model/model.h"
#include "../vision/image.h"
#include "kvpack.h"
#include "kvstore.h"

#define EPOCH 1
#define CHUNK_TOKENS 256 /* tokens per chunk at most; also the family's page size */
#define MAX_MANIFEST_FILE (2 * KV_ALIGN + KV_MAX_MANIFEST + 16)

static const uint8_t NAME_K[] = "attention.k", NAME_V[] = "attention.v";

struct mu_kv_ident {
    const mu_engine *e;
    kv_semantic sem;
    uint8_t math_rows[32]; /* sem.math without the kernel class (mu_kv_ident_digest) */
    char kclass[48];
};

static void sha_text(const char *domain, const char *text, uint8_t out[32]) {
    const void *parts[2] = {domain, text};
    size_t lens[2] = {strlen(domain) + 1, strlen(text)};
    kv_sha256v(parts, lens, 2, out);
}

/* The fixed tenant of local packs: the root key, not the tenant, is the
 * secret that separates users. */
static void tenant_id(uint8_t out[32]) { sha_text("muser/kvpack/v1/tenant", "local", out); }

/* ---- identity ---------------------------------------------------------- */

/* The weights: SHA-256 of the whole GGUF (metadata and tensor data), cached
 * per file in <home>/kvpack/weights.digests, one line per file:
 * "dev ino size mtime_s mtime_ns <hex> <realpath>". */
static void weights_digest(const mu_model *m, const char *path, uint8_t out[32]) {
    const mu_gguf *g = mu_model_gguf(m);
    char home[PATH_MAX - 64], cache[PATH_MAX], real[PATH_MAX], key[256];
    struct stat st;
    bool cacheable = path && realpath(path, real) && !stat(real, &st) &&
                     (uint64_t)st.st_size == (uint64_t)mu_gguf_file_bytes(g) &&
                     !mu_kv_home(home, sizeof home, true, NULL);
    size_t kl = 0;
    if (cacheable) {
        snprintf(cache, sizeof cache, "%s/kvpack", home);
        mkdir(cache, 0700);
        snprintf(cache, sizeof cache, "%s/kvpack/weights.digests", home);
        snprintf(key, sizeof key, "%llu %llu %llu %lld %ld ", (unsigned long long)st.st_dev,
                 (unsigned long long)st.st_ino, (unsigned long long)st.st_size, (long long)st.st_mtim.tv_sec,
                 (long)st.st_mtim.tv_nsec);
        kl = strlen(key);
        FILE *f = fopen(cache, "r");
        static char line[PATH_MAX + 512];
        while (f && fgets(line, sizeof line, f)) {
            line[strcspn(line, "\n")] = 0;
            if (strncmp(line, key, kl) || strlen(line) < kl + 65 || line[kl + 64] != ' ' || strcmp(line + kl + 65, real))
                continue;
            bool ok = true;
            for (int i = 0; i < 32 && ok; i++) {
                unsigned v;
                ok = sscanf(line + kl + 2 * i, "%2x", &v) == 1;
                out[i] = (uint8_t)v;
            }
            if (ok) {
                fclose(f);
                return;
            }
        }
        if (f) fclose(f);
    }
    static const char d[] = "muser/kvpack/v1/weights: SHA-256 of the GGUF file";
    const void *parts[2] = {d, mu_gguf_bytes(g)};
    size_t lens[2] = {sizeof d, mu_gguf_file_bytes(g)};
    kv_sha256v(parts, lens, 2, out);
    if (cacheable) {
        int fd = open(cache, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
        if (fd >= 0) {
            static char line[PATH_MAX + 512];
            int n = snprintf(line, sizeof line, "%s", key);
            for (int i = 0; i < 32; i++) n += snprintf(line + n, sizeof line - (size_t)n, "%02x", out[i]);
            n += snprintf(line + n, sizeof line - (size_t)n, " %s\n", real);
            if (n < (int)sizeof line) {
                ssize_t w = write(fd, line, (size_t)n); /* a failed write is a cache miss next time */
                (void)w;
            }
            close(fd);
        }
    }
}

static void put_u32(kv_sha *h, uint32_t v) {
    uint8_t b[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    kv_sha_put(h, b, 4);
}

/* Tokenizer and chat template: every token's text (with specials) and
 * attributes, the special ids, the BOS rule and the template text. */
static void tokenizer_digest(const mu_model *m, uint8_t out[32]) {
    static const char d[] = "muser/kvpack/v1/tokenizer+template";
    kv_sha *h = kv_sha_new();
    kv_sha_put(h, d, sizeof d);
    const mu_tok *t = mu_model_tokenizer(m);
    const mu_model_info *I = mu_model_get_info(m);
    if (t) {
        int nv = mu_tok_n_vocab(t);
        put_u32(h, (uint32_t)nv);
        char piece[512];
        for (int id = 0; id < nv; id++) {
            int n = mu_tok_piece(t, id, true, piece, sizeof piece);
            char *big = NULL;
            if (n < 0) {
                big = malloc((size_t)-n);
                n = big ? mu_tok_piece(t, id, true, big, (size_t)-n) : 0;
            }
            put_u32(h, (uint32_t)mu_tok_attr(t, id));
            put_u32(h, (uint32_t)(n > 0 ? n : 0));
            if (n > 0) kv_sha_put(h, big ? big : piece, (size_t)n);
            free(big);
        }
    } else {
        put_u32(h, 0xFFFFFFFFu);
    }
    put_u32(h, (uint32_t)I->bos);
    put_u32(h, (uint32_t)I->eos);
    put_u32(h, (uint32_t)I->eot);
    put_u32(h, (uint32_t)I->eom);
    put_u32(h, I->add_bos);
    const char *tmpl = mu_model_chat_template(m);
    put_u32(h, tmpl ? (uint32_t)strlen(tmpl) : 0xFFFFFFFFu);
    if (tmpl) kv_sha_put(h, tmpl, strlen(tmpl));
    kv_sha_end(h, out);
}

/* Position semantics: what gives a position its rows: geometry, which
 * layers slide, the window, RoPE on sliding layers only. */
static void position_digest(const mu_model *m, uint8_t out[32]) {
    const mu_model_info *I = mu_model_get_info(m);
    char text[512 + 8 * 1024];
    int n = snprintf(text, 512,
                     "muse-glimmer n_layer=%d n_embd=%d n_head=%d n_head_kv=%d head_dim=%d n_swa=%d "
                     "rope_base=%a rope_base_swa=%a rope=normal-adjacent-sliding-only full=nope sliding=",
                     I->n_layer, I->n_embd, I->n_head, I->n_head_kv, I->head_dim, I->n_swa, (double)I->rope_base,
                     (double)I->rope_base_swa);
    for (int il = 0; il < I->n_layer && n < (int)sizeof text - 2; il++) text[n++] = I->swa_layers[il] ? '1' : '0';
    text[n] = 0;
    sha_text("muser/kvpack/v1/position", text, out);
}

/* The kernel class whose numerics produced the rows: every x86 table
 * reproduces the reference table's rounding (HACKING.md), so they are one
 * class; NEON, CUDA and anything else are their own. */
static void kernel_class(const mu_engine *e, char *out, size_t cap) {
    const char *k = mu_engine_kern_name(e);
    if (strcmp(mu_engine_backend(e), "cpu")) { /* the GPU's rows are its own class */
        snprintf(out, cap, "%s", mu_engine_backend(e));
        return;
    }
#if defined(__x86_64__)
    if (!strcmp(k, "ref") || !strcmp(k, "avx2") || !strcmp(k, "avx512") || !strcmp(k, "amx") ||
        !strcmp(k, "amxsim")) {
        snprintf(out, cap, "x86-exact");
        return;
    }
#endif
    snprintf(out, cap, "%s", !strcmp(k, "neon") ? "neon" : k);
}

int mu_kv_ident_new(const mu_engine *e, const char *model_path, mu_kv_ident **out, mu_err *err) {
    mu_kv_ident *id = calloc(1, sizeof *id);
    if (!id) return mu_fail(err, MU_E_NOMEM, "kvpack: out of memory");
    const mu_model *m = mu_engine_model(e);
    id->e = e;
    weights_digest(m, model_path, id->sem.weights);
    sha_text("muser/kvpack/v1/adapters", "none", id->sem.adapters);
    tokenizer_digest(m, id->sem.tokenizer);
    position_digest(m, id->sem.position);
    kernel_class(e, id->kclass, sizeof id->kclass);
    char text[256];
    snprintf(text, sizeof text, "class=%s ubatch=%d kv=f16 attention=non-flash f16-softmax-weights", id->kclass,
             e->ubatch);
    sha_text("muser/kvpack/v1/math", text, id->sem.math);
    snprintf(text, sizeof text, "ubatch=%d kv=f16 attention=non-flash f16-softmax-weights", e->ubatch);
    sha_text("muser/kvpack/v1/math-rows", text, id->math_rows);
    *out = id;
    return 0;
}

void mu_kv_ident_set_mmproj(mu_kv_ident *id, const mu_mmproj *p) {
    char text[160];
    snprintf(text, sizeof text, "mmproj=%s preprocess=%d", mu_mmproj_get_info(p)->sha256, MU_IMAGE_PP_VERSION);
    sha_text("muser/kvpack/v1/adapters", text, id->sem.adapters);
}

void mu_kv_ident_free(mu_kv_ident *id) { free(id); }

int mu_kv_default_ctx(const mu_model *m) {
    int n = mu_model_get_info(m)->n_ctx_train;
    return n < 8192 ? n : 8192;
}

/* Cells of the sliding layers' ring for a session of n_ctx positions, as
 * mu_session_new sizes them (0 when no layer slides). */
static int ring_for_ctx(const mu_model *m, int n_ctx) {
    const mu_model_info *I = mu_model_get_info(m);
    bool any = false;
    for (int il = 0; il < I->n_layer; il++) any |= I->swa_layers[il];
    if (!any) return 0;
    int want = I->n_swa + MU_UBATCH + 1, ring = want < n_ctx ? want : n_ctx;
    return (ring + 255) / 256 * 256;
}

static int ring_of(const mu_session *s) {
    const mu_model_info *I = mu_model_get_info(s->e->m);
    for (int il = 0; il < I->n_layer; il++)
        if (I->swa_layers[il]) return s->rows[il];
    return 0;
}

/* ---- the family: the static layout of the states ---------------------- */

typedef struct {
    kv_fstate st[2 * 512];
    kv_family f;
} family_buf;

/* direct: every layer's state over positions 0..n-1 (sliding layers too),
 * the layout a delta chain needs (MANIFEST_V1.md: no TailWindow state in a
 * delta); else sliding layers as TailWindow states over their window. */
static int make_family(const mu_engine *e, int ring, unsigned codec, bool direct, family_buf *fb, mu_err *err) {
    const mu_model_info *I = mu_model_get_info(e->m);
    if (I->n_layer > 512) return mu_fail(err, MU_E_UNSUPPORTED, "kvpack: more than 512 layers");
    memset(fb, 0, sizeof *fb);
    for (int il = 0; il < I->n_layer; il++)
        for (int r = 0; r < 2; r++) {
            kv_fstate *s = &fb->st[2 * il + r];
            s->key = (kv_key){(uint32_t)il, 11, r ? NAME_V : NAME_K};
            s->cache_kind = KV_CACHE_ORDINARY;
            s->dtype = KV_DTYPE_F16;
            s->codec = (uint16_t)codec;
            s->codec_version = 1;
            s->layout = KV_LAYOUT_CONTIGUOUS;
            s->axis_rule = I->swa_layers[il] && !direct ? KV_AXIS_TAIL : KV_AXIS_DIRECT;
            s->token_axis = 0;
            s->rank = 3;
            s->dims[0] = 0;
            s->dims[1] = (uint64_t)I->n_head_kv;
            s->dims[2] = (uint64_t)I->head_dim;
            s->elements = (uint64_t)I->n_head_kv * (uint64_t)I->head_dim;
        }
    kv_family *f = &fb->f;
    char text[256];
    snprintf(text, sizeof text,
             "muser kv cache v1: f16 rows [pos][n_head_kv][head_dim]; full layers cell=pos; sliding layers "
             "ring of %d cells, cell=pos%%%d; chunks of %d positions",
             ring, ring ? ring : 1, MU_UBATCH);
    sha_text("muser/kvpack/v1/engine-cache-abi", text, f->abi);
    sha_text("muser/kvpack/v1/topology", "one host, one process, no tensor parallelism", f->topology);
    sha_text("muser/kvpack/v1/shard-map", "unsharded", f->shard_map);
    f->mode = KV_MODE_NATIVE;
    f->page_tokens = CHUNK_TOKENS;
    f->n_states = (uint32_t)(2 * I->n_layer);
    f->states = fb->st;
    return 0;
}

void mu_kv_ident_digest(const mu_kv_ident *id, int n_ctx, uint8_t out[32], const char **kclass) {
    const mu_model *m = mu_engine_model(id->e);
    family_buf *fb = malloc(sizeof *fb);
    MU_ASSERT(fb); /* a few tens of kilobytes */
    int rc = make_family(id->e, ring_for_ctx(m, n_ctx > 0 ? n_ctx : mu_kv_default_ctx(m)), KV_CODEC_RAW, false, fb, NULL);
    static const char d[] = "muser/lane/v2/identity";
    kv_sha *h = kv_sha_new();
    kv_sha_put(h, d, sizeof d);
    kv_sha_put(h, id->sem.weights, 32);
    kv_sha_put(h, id->sem.adapters, 32);
    kv_sha_put(h, id->sem.tokenizer, 32);
    kv_sha_put(h, id->sem.position, 32);
    kv_sha_put(h, id->math_rows, 32);
    if (!rc) kv_sha_put(h, fb->f.abi, 32);
    kv_sha_end(h, out);
    free(fb);
    if (kclass) *kclass = id->kclass;
}

static int ident_fail(mu_err *err, const char *what) {
    return mu_fail(err, MU_E_MODEL, "kvpack: identity: %s", what);
}

/* A pack is restorable here only when every identity field matches. */
static int check_ident(const kv_manifest *m, const mu_kv_ident *id, int ring, mu_err *err) {
    if (memcmp(m->model.weights, id->sem.weights, 32)) return ident_fail(err, "the pack was made from other weights (GGUF digest differs)");
    if (memcmp(m->model.adapters, id->sem.adapters, 32)) return ident_fail(err, "adapters differ");
    if (memcmp(m->model.tokenizer, id->sem.tokenizer, 32)) return ident_fail(err, "tokenizer or chat template differs");
    if (memcmp(m->model.position, id->sem.position, 32)) return ident_fail(err, "position semantics (geometry, window, RoPE) differ");
    if (memcmp(m->model.math, id->sem.math, 32))
        return ident_fail(err, "the rows were computed by another kernel class or chunk size");
    family_buf *fb = malloc(sizeof *fb);
    if (!fb) return mu_fail(err, MU_E_NOMEM, "kvpack: out of memory");
    int rc = make_family(id->e, ring, m->family.states[0].codec, false, fb, err);
    if (!rc && memcmp(m->family.abi, fb->f.abi, 32))
        rc = ident_fail(err, "engine cache ABI differs (the sliding layers' ring size depends on --ctx)");
    for (int direct = 0; !rc && direct < 2; direct++) { /* the window layout, or the chainable one */
        if (direct && (rc = make_family(id->e, ring, m->family.states[0].codec, true, fb, err))) break;
        kv_buf a = {0}, b = {0};
        kv_encode_family(&a, &m->family);
        kv_encode_family(&b, &fb->f);
        bool same = !a.oom && !b.oom && a.n == b.n && !memcmp(a.p, b.p, a.n);
        if (a.oom || b.oom) rc = mu_fail(err, MU_E_NOMEM, "kvpack: out of memory");
        kv_buf_free(&a);
        kv_buf_free(&b);
        if (same) break;
        if (!rc && direct) rc = ident_fail(err, "state layout (dtype, shapes, rules) differs");
    }
    free(fb);
    return rc;
}

static void chunk_name(const uint8_t okey[32], char out[80]) {
    for (int i = 0; i < 32; i++) snprintf(out + 2 * i, 3, "%02x", okey[i]);
    strcpy(out + 64, ".kvchk");
}

/* ---- the token sidecar (tokens.kvtok) -------------------------------------- */
/* "MUTOK1\0\0", u32 n, u32 0, nonce[12], tag[16], then n little-endian
 * int32 ids sealed with ChaCha20-Poly1305 under
 * HKDF(root, info "muser/kvpack/v1/token-sidecar\0" || tenant); the AAD is
 * the 16-byte head and the manifest's token root, binding it to its pack. */
#define TOK_HEAD 16
#define TOK_FIXED (TOK_HEAD + 12 + 16)
#define TOK_MAX_IDS (1 << 24)
static const char TOK_MAGIC[8] = "MUTOK1\0";

static void tok_key(const uint8_t root[32], uint8_t out[32]) {
    static const char label[] = "muser/kvpack/v1/token-sidecar";
    uint8_t info[sizeof label + 32], tenant[32];
    tenant_id(tenant);
    memcpy(info, label, sizeof label);
    memcpy(info + sizeof label, tenant, 32);
    kv_hkdf(root, 32, NULL, 0, info, sizeof info, out);
}

int kv_tok_seal(const uint8_t root[32], const uint8_t token_root[32], const int32_t *tokens, int n,
                const int32_t *tail, int n_tail, kv_buf *out, mu_err *err) {
    if (n < 1 || n > TOK_MAX_IDS || n_tail < 0 || n_tail > TOK_MAX_IDS - n || (n_tail && !tail))
        return mu_fail(err, MU_E_ARG, "kvpack: cannot seal %d token ids and %d more", n, n_tail);
    size_t nb = 4 * ((size_t)n + (size_t)n_tail), len = TOK_FIXED + nb;
    uint8_t *p = malloc(len), *pt = malloc(nb ? nb : 1), key[32], aad[TOK_HEAD + 32];
    if (!p || !pt) {
        free(p);
        free(pt);
        return mu_fail(err, MU_E_NOMEM, "kvpack: out of memory");
    }
    memcpy(pt, tokens, 4 * (size_t)n);
    if (n_tail) memcpy(pt + 4 * (size_t)n, tail, 4 * (size_t)n_tail);
    memcpy(p, TOK_MAGIC, 8);
    uint32_t v[2] = {(uint32_t)n, (uint32_t)n_tail};
    memcpy(p + 8, v, 8);
    uint8_t *nonce = p + TOK_HEAD, *tag = nonce + 12, *ct = tag + 16;
    MU_ASSERT(RAND_bytes(nonce, 12) == 1);
    memcpy(aad, p, TOK_HEAD);
    memcpy(aad + TOK_HEAD, token_root, 32);
    tok_key(root, key);
    int rc = kv_aead(true, key, nonce, aad, sizeof aad, pt, nb, ct, tag);
    free(pt);
    OPENSSL_cleanse(key, sizeof key);
    if (rc) {
        free(p);
        return mu_fail(err, MU_E_STATE, "kvpack: cannot seal the token ids");
    }
    out->p = p;
    out->n = out->cap = len;
    return 0;
}

int kv_tok_open(const uint8_t root[32], const uint8_t token_root[32], uint64_t token_count, const uint8_t *p,
                size_t len, int32_t **out, int *n_tail, mu_err *err) {
    uint32_t v[2] = {0, 0};
    if (len < TOK_FIXED) return kv_fail(err, KV_TRUNCATED, "tokens.kvtok: %zu bytes, shorter than its head", len);
    if (memcmp(p, TOK_MAGIC, 8)) return kv_fail(err, KV_BAD_MAGIC, "tokens.kvtok: bad magic");
    memcpy(v, p + 8, 8);
    if (v[0] == 0 || v[0] > TOK_MAX_IDS || v[1] > TOK_MAX_IDS - v[0] ||
        len != TOK_FIXED + 4 * ((size_t)v[0] + v[1]))
        return kv_fail(err, KV_BOUNDS, "tokens.kvtok: %u + %u ids in %zu bytes", v[0], v[1], len);
    if (v[0] != token_count)
        return kv_fail(err, KV_SEMANTICS, "tokens.kvtok holds %u ids, the pack %llu positions", v[0],
                       (unsigned long long)token_count);
    uint32_t nt = v[0] + v[1];
    int32_t *ids = malloc(4 * (size_t)nt);
    if (!ids) return mu_fail(err, MU_E_NOMEM, "kvpack: out of memory");
    uint8_t key[32], aad[TOK_HEAD + 32], tag[16];
    memcpy(aad, p, TOK_HEAD);
    memcpy(aad + TOK_HEAD, token_root, 32);
    memcpy(tag, p + TOK_HEAD + 12, 16);
    tok_key(root, key);
    int rc = kv_aead(false, key, p + TOK_HEAD, aad, sizeof aad, p + TOK_FIXED, 4 * (size_t)nt, (uint8_t *)ids, tag);
    OPENSSL_cleanse(key, sizeof key);
    if (rc) rc = kv_fail(err, KV_AUTH, "tokens.kvtok does not authenticate (another pack or key)");
    if (n_tail) *n_tail = (int)v[1];
    for (uint32_t i = 0; !rc && i < nt; i++)
        if (ids[i] < 0) rc = kv_fail(err, KV_SEMANTICS, "tokens.kvtok: negative token id");
    if (rc) {
        free(ids);
        return rc;
    }
    *out = ids;
    return 0;
}

/* ---- layers on threads ------------------------------------------------- */
/*
 * A pack's chunks are independent: each layer's K and V chunks are read
 * from (or written to) the session and encoded (or verified) by one of a
 * few threads, which take layers in turn. Results go to per-layer slots
 * planned before the threads start; the first error wins and the others
 * stop at their next layer. GPU sessions move rows through one device
 * stream: one thread.
 */

typedef struct {
    int (*fn)(void *plan, int il, void *scratch, mu_err *err);
    void *plan;
    int n_layer;
    atomic_int next;
    atomic_bool failed;
    pthread_mutex_t mu;
    int rc;
    mu_err err;
} layer_run;

/* A worker's buffers, grown as needed: objects (read or built in place)
 * and plaintexts, one per chunk of a batch. They go back to a pool after
 * each pack (wiped: they may hold decrypted rows), so a pack's workers
 * neither allocate nor fault their pages in again: about 2 MiB a worker
 * thread (twice that with the lossless codec) stays allocated for the
 * process's life, at most KV_MAX_THREADS of them. */
#define KV_BATCH 16 /* chunks hashed together: a layer's K and V of 8 spans */
#define KV_MAX_THREADS 16
typedef struct {
    kv_buf obj[KV_BATCH];
    uint8_t *pl[KV_BATCH];
    size_t npl[KV_BATCH];
} scratch;

static pthread_mutex_t g_pool_mu = PTHREAD_MUTEX_INITIALIZER;
static scratch *g_pool[KV_MAX_THREADS];
static int g_pool_n;

static scratch *scratch_get(void) {
    pthread_mutex_lock(&g_pool_mu);
    scratch *sc = g_pool_n ? g_pool[--g_pool_n] : NULL;
    pthread_mutex_unlock(&g_pool_mu);
    return sc ? sc : calloc(1, sizeof(scratch));
}

static void scratch_put(scratch *sc) {
    if (!sc) return;
    for (int i = 0; i < KV_BATCH; i++) {
        if (sc->pl[i]) OPENSSL_cleanse(sc->pl[i], sc->npl[i]);
        if (sc->obj[i].p) OPENSSL_cleanse(sc->obj[i].p, sc->obj[i].cap);
    }
    pthread_mutex_lock(&g_pool_mu);
    bool kept = g_pool_n < KV_MAX_THREADS;
    if (kept) g_pool[g_pool_n++] = sc;
    pthread_mutex_unlock(&g_pool_mu);
    if (kept) return;
    for (int i = 0; i < KV_BATCH; i++) {
        free(sc->pl[i]);
        kv_buf_free(&sc->obj[i]);
    }
    free(sc);
}

static void *layer_worker(void *arg) {
    layer_run *lr = arg;
    scratch *sc = scratch_get();
    for (;;) {
        int il = atomic_fetch_add(&lr->next, 1);
        if (il >= lr->n_layer || atomic_load(&lr->failed)) break;
        mu_err e = {0};
        int rc = sc ? lr->fn(lr->plan, il, sc, &e) : mu_fail(&e, MU_E_NOMEM, "kvpack: out of memory");
        if (rc) {
            pthread_mutex_lock(&lr->mu);
            if (!lr->rc) {
                lr->rc = rc;
                lr->err = e;
            }
            pthread_mutex_unlock(&lr->mu);
            atomic_store(&lr->failed, true);
            break;
        }
    }
    scratch_put(sc);
    return NULL;
}

#define KV_MAX_THREADS 16
static int run_layers(int (*fn)(void *, int, void *, mu_err *), void *plan, int n_layer, int n_threads, mu_err *err) {
    layer_run lr = {.fn = fn, .plan = plan, .n_layer = n_layer};
    atomic_init(&lr.next, 0);
    atomic_init(&lr.failed, false);
    pthread_mutex_init(&lr.mu, NULL);
    if (n_threads > n_layer) n_threads = n_layer;
    if (n_threads > KV_MAX_THREADS) n_threads = KV_MAX_THREADS;
    pthread_t th[KV_MAX_THREADS];
    int started = 0;
    for (int t = 1; t < n_threads; t++)
        if (!pthread_create(&th[started], NULL, layer_worker, &lr)) started++;
    layer_worker(&lr); /* this thread works too */
    for (int t = 0; t < started; t++) pthread_join(th[t], NULL);
    pthread_mutex_destroy(&lr.mu);
    if (lr.rc) *err = lr.err;
    return lr.rc;
}

/* Units (layers, or states) in groups of consecutive units whose chunks
 * fill a batch (at most cap; a unit of more chunks alone): a delta of a few
 * positions hashes many layers' chunks together, not one layer's two.
 * first[g] is group g's first unit, first[n_groups] = n; returns n_groups. */
static int group_units(const int *chunks, int n, int cap, int *first) {
    int g = 0, acc = 0;
    for (int u = 0; u < n; u++) {
        if (u == 0 || (acc && acc + chunks[u] > cap)) first[g++] = u, acc = 0;
        acc += chunks[u];
    }
    first[g] = n;
    return g;
}

/* Threads for a pack of session s: the engine's, at most KV_MAX_THREADS;
 * one for a GPU session. MUSER_KV_THREADS overrides (benchmarks). */
static int kv_threads(const mu_session *s) {
    if (s && s->gs) return 1;
    const char *e = getenv("MUSER_KV_THREADS");
    int n = e && *e ? atoi(e) : s ? mu_engine_n_threads(s->e) : 1;
    return n < 1 ? 1 : n > KV_MAX_THREADS ? KV_MAX_THREADS : n;
}

static bool grow(uint8_t **p, size_t *cap, size_t want) {
    if (*cap >= want) return true;
    uint8_t *q = realloc(*p, want);
    if (!q) return false;
    *p = q;
    *cap = want;
    return true;
}

typedef struct {
    const mu_session *s;
    kv_writer *w;
    const kv_keys *keys;
    const kv_manifest *m;
    const family_buf *fb;
    uint8_t tenant[32], fam[32];
    bool enc;
    int T, n;
    uint64_t bpt;
    int *lo;            /* [L] first position of each layer */
    int *first;         /* [n_groups + 1] each group's first layer (group_units) */
    kv_span **spans;    /* [L] */
    kv_ref **refs;      /* [2L] */
} save_plan;

static bool grow_buf(kv_buf *b, size_t want) {
    if (b->cap >= want) return true;
    uint8_t *q = realloc(b->p, want);
    if (!q) return false;
    b->p = q;
    b->cap = want;
    return true;
}

/* Group g's chunks, K and V of up to 8 spans at a time (of one layer or
 * of several): the rows read straight into the objects' frames (the raw
 * codec), encoded together (kv_chunk_encode_many), written. */
static int save_group(void *plan, int g, void *scr, mu_err *err) {
    save_plan *sp = plan;
    scratch *sc = scr;
    const size_t cb = (size_t)sp->T * sp->bpt, bound = kv_chunk_bound(cb);
    int il = sp->first[g], c = 0;
    while (il < sp->first[g + 1]) {
        kv_enc_item it[KV_BATCH];
        kv_chunk ch[KV_BATCH];
        int at[KV_BATCH][2]; /* (layer, chunk) of each pair */
        int np = 0;
        while (np < KV_BATCH / 2 && il < sp->first[g + 1]) {
            const int nch = (int)((sp->n - sp->lo[il] + sp->T - 1) / sp->T);
            if (c >= nch) { /* a layer without chunks */
                il++, c = 0;
                continue;
            }
            const bool raw = sp->fb->st[2 * il].codec == KV_CODEC_RAW;
            const kv_span *span = &sp->spans[il][c];
            uint8_t *rp[2];
            for (int r = 0; r < 2; r++) {
                int i = 2 * np + r; /* this pair's K and V */
                if (!grow_buf(&sc->obj[i], bound) || (!raw && !grow(&sc->pl[i], &sc->npl[i], cb)))
                    return mu_fail(err, MU_E_NOMEM, "kvpack: out of memory");
                rp[r] = raw ? sc->obj[i].p + KV_ALIGN + KV_FRAME_HDR : sc->pl[i];
                memset(&ch[i], 0, sizeof ch[i]);
                it[i] = (kv_enc_item){.plain = rp[r], .n = span->plain_bytes, .state = &sp->fb->st[2 * il + r].key,
                                      .span = span, .obj = &sc->obj[i], .out = &ch[i]};
            }
            int rc = mu_session_kv_read(sp->s, il, (int)span->token_start, (int)span->token_count,
                                        (uint16_t *)rp[0], (uint16_t *)rp[1], err);
            if (rc) return rc;
            at[np][0] = il, at[np][1] = c;
            np++;
            if (++c == nch) il++, c = 0;
        }
        if (!np) break;
        int rc = kv_chunk_encode_many(it, 2 * np, sp->tenant, &sp->m->family, EPOCH, sp->enc, sp->keys, sp->fam, err);
        if (rc) return rc;
        for (int i = 0; i < 2 * np; i++) {
            char name[80];
            chunk_name(ch[i].object_key, name);
            if ((rc = kv_writer_put(sp->w, name, sc->obj[i].p, sc->obj[i].n, err))) return rc;
            kv_ref *f = &sp->refs[2 * at[i / 2][0] + i % 2][at[i / 2][1]];
            memcpy(f->chunk_id, ch[i].chunk_id, 32);
            memcpy(f->object_key, ch[i].object_key, 32);
            memcpy(f->digest, ch[i].digest, 32);
            f->epoch = EPOCH;
            f->plain_bytes = ch[i].plain_bytes;
            f->object_bytes = (uint32_t)sc->obj[i].n;
        }
    }
    return 0;
}

/* ---- save --------------------------------------------------------------- */

/* A manifest file of dir decoded, with its manifest id (the header's,
 * which the decode checks against the content). */
static int load_manifest_file(const char *dir, const char *name, const kv_keys *keys, kv_mem *mem, kv_manifest *m,
                              uint8_t mid[32], mu_err *err) {
    uint8_t *p;
    size_t n;
    int rc = kv_read_file(dir, name, MAX_MANIFEST_FILE, &p, &n, err);
    if (rc) return rc;
    kv_pack_header h;
    rc = kv_pack_header_read(p, n, &h, err);
    if (!rc) rc = kv_pack_decode(p, n, keys, mem, m, err);
    if (!rc && mid) memcpy(mid, h.manifest_id, 32);
    free(p);
    return rc;
}

static bool cut_eq(const kv_cut *a, const kv_cut *b) {
    return a->token_count == b->token_count && !memcmp(a->token_root, b->token_root, 32) &&
           !memcmp(a->aux_root, b->aux_root, 32);
}

static bool family_eq(const kv_family *a, const kv_family *b) {
    kv_buf x = {0}, y = {0};
    kv_encode_family(&x, a);
    kv_encode_family(&y, b);
    bool same = !x.oom && !y.oom && x.n == y.n && !memcmp(x.p, y.p, x.n);
    kv_buf_free(&x);
    kv_buf_free(&y);
    return same;
}

/* The pack at pdir can be the parent of a delta holding tokens[n_p, n) of
 * session s: the chainable layout (fam), this identity, a strict prefix of
 * the tokens, a chain not at its depth limit, and rows [n_p, n) still in
 * every sliding layer's ring. False (and no error) otherwise: the save
 * writes a whole pack. */
static bool parent_fits(const char *pdir, const kv_keys *keys, kv_mem *mem, const mu_kv_ident *id, const mu_session *s,
                        const kv_family *fam, const uint8_t tenant[32], const int32_t *tokens, int n, kv_manifest *pm,
                        uint8_t pid[32]) {
    mu_err e = {0};
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/manifest.kvpk", pdir);
    if (access(path, F_OK) || load_manifest_file(pdir, "manifest.kvpk", keys, mem, pm, pid, &e)) return false;
    if (!family_eq(&pm->family, fam) || check_ident(pm, id, ring_of(s), &e)) return false;
    uint64_t np = pm->cut.token_count;
    int depth = pm->schema.kind ? pm->schema.depth : 0;
    if (np < 1 || np >= (uint64_t)n || depth + 1 > KV_MAX_DEPTH || memcmp(pm->tenant, tenant, 32)) return false;
    const int ring = ring_of(s);
    if (ring && (uint64_t)n - np > (uint64_t)ring) return false;
    kv_cut cut;
    if (kv_input_cut(keys->prefix, tenant, &pm->model, fam, NULL, 0, (const uint32_t *)tokens, (size_t)np, &cut, NULL,
                     &e))
        return false;
    return cut_eq(&cut, &pm->cut);
}

/* The files a delta carries of its parent: the parent's chunks (same
 * names), its manifest as parent-1.kvpk and its ancestors' as parent-k+1. */
static int link_parent(kv_writer *w, const char *pdir, mu_err *err) {
    DIR *d = opendir(pdir);
    if (!d) return mu_fail(err, MU_E_IO, "kvpack: cannot open %s: %s", pdir, strerror(errno));
    struct dirent *de;
    int rc = 0;
    while (!rc && (de = readdir(d))) {
        const char *nm = de->d_name;
        size_t l = strlen(nm);
        char as[32];
        if (!strcmp(nm, "manifest.kvpk")) rc = kv_writer_link(w, pdir, nm, "parent-1.kvpk", err);
        else if (l == 13 && !strncmp(nm, "parent-", 7) && nm[7] >= '1' && nm[7] < '7' && !strcmp(nm + 8, ".kvpk")) {
            snprintf(as, sizeof as, "parent-%c.kvpk", nm[7] + 1);
            rc = kv_writer_link(w, pdir, nm, as, err);
        } else if (l == 64 + 6 && !strcmp(nm + 64, ".kvchk"))
            rc = kv_writer_link(w, pdir, nm, nm, err);
    }
    closedir(d);
    return rc;
}

int mu_kv_pack_save(const mu_session *s, const mu_kv_ident *id, const int32_t *tokens, int n, const uint8_t root[32],
                    const mu_kv_save_opts *o, const char *dir, mu_err *err) {
    if (s->e != id->e) return mu_fail(err, MU_E_ARG, "kvpack: the identity belongs to another engine");
    if (n <= 0 || n != s->n_past)
        return mu_fail(err, MU_E_ARG, "kvpack: the session holds %d positions, not the %d tokens given", s->n_past, n);
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0) return mu_fail(err, MU_E_ARG, "kvpack: negative token id at %d", i);
    unsigned codec = o && o->codec == MU_KV_CODEC_LOSSLESS ? KV_CODEC_LOSSLESS : KV_CODEC_RAW;
    bool enc = !(o && o->plain);
    const mu_model_info *I = mu_model_get_info(s->e->m);
    const int L = I->n_layer, nkv = s->e->n_kv;
    const uint64_t bpt = (uint64_t)nkv * 2;
    int T = CHUNK_TOKENS;
    if ((uint64_t)T * bpt > KV_MAX_PLAIN) T = (int)(KV_MAX_PLAIN / bpt);
    if (T < 1) return mu_fail(err, MU_E_UNSUPPORTED, "kvpack: one position's row exceeds a chunk");
    kv_keys keys;
    uint8_t tenant[32];
    tenant_id(tenant);
    kv_key_schedule(root, tenant, EPOCH, &keys, err);
    family_buf *fb = malloc(sizeof *fb);
    kv_mem *mem = kv_mem_new();
    kv_writer w;
    bool writing = false;
    int rc = 0;
    if (!fb || !mem) {
        rc = mu_fail(err, MU_E_NOMEM, "kvpack: out of memory");
        goto done;
    }
    /* the layout: chainable (every layer direct) when asked and the rings
     * still hold every position, or a delta on a parent that fits */
    const int ring = ring_of(s);
    bool chain = o && o->chain, delta = false, direct = chain && (!ring || n <= ring);
    kv_manifest pm;
    uint8_t pid[32];
    if (chain) {
        if ((rc = make_family(s->e, ring, codec, true, fb, err))) goto done;
        delta = o->parent && parent_fits(o->parent, &keys, mem, id, s, &fb->f, tenant, tokens, n, &pm, pid);
        direct = direct || delta;
    }
    if (!direct && (rc = make_family(s->e, ring, codec, false, fb, err))) goto done;
    const int n_p = delta ? (int)pm.cut.token_count : 0;
    kv_manifest m = {.epoch = EPOCH, .model = id->sem, .family = fb->f};
    memcpy(m.tenant, tenant, 32);
    if ((rc = kv_input_cut(keys.prefix, tenant, &m.model, &m.family, NULL, 0, (const uint32_t *)tokens, (size_t)n,
                           &m.cut, NULL, err)))
        goto done;
    kv_rstate *rs = kv_alloc(mem, (size_t)2 * L, sizeof *rs);
    kv_pstate *ps = kv_alloc(mem, (size_t)2 * L, sizeof *ps);
    kv_key *gkeys = kv_alloc(mem, (size_t)2 * L, sizeof *gkeys);
    kv_group *grp = kv_alloc(mem, 1, sizeof *grp);
    if (!rs || !ps || !gkeys || !grp) {
        rc = mu_fail(err, MU_E_NOMEM, "kvpack: out of memory");
        goto done;
    }
    if ((rc = kv_writer_begin(&w, dir, err))) goto done;
    writing = true;
    if (delta && (rc = link_parent(&w, o->parent, err))) goto done;
    uint64_t total = 0, complete = 0;
    save_plan sp = {.s = s, .w = &w, .keys = &keys, .m = &m, .fb = fb, .enc = enc, .T = T, .bpt = bpt, .n = n,
                    .lo = kv_alloc(mem, (size_t)L, sizeof(int)), .spans = kv_alloc(mem, (size_t)L, sizeof(kv_span *)),
                    .refs = kv_alloc(mem, (size_t)2 * L, sizeof(kv_ref *))};
    memcpy(sp.tenant, tenant, 32);
    if (!sp.lo || !sp.spans || !sp.refs || kv_family_id(&m.family, sp.fam)) {
        rc = mu_fail(err, MU_E_NOMEM, "kvpack: out of memory");
        goto done;
    }
    for (int il = 0; il < L; il++) {
        int keep = o && o->full_ring ? s->rows[il] : I->n_swa; /* the window, or all the ring holds */
        bool tail = I->swa_layers[il] && !direct;
        int lo = delta ? n_p : tail && n > keep ? n - keep : 0, cnt = n - lo, nch = (cnt + T - 1) / T;
        uint64_t all = tail ? (uint64_t)cnt : (uint64_t)n; /* the state's complete token count */
        kv_span *spans = kv_alloc(mem, (size_t)nch, sizeof *spans);
        kv_ref *refs[2] = {kv_alloc(mem, (size_t)nch, sizeof(kv_ref)), kv_alloc(mem, (size_t)nch, sizeof(kv_ref))};
        if (!spans || !refs[0] || !refs[1]) {
            rc = mu_fail(err, MU_E_NOMEM, "kvpack: out of memory");
            goto done;
        }
        sp.lo[il] = lo;
        sp.spans[il] = spans;
        sp.refs[2 * il] = refs[0];
        sp.refs[2 * il + 1] = refs[1];
        for (int c = 0; c < nch; c++) {
            int t0 = lo + c * T, tc = n - t0 < T ? n - t0 : T;
            spans[c] = (kv_span){(uint64_t)t0, (uint64_t)tc, (uint64_t)t0 * bpt, (uint32_t)((uint64_t)tc * bpt)};
        }
        for (int r = 0; r < 2; r++) {
            kv_rstate *R = &rs[2 * il + r];
            R->key = fb->st[2 * il + r].key;
            R->full = R->segment = (kv_shape){3, {(uint64_t)cnt, (uint64_t)I->n_head_kv, (uint64_t)I->head_dim}};
            R->full.dims[0] = all;
            R->n_strides = 3;
            R->strides[0] = (uint64_t)nkv;
            R->strides[1] = (uint64_t)I->head_dim;
            R->strides[2] = 1;
            R->logical_start = (uint64_t)lo;
            R->logical_count = (uint64_t)cnt;
            R->phys_off = tail ? 0 : (uint64_t)lo * bpt;
            R->phys_span = (uint64_t)cnt * bpt;
            R->phys_complete = all * bpt;
            R->abs_pos = (uint64_t)n;
            R->n_spans = (uint32_t)nch;
            R->spans = spans;
            ps[2 * il + r] = (kv_pstate){R->key, (uint32_t)nch, refs[r]};
            gkeys[2 * il + r] = R->key;
            total += (uint64_t)cnt * bpt;
            complete += all * bpt;
        }
    }
    /* the chunks: groups of layers spread over threads, each writing its own files */
    int *nchs = kv_alloc(mem, (size_t)L, sizeof(int)), n_groups;
    sp.first = kv_alloc(mem, (size_t)L + 1, sizeof(int));
    if (!nchs || !sp.first) {
        rc = mu_fail(err, MU_E_NOMEM, "kvpack: out of memory");
        goto done;
    }
    for (int il = 0; il < L; il++) nchs[il] = (n - sp.lo[il] + T - 1) / T;
    n_groups = group_units(nchs, L, KV_BATCH / 2, sp.first);
    if ((rc = run_layers(save_group, &sp, n_groups, kv_threads(s), err))) goto done;
    *grp = (kv_group){1, (uint32_t)(2 * L), gkeys};
    m.schema = (kv_schema){.kind = 0, .n_states = (uint32_t)(2 * L), .states = rs, .n_groups = 1, .groups = grp,
                           .segment_bytes = total, .complete_bytes = complete};
    if (delta) {
        m.schema.kind = 1;
        m.schema.depth = (uint8_t)((pm.schema.kind ? pm.schema.depth : 0) + 1);
        memcpy(m.schema.parent, pid, 32);
        m.schema.parent_cut = pm.cut;
    }
    m.n_states = (uint32_t)(2 * L);
    m.states = ps;
    if (o && o->with_tokens) {
        kv_buf tb = {0};
        if ((rc = kv_tok_seal(root, m.cut.token_root, tokens, n, o->tail, o->n_tail, &tb, err))) goto done;
        rc = kv_writer_put(&w, "tokens.kvtok", tb.p, tb.n, err);
        kv_buf_free(&tb);
        if (rc) goto done;
    }
    kv_buf pack = {0};
    if ((rc = kv_pack_encode(&m, &keys, enc, NULL, NULL, &pack, NULL, err))) goto done;
    rc = kv_writer_put(&w, "manifest.kvpk", pack.p, pack.n, err);
    kv_buf_free(&pack);
    if (!rc) rc = kv_writer_publish(&w, err);
done:
    if (writing) kv_writer_abort(&w);
    kv_keys_wipe(&keys);
    free(fb);
    kv_mem_free(mem);
    return rc;
}

/* ---- reading ------------------------------------------------------------ */

static int load_manifest(const char *dir, const kv_keys *keys, kv_mem *mem, kv_manifest *m, mu_err *err) {
    uint8_t *p;
    size_t n;
    int rc = kv_read_file(dir, "manifest.kvpk", MAX_MANIFEST_FILE, &p, &n, err);
    if (rc) return rc;
    rc = kv_pack_decode(p, n, keys, mem, m, err);
    free(p);
    return rc;
}

typedef struct {
    int dfd;
    const kv_manifest *m;
    const kv_keys *keys;
    uint8_t fam[32];
    mu_session *s;       /* NULL: verify only */
    int *first;          /* [n_groups + 1] each group's first unit: layers (a session), else states */
} read_plan;

/* Chunks (si[i], c[i]) of the manifest read into the worker's buffers
 * and verified together (kv_chunk_open_many); the verdict is the one
 * reading and opening them one after another gives. */
static int open_chunks(read_plan *rp, scratch *sc, const uint32_t *si, const uint32_t *c, int n, kv_dec_item *it,
                       mu_err *err) {
    const kv_manifest *m = rp->m;
    for (int i = 0; i < n; i++) {
        const kv_ref *ref = &m->states[si[i]].chunks[c[i]];
        const kv_span *span = &m->schema.states[si[i]].spans[c[i]];
        char name[80];
        chunk_name(ref->object_key, name);
        size_t len = 0;
        int rc = kv_read_at(rp->dfd, name, KV_MAX_OBJECT, &sc->obj[i].p, &sc->obj[i].cap, &len, err);
        if (!rc && !grow(&sc->pl[i], &sc->npl[i], span->plain_bytes ? span->plain_bytes : 1))
            rc = mu_fail(err, MU_E_NOMEM, "kvpack: out of memory");
        if (rc) { /* the chunks before it first */
            mu_err e2 = {0};
            int r2 = i ? kv_chunk_open_many(it, i, m->tenant, &m->family, rp->keys, rp->fam, &e2) : 0;
            if (r2) *err = e2;
            return r2 ? r2 : rc;
        }
        it[i] = (kv_dec_item){.p = sc->obj[i].p, .n = len, .ref = ref, .span = span, .state = &m->states[si[i]].key,
                              .out = sc->pl[i]};
    }
    return kv_chunk_open_many(it, n, m->tenant, &m->family, rp->keys, rp->fam, err);
}

/* Group g: verify, its states' chunks; with a session, its layers' K
 * and V chunks of up to 8 spans at a time (of one layer or several),
 * verified together, then installed, positions in order. */
static int read_group(void *plan, int g, void *scr, mu_err *err) {
    read_plan *rp = plan;
    scratch *sc = scr;
    const kv_manifest *m = rp->m;
    uint32_t si[KV_BATCH], ci[KV_BATCH];
    kv_dec_item it[KV_BATCH];
    const int end = rp->first[g + 1];
    if (!rp->s) { /* verify: units are states (any layout a pack may have) */
        uint32_t st = (uint32_t)rp->first[g], c = 0;
        while ((int)st < end) {
            int n = 0;
            for (; n < KV_BATCH && (int)st < end; n++) {
                if (c >= m->states[st].n_chunks) { /* a state without chunks */
                    st++, c = 0, n--;
                    continue;
                }
                si[n] = st, ci[n] = c;
                if (++c == m->states[st].n_chunks) st++, c = 0;
            }
            int rc = n ? open_chunks(rp, sc, si, ci, n, it, err) : 0;
            if (rc) return rc;
        }
        return 0;
    }
    int il = rp->first[g];
    uint32_t c = 0;
    while (il < end) {
        /* K and V of up to 8 spans, ending at a pair that covers other positions (verified, then refused) */
        int np = 0, lay[KV_BATCH / 2];
        bool unpaired = false;
        while (np < KV_BATCH / 2 && il < end && !unpaired) {
            uint32_t sk = (uint32_t)(2 * il), sv = sk + 1;
            if (sv >= m->n_states || m->states[sk].n_chunks != m->states[sv].n_chunks) {
                if (np) break; /* the pairs before it first */
                return kv_fail(err, KV_SEMANTICS, "layer %d: K and V states do not pair", il);
            }
            if (c >= m->states[sk].n_chunks) { /* a layer without chunks */
                il++, c = 0;
                continue;
            }
            const kv_span *a = &m->schema.states[sk].spans[c], *b = &m->schema.states[sv].spans[c];
            unpaired = a->token_start != b->token_start || a->token_count != b->token_count;
            si[2 * np] = sk, si[2 * np + 1] = sv, ci[2 * np] = ci[2 * np + 1] = c;
            lay[np++] = il;
            if (++c == m->states[sk].n_chunks) il++, c = 0;
        }
        if (!np) continue;
        int rc = open_chunks(rp, sc, si, ci, 2 * np, it, err);
        if (rc) return rc;
        for (int k = 0; k < np; k++) {
            const kv_span *sp = it[2 * k].span;
            if (unpaired && k == np - 1)
                return kv_fail(err, KV_SEMANTICS, "layer %d: K and V chunks cover other positions", lay[k]);
            if ((rc = mu_session_kv_write(rp->s, lay[k], (int)sp->token_start, (int)sp->token_count,
                                          (const uint16_t *)it[2 * k].plain, (const uint16_t *)it[2 * k + 1].plain,
                                          err)))
                return rc;
        }
    }
    return 0;
}

/* Every chunk of the manifest read and verified on n_threads threads; with
 * a session, installed too (the caller commits). */
static int read_chunks(const char *dir, const kv_manifest *m, const kv_keys *keys, mu_session *s, int n_threads,
                       mu_err *err) {
    read_plan rp = {.m = m, .keys = keys, .s = s};
    if (s && m->n_states % 2) return kv_fail(err, KV_SEMANTICS, "an odd number of states: %u", m->n_states);
    if (kv_family_id(&m->family, rp.fam)) return mu_fail(err, MU_E_NOMEM, "kvpack: out of memory");
    rp.dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (rp.dfd < 0) return mu_fail(err, MU_E_IO, "kvpack: cannot open %s: %s", dir, strerror(errno));
    /* units: layers with a session (K and V chunk pairs), states without */
    const int nu = (int)(s ? m->n_states / 2 : m->n_states);
    int *cost = malloc(((size_t)nu + 1) * sizeof *cost), *first = malloc(((size_t)nu + 1) * sizeof *first);
    int rc = cost && first ? 0 : mu_fail(err, MU_E_NOMEM, "kvpack: out of memory");
    for (int u = 0; !rc && u < nu; u++) cost[u] = (int)m->states[s ? 2 * u : u].n_chunks;
    if (!rc) {
        rp.first = first;
        int ng = group_units(cost, nu, s ? KV_BATCH / 2 : KV_BATCH, first);
        rc = run_layers(read_group, &rp, ng, n_threads, err);
    }
    free(cost);
    free(first);
    close(rp.dfd);
    return rc;
}

static void schedule(const uint8_t root[32], kv_keys *keys) {
    uint8_t tenant[32];
    tenant_id(tenant);
    kv_key_schedule(root, tenant, EPOCH, keys, NULL);
}

/* A pack and its ancestors: ms[0] the pack's manifest, ms[k] the one in
 * parent-k.kvpk, down to the full base ms[*n - 1]. Each parent's manifest
 * id must be the one its child names, its cut the child's parent cut, its
 * depth one less, its family, model and tenant the child's. */
static int load_chain(const char *dir, const kv_keys *keys, kv_mem *mem, kv_manifest ms[KV_MAX_DEPTH + 1], int *n,
                      mu_err *err) {
    int rc = load_manifest(dir, keys, mem, &ms[0], err);
    if (rc) return rc;
    int d = ms[0].schema.kind ? ms[0].schema.depth : 0;
    for (int k = 1; k <= d; k++) {
        char name[32];
        uint8_t mid[32];
        snprintf(name, sizeof name, "parent-%d.kvpk", k);
        if ((rc = load_manifest_file(dir, name, keys, mem, &ms[k], mid, err))) {
            if (rc == MU_E_IO) rc = kv_fail(err, KV_GRAPH, "delta pack without its ancestor %s", name);
            return rc;
        }
        const kv_manifest *c = &ms[k - 1], *p = &ms[k];
        int pd = p->schema.kind ? p->schema.depth : 0;
        if (memcmp(mid, c->schema.parent, 32)) return kv_fail(err, KV_GRAPH, "%s is not the parent the pack names", name);
        if (!cut_eq(&p->cut, &c->schema.parent_cut)) return kv_fail(err, KV_GRAPH, "%s: parent cut mismatch", name);
        if (pd != d - k) return kv_fail(err, KV_GRAPH, "%s: delta depth %d, not %d", name, pd, d - k);
        if (memcmp(p->tenant, c->tenant, 32) || memcmp(&p->model, &c->model, sizeof p->model) ||
            !family_eq(&p->family, &c->family))
            return kv_fail(err, KV_GRAPH, "%s: another model, tenant or layout than its child", name);
    }
    *n = d + 1;
    return 0;
}

int mu_kv_pack_verify(const char *dir, const uint8_t root[32], const mu_kv_ident *id, int n_ctx, mu_err *err) {
    kv_keys keys;
    schedule(root, &keys);
    kv_mem *mem = kv_mem_new();
    if (!mem) return mu_fail(err, MU_E_NOMEM, "kvpack: out of memory");
    kv_manifest ms[KV_MAX_DEPTH + 1];
    int nm = 0;
    int rc = load_chain(dir, &keys, mem, ms, &nm, err);
    if (!rc && id) {
        const mu_model *model = mu_engine_model(id->e);
        rc = check_ident(&ms[0], id, ring_for_ctx(model, n_ctx > 0 ? n_ctx : mu_kv_default_ctx(model)), err);
    }
    for (int k = nm - 1; !rc && k >= 0; k--) rc = read_chunks(dir, &ms[k], &keys, NULL, kv_threads(NULL), err);
    kv_keys_wipe(&keys);
    kv_mem_free(mem);
    return rc;
}

int mu_kv_pack_restore(mu_session *s, const mu_kv_ident *id, const char *dir, const uint8_t root[32], int *n_restored,
                       mu_err *err) {
    return mu_kv_pack_restore_ex(s, id, dir, root, n_restored, NULL, err);
}

int mu_kv_pack_restore_ex(mu_session *s, const mu_kv_ident *id, const char *dir, const uint8_t root[32],
                          int *n_restored, int *swa_lo, mu_err *err) {
    int lo_max = 0;
    if (s->e != id->e) return mu_fail(err, MU_E_ARG, "kvpack: the identity belongs to another engine");
    if (s->n_past) return mu_fail(err, MU_E_STATE, "kvpack: restore needs an empty session (it holds %d positions)", s->n_past);
    const mu_model_info *I = mu_model_get_info(s->e->m);
    kv_keys keys;
    schedule(root, &keys);
    kv_mem *mem = kv_mem_new();
    kv_manifest ms[KV_MAX_DEPTH + 1];
    int nm = 0;
    int rc = mem ? load_chain(dir, &keys, mem, ms, &nm, err) : mu_fail(err, MU_E_NOMEM, "kvpack: out of memory");
    const kv_manifest *m = &ms[0];
    if (!rc) rc = check_ident(m, id, ring_of(s), err);
    uint64_t n = rc ? 0 : m->cut.token_count;
    if (!rc && n > (uint64_t)s->n_ctx)
        rc = mu_fail(err, MU_E_ARG, "kvpack: the pack holds %llu positions, the session's context is %d",
                     (unsigned long long)n, s->n_ctx);
    for (int il = 0; !rc && il < I->n_layer; il++) {
        const kv_rstate *R = &m->schema.states[2 * il];
        if (m->family.states[2 * il].axis_rule != KV_AXIS_TAIL) {
            /* every position from 0 (a chain: base and deltas), installed in order, so a ring keeps the last
             * of them */
            if (I->swa_layers[il] && n > (uint64_t)s->rows[il] && (int)(n - (uint64_t)s->rows[il]) > lo_max)
                lo_max = (int)(n - (uint64_t)s->rows[il]);
            continue;
        }
        /* the ring must hold the window; a full layer every position */
        uint64_t need = I->swa_layers[il] ? (n < (uint64_t)I->n_swa ? n : (uint64_t)I->n_swa) : n;
        if (I->swa_layers[il] && (int)R->logical_start > lo_max) lo_max = (int)R->logical_start;
        if (R->logical_count < need || R->logical_count > (uint64_t)s->rows[il]) {
            rc = kv_fail(err, KV_SEMANTICS, "layer %d holds %llu positions, the session needs %llu..%d", il,
                         (unsigned long long)R->logical_count, (unsigned long long)need, s->rows[il]);
            break;
        }
    }
    /* the base first, then each delta: positions in order */
    for (int k = nm - 1; !rc && k >= 0; k--) rc = read_chunks(dir, &ms[k], &keys, s, kv_threads(s), err);
    if (!rc) rc = mu_session_kv_commit(s, (int)n, err);
    if (rc) mu_session_reset(s);
    else {
        if (n_restored) *n_restored = (int)n;
        if (swa_lo) *swa_lo = lo_max;
    }
    kv_keys_wipe(&keys);
    kv_mem_free(mem);
    return rc;
}

void mu_kv_pack_forget_verified(void) { kv_memo_clear(); }

int mu_kv_pack_tokens(const char *dir, const uint8_t root[32], int32_t **tokens, int *n_out, mu_err *err) {
    int n_all = 0;
    return mu_kv_pack_tokens_ex(dir, root, tokens, &n_all, n_out, err);
}

int mu_kv_pack_tokens_ex(const char *dir, const uint8_t root[32], int32_t **tokens, int *n_all, int *n_out,
                         mu_err *err) {
    int n_tail = 0;
    uint8_t *p = NULL;
    size_t len = 0;
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/manifest.kvpk", dir);
    if (access(path, F_OK)) return mu_fail(err, MU_E_IO, "kvpack: no pack at %s", dir);
    snprintf(path, sizeof path, "%s/tokens.kvtok", dir);
    if (access(path, F_OK))
        return mu_fail(err, MU_E_UNSUPPORTED, "kvpack: the pack holds no token ids (saved without them)");
    int rc = kv_read_file(dir, "tokens.kvtok", TOK_FIXED + 4 * (size_t)TOK_MAX_IDS, &p, &len, err);
    if (rc) return rc;
    kv_keys keys;
    schedule(root, &keys);
    kv_mem *mem = kv_mem_new();
    kv_manifest m;
    int32_t *ids = NULL;
    rc = mem ? load_manifest(dir, &keys, mem, &m, err) : mu_fail(err, MU_E_NOMEM, "kvpack: out of memory");
    if (!rc) rc = kv_tok_open(root, m.cut.token_root, m.cut.token_count, p, len, &ids, &n_tail, err);
    if (!rc) { /* the ids must be the ones the pack's cut was made from */
        kv_cut cut;
        rc = kv_input_cut(keys.prefix, m.tenant, &m.model, &m.family, NULL, 0, (const uint32_t *)ids,
                          (size_t)m.cut.token_count, &cut, NULL, err);
        if (!rc && (memcmp(cut.token_root, m.cut.token_root, 32) || memcmp(cut.aux_root, m.cut.aux_root, 32)))
            rc = kv_fail(err, KV_AUTH, "tokens.kvtok: the ids are not the pack's input");
    }
    free(p);
    kv_keys_wipe(&keys);
    kv_mem_free(mem);
    if (rc) {
        free(ids);
        return rc;
    }
    *tokens = ids;
    *n_out = (int)m.cut.token_count;
    *n_all = *n_out + n_tail;
    return 0;
}

int mu_kv_pack_bytes(const char *dir, uint64_t *bytes, mu_err *err) {
    DIR *d = opendir(dir);
    if (!d) return mu_fail(err, MU_E_IO, "kvpack: cannot open %s: %s", dir, strerror(errno));
    uint64_t sum = 0;
    struct dirent *de;
    struct stat st;
    while ((de = readdir(d)))
        if (de->d_name[0] != '.' && !fstatat(dirfd(d), de->d_name, &st, 0) && S_ISREG(st.st_mode))
            sum += (uint64_t)st.st_size;
    closedir(d);
    *bytes = sum;
    return 0;
}

static int entry_cmp(const void *a, const void *b) {
    return strcmp(((const mu_kv_store_entry *)a)->name, ((const mu_kv_store_entry *)b)->name);
}

int mu_kv_store_list(const char *dir, const uint8_t *root, mu_kv_store_entry **out, int *n_out, mu_err *err) {
    DIR *d = opendir(dir);
    if (!d) return mu_fail(err, MU_E_IO, "kvpack: cannot open the pack store %s: %s", dir, strerror(errno));
    mu_kv_store_entry *v = NULL;
    int n = 0, cap = 0, rc = 0;
    struct dirent *de;
    kv_keys keys;
    if (root) schedule(root, &keys);
    while ((de = readdir(d))) {
        char path[PATH_MAX], man[PATH_MAX + 32];
        if (de->d_name[0] == '.' || strlen(de->d_name) >= sizeof v[0].name) continue;
        if (snprintf(path, sizeof path, "%s/%s", dir, de->d_name) >= (int)sizeof path) continue;
        struct stat st;
        snprintf(man, sizeof man, "%s/manifest.kvpk", path);
        if (lstat(path, &st) || !S_ISDIR(st.st_mode) || access(man, F_OK)) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            mu_kv_store_entry *nv = realloc(v, (size_t)cap * sizeof *nv);
            if (!nv) {
                rc = mu_fail(err, MU_E_NOMEM, "kvpack: out of memory");
                break;
            }
            v = nv;
        }
        mu_kv_store_entry *e = &v[n++];
        memset(e, 0, sizeof *e);
        strcpy(e->name, de->d_name);
        e->mtime = (int64_t)st.st_mtime;
        mu_kv_pack_bytes(path, &e->bytes, NULL);
        snprintf(man, sizeof man, "%s/tokens.kvtok", path);
        e->has_tokens = !access(man, F_OK);
        e->tokens = -1;
        kv_mem *mem = root ? kv_mem_new() : NULL;
        kv_manifest m;
        if (mem && !load_manifest(path, &keys, mem, &m, NULL)) e->tokens = (int64_t)m.cut.token_count;
        kv_mem_free(mem);
    }
    closedir(d);
    if (root) kv_keys_wipe(&keys);
    if (rc) {
        free(v);
        return rc;
    }
    if (n) qsort(v, (size_t)n, sizeof *v, entry_cmp);
    *out = v;
    *n_out = n;
    return 0;
}

/* ---- the store's prefix match ------------------------------------------- */

int kv_pack_prefix_of(const char *dir, const uint8_t root[32], const mu_kv_ident *id, const mu_session *s,
                      const int32_t *tokens, int n, int *n_pack, mu_err *err) {
    *n_pack = 0;
    kv_keys keys;
    schedule(root, &keys);
    kv_mem *mem = kv_mem_new();
    kv_manifest m;
    int rc = mem ? load_manifest(dir, &keys, mem, &m, err) : mu_fail(err, MU_E_NOMEM, "kvpack: out of memory");
    if (!rc) rc = check_ident(&m, id, ring_of(s), err);
    /* a pack longer than the prompt holds no prefix of it (a delta's cut covers its chain: the restore
     * verifies the ancestors) */
    if (!rc && m.cut.token_count > 0 && m.cut.token_count <= (uint64_t)n) {
        for (uint64_t i = 0; i < m.cut.token_count; i++)
            if (tokens[i] < 0) goto done;
        kv_cut cut;
        rc = kv_input_cut(keys.prefix, m.tenant, &m.model, &m.family, NULL, 0, (const uint32_t *)tokens,
                          (size_t)m.cut.token_count, &cut, NULL, err);
        if (!rc && !memcmp(cut.token_root, m.cut.token_root, 32) && !memcmp(cut.aux_root, m.cut.aux_root, 32))
            *n_pack = (int)m.cut.token_count;
    }
done:
    kv_keys_wipe(&keys);
    kv_mem_free(mem);
    return rc;
}

/* ---- inspect -------------------------------------------------------------- */

static int hex(char *o, const uint8_t *p) {
    for (int i = 0; i < 32; i++) snprintf(o + 2 * i, 3, "%02x", p[i]);
    return 64;
}

int mu_kv_pack_inspect(const char *dir, const uint8_t *root, char **json, mu_err *err) {
    uint8_t *p;
    size_t n;
    int rc = kv_read_file(dir, "manifest.kvpk", MAX_MANIFEST_FILE, &p, &n, err);
    if (rc) return rc;
    kv_pack_header h;
    if ((rc = kv_pack_header_read(p, n, &h, err))) {
        free(p);
        return rc;
    }
    size_t cap = 4096;
    char *o = malloc(cap), id[65];
    if (!o) {
        free(p);
        return mu_fail(err, MU_E_NOMEM, "kvpack: out of memory");
    }
    hex(id, h.manifest_id);
    int k = snprintf(o, cap,
                     "{\"format\": \"kvpack-v1\", \"manifest_id\": \"%s\", \"encrypted\": %s, \"key_epoch\": %llu, "
                     "\"manifest_file_bytes\": %zu",
                     id, h.encrypted ? "true" : "false", (unsigned long long)h.epoch, n);
    if (root) {
        kv_keys keys;
        schedule(root, &keys);
        kv_mem *mem = kv_mem_new();
        kv_manifest m;
        mu_err e2 = {0};
        if (mem && !kv_pack_decode(p, n, &keys, mem, &m, &e2)) {
            uint64_t chunks = 0, obj = 0;
            for (uint32_t i = 0; i < m.n_states; i++)
                for (uint32_t c = 0; c < m.states[i].n_chunks; c++) chunks++, obj += m.states[i].chunks[c].object_bytes;
            char w[65], t[65], ps[65], mt[65], root_hex[65];
            hex(w, m.model.weights);
            hex(t, m.model.tokenizer);
            hex(ps, m.model.position);
            hex(mt, m.model.math);
            hex(root_hex, m.cut.token_root);
            const char *codec = m.family.states[0].codec == KV_CODEC_LOSSLESS ? "lossless" : "raw";
            k += snprintf(o + k, cap - (size_t)k,
                          ", \"authenticated\": true, \"kind\": \"%s\", \"tokens\": %llu, \"states\": %u, "
                          "\"layers\": %u, \"codec\": \"%s\", \"chunks\": %llu, \"chunk_bytes\": %llu, "
                          "\"restored_bytes\": %llu, \"token_root\": \"%s\", \"identity\": {\"weights\": \"%s\", "
                          "\"tokenizer_template\": \"%s\", \"position\": \"%s\", \"math\": \"%s\"}",
                          m.schema.kind ? "delta" : "full", (unsigned long long)m.cut.token_count, m.n_states,
                          m.n_states / 2, codec, (unsigned long long)chunks, (unsigned long long)obj,
                          (unsigned long long)m.schema.complete_bytes, root_hex, w, t, ps, mt);
        } else {
            const char *cat = kv_category(&e2);
            k += snprintf(o + k, cap - (size_t)k, ", \"authenticated\": false, \"verdict\": \"%s\"",
                          cat ? cat : "error");
        }
        kv_mem_free(mem);
        kv_keys_wipe(&keys);
    }
    snprintf(o + k, cap - (size_t)k, "}");
    free(p);
    *json = o;
    return 0;
}

const char *mu_kv_verdict(const mu_err *err) {
    const char *c = kv_category(err);
    if (c) return c;
    if (err && !strncmp(err->msg, "kvpack: identity:", 17)) return "identity";
    return NULL;
}
