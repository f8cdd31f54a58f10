/* muser_serve.h: the public face of the HTTP server (src/http): the
 * OpenAI, llama.cpp server and Ollama APIs over one scheduler. */
#ifndef MUSER_SERVE_H
#define MUSER_SERVE_H

#include "muser_gen.h"
#include "muser_lane.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mu_server mu_server;

#define MU_SERVE_MAX_ALIASES 16

typedef struct {
    const char *host;          /* default "127.0.0.1" */
    int port;                  /* 0 = any free port */
    const char *tls_cert_pem;  /* both or neither (PEM text) */
    const char *tls_key_pem;
    const char *api_key;       /* NULL: none (only allowed on loopback) */
    const char *model_path;    /* the served file (shown by /props, /api/show) */
    /* limits (docs/api.md, "Transport"); 0 = the default */
    int max_connections;       /* open connections in all; 0: 4096, lowered to fit the open-file limit */
    int max_conns_per_ip;      /* per client address; 0: off on a loopback bind, 256 otherwise; -1: off */
    int head_timeout_s;        /* request line + headers complete, from connect or the last reply; 0: 10 */
    int body_timeout_s;        /* whole body, from the end of the head; 0: 30 */
    int idle_timeout_s;        /* no traffic while not waiting for generation; 0: 60 */
    size_t max_body_bytes;     /* 0: 8 MiB */
    int http_threads;          /* event threads serving all connections; 0: 4 */
    mu_embd_pooling pooling;   /* embeddings; MU_EMBD_OFF (0): the GGUF's muse-glimmer.pooling_type,
                                  else MU_EMBD_NONE (llama.cpp's default for this architecture) */
    const char *const *aliases; /* more model names the server answers to (--alias) */
    int n_aliases;             /* 0..MU_SERVE_MAX_ALIASES */
    bool any_model;            /* accept any model name (clients that hard-code one) */
    const char *cors_origins;  /* NULL: no CORS headers; "*" or comma-separated origins (--cors) */
    const char *backend;       /* the engine's backend ("cpu", "cuda"), shown by /snapshot; may be NULL */
    const char *kernels;       /* the CPU kernel table, shown by /snapshot; may be NULL */
    /* remote prefill (include/muser_lane.h): called on the HTTP thread for
     * every one-choice generation request before it is submitted; may set
     * the request's install hook (mu_lane_prepare). A nonzero return
     * answers the request with that error. NULL: none. */
    int (*prefill)(void *user, mu_gen_req *q, mu_err *err);
    void *prefill_user;
    /* more Prometheus lines for /metrics (returns their length); NULL: none */
    int (*metrics)(void *user, char *buf, size_t cap);
    void *metrics_user;
    /* the lane's counters for /snapshot and the dashboard (with prefill_user); NULL: none */
    void (*prefill_stats)(void *user, mu_lane_stats *st);
    mu_kv_cache *cache;        /* the scheduler's prefix cache, counted by /metrics and /snapshot; may be NULL */
    const char *slot_save_path; /* llama.cpp's --slot-save-path: where POST /slots/{id}?action=save|restore
                                   keeps packs; NULL: those answer 501 */
    const char *pack_dir;      /* --pack-dir: the pack store, where /v1/sessions persist each turn
                                  (session-<id>); NULL: sessions live in memory only */
    uint64_t pack_max_bytes;   /* with pack_dir: the store's byte budget, enforced at start and after
                                  every pack the server writes there (least recently used packs
                                  go first, as `muser pack gc`); 0: none */
    const mu_kv_ident *kv_id;  /* with slot_save_path or pack_dir: the engine's identity (outlives the server) */
    const uint8_t *kv_key;     /* with slot_save_path or pack_dir: the packs' root key (copied) */
    /* request defaults, as llama-server's --seed, --temp, --n-predict: what a
       request that does not set the field gets */
    bool has_seed;             /* else a random seed per request */
    uint32_t seed;
    bool has_temp;             /* else 0.8 (llama.cpp's) */
    float temp;
    int n_predict;             /* > 0: the most tokens a request without a limit generates */
    bool cache_prompt;         /* a request without cache_prompt reuses its slot's prefix (llama-server's
                                  default; off: only requests that ask do) */
    bool no_slots;             /* GET /slots answers 501 (llama-server's --no-slots) */
    bool no_metrics;           /* GET /metrics answers 501 (llama-server serves it only with --metrics) */
    bool no_ui;                /* no dashboard at / and /dashboard (404) */
    const char *tags;          /* comma-separated labels listed in /v1/models "tags" (--tags), or NULL */
    /* the vision projector (--mmproj; outlives the server), or NULL: requests with images are
       answered 400; image prompts are made with mu_mprompt_new on the scheduler's engine */
    const mu_mmproj *mmproj;
} mu_serve_opts;

/* The bind policy, checked before anything is loaded: a non-loopback host
 * needs TLS and an API key. MU_E_ARG with the reason. */
int mu_serve_bind_check(const char *host, bool has_tls, bool has_key, mu_err *err);
/* Reads an API key file: a regular file of mode 0600 or stricter, non-empty,
 * at most cap-1 bytes; a trailing newline is dropped. */
int mu_serve_read_key_file(const char *path, char *key, size_t cap, mu_err *err);

/* Starts serving the scheduler's model; on success the server accepts
 * connections. The scheduler (and its engine and model) must outlive it. */
int mu_serve_start(mu_sched *sched, const mu_model *m, const mu_serve_opts *o, mu_server **out, mu_err *err);
int mu_serve_port(const mu_server *s);
/* The connection limit in effect; *requested (may be NULL) gets the one
 * asked for (they differ when the open-file limit is too low). */
int mu_serve_max_connections(const mu_server *s, int *requested);
/* Stops accepting, finishes the connections and frees s. NULL is fine. */
void mu_serve_stop(mu_server *s);

#ifdef __cplusplus
}
#endif
#endif
