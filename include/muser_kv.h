/* muser_kv.h: KV packs: a session's exact KV state saved as a kvpack v1
 * pack directory (docs/kvpack.md), verified and restored into a fresh
 * session of the same model, engine and cache layout.
 *
 * A pack directory holds manifest.kvpk (the PACK_V1 envelope) and one file
 * per chunk object, <object key in hex>.kvchk. It is published atomically:
 * a reader sees the previous complete pack or the new one, never a part.
 * Everything is authenticated with keys derived from a 32-byte root key
 * (mu_kv_root_key); a pack whose identity differs from the restoring
 * session's in any field is refused, never restored. */
#ifndef MUSER_KV_H
#define MUSER_KV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "muser.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The muser home: $MUSER_HOME, else $HOME/.muser (created 0700 when
 * create). */
int mu_kv_home(char *out, size_t cap, bool create, mu_err *err);

/* The root key: the 32 raw bytes of key_file, or (key_file NULL) of
 * <home>/kvpack.key, created with 32 random bytes, mode 0600, on first use.
 * A key file that is not exactly 32 bytes or that group or others may read
 * is refused. */
int mu_kv_root_key(const char *key_file, uint8_t key[32], mu_err *err);
void mu_kv_key_wipe(uint8_t key[32]);

/* What a pack binds of a model and an engine: the weights (SHA-256 of the
 * GGUF file, cached per file in <home>/kvpack/weights.digests keyed by
 * path, device, inode, size and mtime), tokenizer and template, position
 * semantics, kernel class and chunking. model_path may be NULL (no cache).
 * The engine must outlive the identity. */
typedef struct mu_kv_ident mu_kv_ident;
int mu_kv_ident_new(const mu_engine *e, const char *model_path, mu_kv_ident **out, mu_err *err);
void mu_kv_ident_free(mu_kv_ident *id);
/* Binds a vision projector into the identity (the engine's rows of an image
 * prompt depend on it): its file's SHA-256 and the image preprocessing
 * version (MU_IMAGE_PP_VERSION) replace the "no adapters" digest, so packs
 * made with another projector, or none, do not restore. */
void mu_kv_ident_set_mmproj(mu_kv_ident *id, const mu_mmproj *p);
/* One digest of everything a pack's identity binds for a session of n_ctx
 * positions but the kernel class: the semantic digests, the chunk size,
 * the rows' dtype and attention flavour, the cache layout with its ring
 * size. *kclass (may be NULL) gets the kernel class's name ("x86-exact",
 * "cuda", ...); it lives as long as id. Equal digests and equal classes:
 * rows interchangeable bit for bit; equal digests, other classes: rows of
 * the same computation by other numerics (the prefill lane accepts them
 * from a node qualified under the tie-aware rule, docs/lane.md). */
void mu_kv_ident_digest(const mu_kv_ident *id, int n_ctx, uint8_t out[32], const char **kclass);

enum { MU_KV_CODEC_RAW = 1, MU_KV_CODEC_LOSSLESS = 2 };
typedef struct {
    int codec;    /* MU_KV_CODEC_RAW (0 means raw) or MU_KV_CODEC_LOSSLESS */
    bool plain;   /* chunks and manifest unencrypted (still authenticated) */
    bool full_ring; /* sliding layers: every row the session's ring holds (up to its size), not
                       just the window, so a restored session can be cut back as far as the
                       saved one could (slot saves, chat /save) */
    bool with_tokens; /* also tokens.kvtok: the token ids, always encrypted, bound to the
                         manifest's input cut, so that a restore knows them (slot saves,
                         chat /save); without it a pack holds only the ids' HMAC chain */
    bool chain;       /* a pack a later save can extend with a delta: every layer's rows from position
                         0 (sliding layers too: only while their ring still holds position 0), or a
                         delta on `parent` */
    const char *parent; /* with chain: the pack this session grew from (may be dir itself, replaced
                           atomically); when it fits (the chainable layout, this identity, a strict
                           prefix of the tokens, depth < 7, the rows after it still in the rings) the
                           pack holds only the positions after the parent's and carries the parent's
                           files as hard links; otherwise a whole pack. NULL: a whole pack */
    const int32_t *tail; /* with_tokens: n_tail more ids after the positions, kept in the sidecar
                            (sampled, not evaluated: a server session's last token); NULL: none */
    int n_tail;
} mu_kv_save_opts;

/* Writes session s (which holds exactly the n tokens' positions) to dir,
 * replacing a pack already there atomically. */
int mu_kv_pack_save(const mu_session *s, const mu_kv_ident *id, const int32_t *tokens, int n, const uint8_t key[32],
                    const mu_kv_save_opts *o, const char *dir, mu_err *err);

/* Authenticates and decodes the manifest and every chunk. With id, also
 * the identity against that engine and a session of n_ctx positions
 * (0: the default of mu_kv_default_ctx). */
int mu_kv_pack_verify(const char *dir, const uint8_t key[32], const mu_kv_ident *id, int n_ctx, mu_err *err);

/* Restores the pack into s, which must hold no positions: verifies the
 * identity and every chunk, installs the rows, then commits. On any failure
 * s is reset (holds nothing). *n_restored: the positions now present. */
int mu_kv_pack_restore(mu_session *s, const mu_kv_ident *id, const char *dir, const uint8_t key[32],
                       int *n_restored, mu_err *err);
/* The same; *swa_lo (may be NULL): the first position whose rows every
 * sliding layer now holds (0 when they hold all). */
int mu_kv_pack_restore_ex(mu_session *s, const mu_kv_ident *id, const char *dir, const uint8_t key[32],
                          int *n_restored, int *swa_lo, mu_err *err);

/* Restores and verifications compute every chunk object's digest, but skip
 * the checks its bytes decide (header digest, object key, content id) for
 * an object with the same digest and context that passed them before in
 * this process or that this process wrote: the same verdicts, about half
 * the hashing on a pack opened again. This forgets all of them (the next
 * open checks every object in full: benchmarks of a first restore);
 * MUSER_KV_MEMO=0 in the environment turns the memo off. */
void mu_kv_pack_forget_verified(void);

/* The token ids of a pack saved with_tokens (malloc'ed, *n of them):
 * decrypted, then checked against the manifest's input cut (a sidecar of
 * another pack or another key is refused). MU_E_UNSUPPORTED without one. */
int mu_kv_pack_tokens(const char *dir, const uint8_t key[32], int32_t **tokens, int *n, mu_err *err);

/* The same with the tail: *n ids in all, of which the first *n_pos are the
 * pack's positions and the rest its mu_kv_save_opts.tail. */
int mu_kv_pack_tokens_ex(const char *dir, const uint8_t key[32], int32_t **tokens, int *n, int *n_pos, mu_err *err);

/* The bytes of a pack directory's files (manifest, chunks, sidecar). */
int mu_kv_pack_bytes(const char *dir, uint64_t *bytes, mu_err *err);

/* A description of the pack as one JSON object (malloc'ed): always the
 * envelope header; with a key that authenticates it, the manifest's
 * identities, cut and states too. */
int mu_kv_pack_inspect(const char *dir, const uint8_t *key, char **json, mu_err *err);

/* The kvpack verdict category of a failed call (e.g. "authentication"),
 * "identity" for a pack of another model or engine, NULL otherwise. */
const char *mu_kv_verdict(const mu_err *err);

/* The session context the CLI uses with packs when none is given: the
 * model's context length, at most 8192. The sliding layers' ring size
 * depends on it, and the ring is part of a pack's identity. */
int mu_kv_default_ctx(const mu_model *m);


/* ---- the pack store: a directory of pack directories ---------------------- */

/* <muser home>/packs (created 0700 when create). */
int mu_kv_store_default(char *out, size_t cap, bool create, mu_err *err);

typedef struct {
    char name[256];
    uint64_t bytes;     /* its files */
    int64_t mtime;      /* unix seconds: its save, or its last use by a server's store lookup */
    int64_t tokens;     /* positions; -1 when the manifest does not authenticate with the key given */
    bool has_tokens;    /* a token sidecar (tokens.kvtok) */
} mu_kv_store_entry;
/* The packs of dir (subdirectories holding manifest.kvpk; hidden names are
 * partials or removals in progress), by name; *out malloc'ed. key may be
 * NULL (tokens -1). */
int mu_kv_store_list(const char *dir, const uint8_t *key, mu_kv_store_entry **out, int *n, mu_err *err);

typedef struct {
    int n_packs, n_removed, n_partials;  /* packs before, packs removed, dead writers' partials removed */
    uint64_t bytes, bytes_removed;       /* the packs' bytes before, and removed */
} mu_kv_gc_report;
/* Removes the partial directories of writers that are gone, then the least
 * recently used packs (oldest mtime first) until the packs take at most
 * max_bytes (UINT64_MAX: no budget). A pack is renamed to a hidden name
 * before its files go, so a reader opens a whole pack or none (a restore in
 * progress fails cleanly and its server counts a miss). dry_run: report
 * only. */
int mu_kv_store_gc(const char *dir, uint64_t max_bytes, bool dry_run, mu_kv_gc_report *rep, mu_err *err);
/* The same, never removing the pack named keep (may be NULL: the one just
 * written); a pack another gc removed first is skipped (a server's
 * budget and `muser pack gc` may run at once). */
int mu_kv_store_gc_keep(const char *dir, uint64_t max_bytes, const char *keep, bool dry_run, mu_kv_gc_report *rep,
                        mu_err *err);

/* Removes the pack directory dir (a rename out of sight, then its files):
 * a reader opens the whole pack or none. A dir that is not there is fine. */
int mu_kv_pack_remove(const char *dir, mu_err *err);

/* ---- the resident prefix cache (kvcache.c) ------------------------------ */
/*
 * A token radix tree of KV checkpoints shared by the sessions of one engine
 * (the server's slots): each node is one block of `block` tokens and holds
 * the F16 K and V rows of its positions for every layer (a sliding layer's
 * rows only while the capturing session's ring still held them). A prefix
 * of k blocks restores from the k nodes of its path: a full layer takes every
 * node's rows, a sliding layer the rows of its window. Nodes are added as a
 * session completes blocks (mu_kv_cache_capture) and only below nodes whose
 * rows that session holds (its lineage), so the rows of a path always come
 * from one live session: restoring a prefix and continuing equals continuing
 * that session bit for bit. Resident rows stay under a byte budget, evicting
 * the least recently used leaf that is not pinned. Behind the tree, the pack
 * store (a directory of pack directories) is searched for a pack that holds
 * a prefix of the prompt (its identity and input cut checked).
 * One engine thread calls restore and capture; pin and stats may come from
 * any thread.
 */
typedef struct mu_kv_cache mu_kv_cache;

#define MU_KV_CACHE_DEFAULT_BYTES ((size_t)1 << 30)
#define MU_KV_CACHE_DEFAULT_BLOCK 512 /* the scheduler's prefill chunk: a restore ends where a lone cold prefill splits */

typedef struct {
    size_t max_bytes;        /* resident rows at most; 0: MU_KV_CACHE_DEFAULT_BYTES */
    int block;               /* tokens per checkpoint, 1..4096; 0: MU_KV_CACHE_DEFAULT_BLOCK */
    const char *pack_dir;    /* the pack store searched after the tree (copied); NULL: none */
    const uint8_t *key;      /* the root key of the store's packs (copied); with pack_dir */
    const mu_kv_ident *id;   /* the engine's identity; with pack_dir (must outlive the cache) */
    /* where the cache says what went wrong with the store (a corrupt pack is
     * a miss and one line here); NULL: silent. Called on the engine thread. */
    void (*log)(void *user, const char *line);
    void *log_user;
} mu_kv_cache_opts;

int mu_kv_cache_new(const mu_engine *e, const mu_kv_cache_opts *o, mu_kv_cache **out, mu_err *err);
void mu_kv_cache_free(mu_kv_cache *c);

/* Where a job's reused prompt positions came from (the reuse ladder). */
typedef enum {
    MU_KV_SRC_NONE = 0, /* nothing reused: prefill */
    MU_KV_SRC_SLOT,     /* the slot's live session (the previous job's tokens) */
    MU_KV_SRC_CACHE,    /* the resident prefix cache */
    MU_KV_SRC_PACK,     /* a pack of the store */
    MU_KV_SRC_COUNT
} mu_kv_src;
const char *mu_kv_src_name(int src); /* "none", "slot", "cache", "pack" */

/* Which tree nodes the rows of one session came from; one per session
 * (engine thread). n_ctx: the session's context. */
typedef struct mu_kv_lineage mu_kv_lineage;
int mu_kv_lineage_new(const mu_kv_cache *c, int n_ctx, mu_kv_lineage **out, mu_err *err);
void mu_kv_lineage_free(mu_kv_lineage *l);
/* The session now holds only its first n positions (0 after a reset or
 * after rows came from anywhere but this cache). NULL is fine. */
void mu_kv_lineage_cut(mu_kv_lineage *l, int n);
/* The session's positions were installed from elsewhere (a pack, another
 * session's state): none is a node's, and its sliding layers hold rows of
 * positions swa_lo.. only. */
void mu_kv_lineage_foreign(mu_kv_lineage *l, int swa_lo);
/* The first position whose sliding-layer rows the session computed or
 * installed (0: all of them). */
int mu_kv_lineage_swa_lo(const mu_kv_lineage *l);

/* The reuse ladder below the live slot: the longest prefix of tokens[0,
 * n_max) longer than `have` positions that the tree, else the store, can
 * install. Found: s is reset, the rows installed and committed; returns
 * the positions now held and sets *src. Nothing longer: returns 0 and s is
 * untouched. A store pack that fails to restore is a miss (logged), s
 * reset, and the call returns 0 with *src MU_KV_SRC_NONE; the caller must
 * then treat s as empty (mu_session_n_past tells). */
int mu_kv_cache_restore(mu_kv_cache *c, mu_session *s, mu_kv_lineage *l, const int32_t *tokens, int n_max, int have,
                        int *src);

/* After a forward: s holds tokens[0, n); adds the blocks it completed to
 * the tree where its lineage allows, evicting to stay in budget. */
void mu_kv_cache_capture(mu_kv_cache *c, const mu_session *s, mu_kv_lineage *l, const int32_t *tokens, int n);

/* Pins (pin true) or unpins the nodes of the longest cached path of
 * tokens[0, n); pinned nodes are never evicted. Returns the tokens the
 * path covers. */
int mu_kv_cache_pin(mu_kv_cache *c, const int32_t *tokens, int n, bool pin);

/* From any thread: pins the deepest checkpoint of tokens[0, n_max) that
 * the tree alone can restore and whose end is a multiple of align, and
 * returns its length (0: none, nothing pinned). While pinned, a restore of
 * tokens[0, that length) on the engine thread installs exactly that many
 * positions from the tree. Unpin with mu_kv_cache_pin(c, tokens, length,
 * false). The prefill lane's delta handoff asks the node only for the rest. */
int mu_kv_cache_hold(mu_kv_cache *c, const int32_t *tokens, int n_max, int align);

typedef struct {
    uint64_t bytes, max_bytes;   /* resident rows now, the budget */
    uint64_t n_nodes, n_pinned;  /* nodes now, of which pinned */
    uint64_t block;              /* tokens per node */
    uint64_t n_inserted, n_evicted;
    uint64_t n_lookups;          /* restore calls */
    uint64_t n_hits[MU_KV_SRC_COUNT];   /* restores served by the tree (CACHE) and the store (PACK) */
    uint64_t n_tokens[MU_KV_SRC_COUNT]; /* positions they installed */
    uint64_t n_store_errors;     /* store packs that failed to read or verify (misses) */
} mu_kv_cache_stats;
void mu_kv_cache_get_stats(mu_kv_cache *c, mu_kv_cache_stats *st);

#ifdef __cplusplus
}
#endif
#endif
