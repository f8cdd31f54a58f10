/* lane.h: what the prefill lane's files share inside src/gen (lane.c,
 * lane_producer.c, lane_decoder.c, lane_node.c; docs/lane.md). The API is
 * include/muser_lane.h. */
#ifndef MU_GEN_LANE_H
#define MU_GEN_LANE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "../../include/muser_kv.h"
#include "../../include/muser_lane.h"
#include "../net/conn.h"
#include "../net/lanewire.h"
#include "../net/ledger.h"

#define DEFAULT_TIMEOUT_MS 30000

/* ---- lane.c ---------------------------------------------------------------- */
double mu_lane_now_s(void); /* monotonic seconds */
/* <home>/SUB (created 0700) into out. */
int mu_lane_home_sub(char *out, size_t cap, const char *sub, mu_err *err);
/* This end's certificate <home>/tls/NAME.{pem,key}, made (with the CA when
 * there is none) on first use; fp: its fingerprint. */
int mu_lane_own_cert(const char *name, const char *san, char *cert, char *key, size_t cap, uint8_t fp[32], mu_err *err);
/* text into path (0600) by an fsynced temporary file and a rename. */
int mu_lane_write_private(const char *path, const char *text, mu_err *err);
/* The node key: HMAC-SHA-256(secret, "muser/lane/v1/node-key" 0 producer_fp decoder_fp). */
void mu_lane_derive_key(const uint8_t secret[32], const uint8_t pfp[32], const uint8_t dfp[32], uint8_t key[32]);
/* The key's id in the replay ledger (never the key). */
void mu_lane_key_id(const uint8_t key[32], uint8_t out[32]);

/* The enrollment token: "mut1." base64url(secret 32 | producer fp 32 | expiry u64 LE). */
typedef struct {
    uint8_t secret[32], fp[32];
    uint64_t expiry;
} enroll_token;
void mu_lane_token_text(const enroll_token *t, char out[160]);
int mu_lane_token_parse(const char *s, enroll_token *t, mu_err *err); /* refuses an expired one */
/* mf->n_ship and mf->n_have set: the layer table, row size and chunk count. */
void mu_lane_plan(const mu_model *m, lane_manifest *mf);

/* ---- the decoder (lane_decoder.c) ---------------------------------------------- */
typedef struct {
    char name[64], host[256];
    int port;
    uint8_t fp[32], key[32], kid[32];
    uint32_t epoch;
    char kclass[LANE_CLASS_LEN]; /* the producer's kernel class, as enrolled: the only one accepted */
} node_ref;

struct mu_lane {
    mu_engine *e;
    mu_kv_ident *kid;
    mu_lane_opts o;
    node_ref node;
    tls_ctx *tls;
    ledger *led;
    uint8_t identity[32];
    char own_class[LANE_CLASS_LEN]; /* this engine's kernel class */
    pthread_mutex_t mu;
    mu_lane_stats st;
    double open_until;
};

/* The rows of one handoff, verified, not yet in any session. */
typedef struct {
    int n_have, n_ship, n_layer;
    char kclass[LANE_CLASS_LEN]; /* the producer's kernel class */
    bool cross;                  /* not this engine's class */
    uint32_t row_bytes;
    uint32_t lo[LANE_MAX_LAYERS], count[LANE_MAX_LAYERS];
    uint8_t *rows[LANE_MAX_LAYERS]; /* [count][row] K then [count][row] V */
    uint8_t *mem;
    uint64_t wire_bytes;
    /* a delta: positions [0, n_have) come from the prefix cache, whose path
     * of tokens[0, n_have) is pinned until the shadow is freed */
    mu_kv_cache *cache;
    int32_t *tokens;
    mu_kv_lineage *lin; /* scratch: the slot's own lineage is the scheduler's */
    /* a delta on a live slot: the session already holds [0, n_have) (mu_gen_req.install_keep) */
    bool on_slot;
} shadow;

void mu_lane_shadow_free(void *user);
/* On the engine thread, into an empty session (a delta from the cache: its
 * prefix first) or one that holds the delta's prefix (on a live slot),
 * the shipped rows, then the position count. */
int mu_lane_shadow_install(void *user, mu_session *s, mu_err *err);
/* A TLS connection to the node, its certificate pinned. */
int mu_lane_connect(tls_ctx *tls, const node_ref *n, int timeout_ms, conn **c, mu_err *err);
/* An ABORT payload as the error it reports. */
int mu_lane_peer_abort(const uint8_t *p, uint32_t len, mu_err *err);
/* Asks the node for the rows of positions [n_have, n_ship) of tokens (the
 * producer replays runs, the forwards that made the decoder's [0, n_have),
 * then computes the rest in steps from n_have); *out holds them, verified. */
int mu_lane_fetch(mu_lane *l, const int32_t *tokens, int n_have, const uint32_t *runs, int n_runs, int n_ship, int n_ctx,
                  shadow **out, mu_err *err);
/* The forwards of a delta from the prefix cache: steps of step from 0. */
uint32_t *mu_lane_step_runs(int n_have, int step, int *n_runs);
/* The lane to the registered node `node`. */
int mu_lane_open(mu_engine *e, const char *model_path, const char *node, const mu_lane_opts *o, mu_lane **out,
                 mu_err *err);
/* The positions the node prefills for a prompt of n tokens of which the
 * decoder holds n_have (0: none). */
int mu_lane_ship_count(const mu_lane *l, int n, int n_have);

/* ---- the registry (lane_node.c) ---------------------------------------------------- */
int mu_lane_registry_path(const char *name, char *out, size_t cap, mu_err *err);
/* The registry entry NAME into n (and the whole document into *doc, may be NULL). */
int mu_lane_node_load(const char *name, node_ref *n, json_t **doc, mu_err *err);
int mu_lane_node_save(const char *name, json_t *doc, mu_err *err);
/* The only registered node's name (when no --node is given). */
int mu_lane_only_node(char *out, size_t cap, mu_err *err);

#endif
