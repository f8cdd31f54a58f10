/* muser_lane.h: the prefill lane (docs/lane.md): a producer node prefills
 * a prompt and streams its KV rows over mutual TLS 1.3; the decoding node
 * verifies the sealed handoff, installs it into a slot atomically and
 * computes the rest of the prompt itself. Also the local CA, enrollment
 * and the node registry under the muser home.
 * Implemented in src/gen/lane*.c (with src/net for the wire, TLS and the
 * replay ledger). */
#ifndef MUSER_LANE_H
#define MUSER_LANE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "muser.h"
#include "muser_gen.h"
#include "muser_kv.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- certificates ------------------------------------------------------- */
/* <muser home>/tls (created 0700) into out. */
int mu_tls_dir(char *out, size_t cap, mu_err *err);
/* A local CA in dir (ca.pem, ca.key); never overwrites (MU_E_STATE). */
int mu_tls_init(const char *dir, mu_err *err);
/* dir/NAME.pem and dir/NAME.key signed by dir's CA, subjectAltName san (an
 * IP address or a DNS name); never overwrites (MU_E_STATE). */
int mu_tls_issue(const char *dir, const char *name, const char *san, mu_err *err);
/* The SHA-256 fingerprint of a PEM certificate as 64 hex digits. */
int mu_tls_fingerprint(const char *cert_pem, char out[65], mu_err *err);

/* ---- the producer ----------------------------------------------------------- */
typedef struct mu_producer mu_producer;
/* What one finished handoff cost (mu_producer_opts.on_handoff). */
typedef struct {
    int n_ship;           /* the handoff's positions: [n_have, n_ship) were shipped */
    int n_have;           /* a delta: the decoder held [0, n_have) (0: a full handoff) */
    uint64_t bytes;       /* frame bytes written */
    double compute_s;     /* the forwards and row reads */
    double send_s;        /* the sender thread writing frames */
    double exposed_s;     /* of send_s, the time no step was computing (the last step's frames, the
                             SEAL, and writes the worker waited for): send_s - exposed_s was hidden */
    bool ok;
} mu_handoff_report;
typedef struct {
    const char *host;       /* default 127.0.0.1 */
    int port;               /* 0: any free port */
    const char *model_path; /* for the identity's weights digest */
    int n_workers;          /* handoffs computed at once (sessions); 0: 1 */
    int queue_max;          /* accepted connections waiting for a worker; 0: 4; more get "busy" */
    int max_ctx;            /* largest session context a decoder may ask for; 0: the model's */
    bool enroll;            /* open one enrollment (mu_producer_token) */
    int enroll_ttl_s;       /* the token's lifetime; 0: 600 */
    int timeout_ms;         /* every read and write; 0: 30000 */
    /* called on a worker thread after each handoff (NULL: none) */
    void (*on_handoff)(void *user, const mu_handoff_report *r);
    void *on_handoff_user;
} mu_producer_opts;
/* Binds, loads or creates the producer's certificate (<home>/tls/producer.*)
 * and its enrolled decoders (<home>/lane/peers), starts serving. The
 * engine must outlive the producer. */
int mu_producer_start(mu_engine *e, const mu_producer_opts *o, mu_producer **out, mu_err *err);
int mu_producer_port(const mu_producer *p);
/* The one-time enrollment token ("muser-enroll-token: " is the caller's),
 * or NULL without --enroll. */
const char *mu_producer_token(const mu_producer *p);
/* The kernel class the producer's rows carry ("x86-exact", "cuda", ...). */
const char *mu_producer_kclass(const mu_producer *p);
typedef struct {
    uint64_t n_handoffs, n_failed, n_busy, n_bytes;
    int n_queued, n_running;
} mu_producer_stats;
void mu_producer_get_stats(mu_producer *p, mu_producer_stats *st);
/* Stops accepting, ends the workers, frees p. NULL is fine. */
void mu_producer_stop(mu_producer *p);

/* ---- the decoder's lane -------------------------------------------------------- */
typedef enum { MU_PREFILL_LOCAL = 0, MU_PREFILL_AUTO, MU_PREFILL_REMOTE } mu_prefill_mode;
/* "local", "auto", "remote"; -1 for another name. */
int mu_prefill_parse(const char *name);

typedef struct mu_lane mu_lane;
typedef struct {
    mu_prefill_mode mode;
    const char *node;       /* registry name; NULL: the only node registered */
    int step;               /* the scheduler's prefill chunk (0: 512): the producer's forward size */
    int n_ctx;              /* the slots' context (the ring size is part of the identity) */
    int breaker_failures;   /* auto: this many failures in a row open the breaker; 0: 3 */
    int breaker_s;          /* auto: for this long; 0: 30 */
    int timeout_ms;         /* connect, every read and write; 0: 30000 (the producer pings every 5 s
                               while it computes) */
    int deadline_s;         /* a whole handoff; 0: 3600 */
    mu_kv_cache *cache;     /* the server's prefix cache (NULL: none): a request with keep_prefix whose
                               prompt's prefix of whole steps it holds gets a delta handoff (the node
                               ships only the rest); must outlive the lane */
    mu_sched *sched;        /* the scheduler the requests go to (NULL: none): a request with keep_prefix
                               whose prompt's prefix a free slot holds (chat turns, a conversation's next
                               request) gets a delta handoff on that slot (mu_sched_slot_hold); must
                               outlive the lane */
} mu_lane_opts;
/* Loads the node from the registry, this end's certificate and the replay
 * ledger. With mode LOCAL it does nothing and *out is NULL. */
int mu_lane_new(mu_engine *e, const char *model_path, const mu_lane_opts *o, mu_lane **out, mu_err *err);
void mu_lane_free(mu_lane *l);
/* Before submitting q (one choice): fetches the KV of the prompt's whole
 * steps before its last token (another kernel class: all tokens but the
 * last) from the node, verifies all of it, and sets q->install /
 * install_user / install_free / n_installed / install_class /
 * install_step (and clears keep_prefix) so the slot installs it
 * atomically. With keep_prefix, a prefix a free slot of o.sched holds is
 * not shipped (a delta on that slot, reserved for q: slot_ticket,
 * install_keep), else one o.cache holds (the install restores it from the
 * cache). Returns 0 with q unchanged when the
 * prompt is local (shorter than a step, mode auto after a failure or with
 * the breaker open: *remote false); MU_E_IO/MU_E_STATE in mode remote when
 * the node fails, the message saying why. Thread-safe. */
int mu_lane_prepare(mu_lane *l, mu_gen_req *q, bool *remote, mu_err *err);
typedef struct {
    uint64_t n_remote, n_failed, n_fallback, n_skipped_open, n_local_short, n_bytes;
    uint64_t n_cross_class;          /* of n_remote, rows of another kernel class (node_class) */
    uint64_t n_delta, n_delta_held;  /* of n_remote, delta handoffs, and the positions they did not ship */
    uint64_t n_delta_slot;           /* of n_delta, deltas on a live slot (the others: from the prefix cache) */
    uint64_t n_local_cached;         /* prompts left to the reuse ladder: the cache held all but < a step */
    char node_class[32], own_class[32]; /* the node's kernel class as enrolled, this engine's */
    int breaker_failures, breaker_s; /* the breaker's settings */
    int fails_in_row;
    bool open;                       /* the breaker is open now */
    double open_left_s;
    char last_error[256];
} mu_lane_stats;
void mu_lane_get_stats(mu_lane *l, mu_lane_stats *st);
/* Prometheus lines for /metrics (muser:lane_*); returns the length. */
int mu_lane_metrics(mu_lane *l, char *buf, size_t cap);

/* ---- enrollment and the registry ------------------------------------------------ */
/* Enrolls the producer at addr (HOST:PORT) with its token: pins both
 * certificates, derives the node's key, checks the model identity against
 * e, then qualifies it (three handoffs of a generated prompt of
 * qualify_tokens tokens, 0: 2048, each compared with local prefill bit for
 * bit) and saves <home>/lane/nodes/NAME.json. *report (malloc'ed JSON)
 * describes the qualification. */
int mu_node_add(mu_engine *e, const char *model_path, const char *name, const char *addr, const char *token,
                int qualify_tokens, char **report, mu_err *err);
int mu_node_qualify(mu_engine *e, const char *model_path, const char *name, int qualify_tokens, char **report,
                    mu_err *err);
int mu_node_remove(const char *name, mu_err *err);
/* Every registered node as JSON (malloc'ed): the registry's fields and,
 * with probe, a live probe's answer, reported separately. */
int mu_node_status(bool probe, char **json, mu_err *err);

#ifdef __cplusplus
}
#endif
#endif
