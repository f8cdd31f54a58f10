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
/* One digest of everything a pack's identity binds for a session of n_ctx
 * positions (the semantic digests, the cache layout with its ring size,
 * the kernel class): equal digests, interchangeable KV rows. The prefill
 * lane compares it before any KV moves. *kclass (may be NULL) gets the
 * kernel class's name ("x86-exact", "cuda", ...); it lives as long as id. */
void mu_kv_ident_digest(const mu_kv_ident *id, int n_ctx, uint8_t out[32], const char **kclass);

enum { MU_KV_CODEC_RAW = 1, MU_KV_CODEC_LOSSLESS = 2 };
typedef struct {
    int codec;    /* MU_KV_CODEC_RAW (0 means raw) or MU_KV_CODEC_LOSSLESS */
    bool plain;   /* chunks and manifest unencrypted (still authenticated) */
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

#ifdef __cplusplus
}
#endif
#endif
