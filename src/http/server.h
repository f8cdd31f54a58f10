/* server.h: the HTTP transport of `muser serve`.
 * Owns: the libmicrohttpd daemon (epoll, a few event threads shared by all
 * connections; a request that waits for generation suspends its connection
 * and is resumed by its job's notify, so no thread ever blocks on
 * generation), the route table walk, request limits (body size, head and
 * body deadlines, idle timeout, total and per-address connection caps),
 * Content-Type and bearer-key checks (wrong keys throttled per client
 * address), dashboard login sessions (an HttpOnly
 * SameSite=Strict cookie that stands for the key, and a CSRF token that
 * POSTs authenticated by that cookie carry), the bind policy (loopback only unless
 * TLS and a key are set), error bodies in each protocol's shape, and chunked
 * streaming responses.
 * Does not own: what a route means (api_*.c) or generation (src/gen). */
#ifndef MU_HTTP_SERVER_H
#define MU_HTTP_SERVER_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../base/err.h"
#include "session.h"

typedef enum { MU_PROTO_OPENAI, MU_PROTO_LLAMACPP, MU_PROTO_OLLAMA, MU_PROTO_ANTHROPIC } mu_http_proto;

/* the most addresses one --host list may name ("127.0.0.1,::1") */
#define MU_HTTP_MAX_HOSTS 4

typedef struct mu_http_server mu_http_server;
typedef struct mu_http_req mu_http_req;

/* A growable byte buffer for response text. */
typedef struct {
    char *p;
    size_t n, cap;
    bool oom;   /* an append failed; the content is incomplete */
} mu_http_buf;
void mu_http_buf_add(mu_http_buf *b, const char *s, size_t n);
void mu_http_buf_str(mu_http_buf *b, const char *s);
void mu_http_buf_fmt(mu_http_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends the compact JSON encoding of j (not consumed). */
void mu_http_buf_json(mu_http_buf *b, const json_t *j);
void mu_http_buf_free(mu_http_buf *b);

typedef struct {
    const char *method;   /* "GET", "POST" or "DELETE" */
    const char *path;
    mu_http_proto proto;
    void (*fn)(mu_http_req *req, const json_t *body);   /* body NULL for GET */
    bool public_route;    /* no API key needed (health, /) */
} mu_http_route;

typedef struct {
    const char *host;            /* default "127.0.0.1"; "A,B" listens on each (at most MU_HTTP_MAX_HOSTS) */
    int port;                    /* default 4949; 0 = any free port */
    const char *tls_cert_pem;    /* both or neither (PEM text) */
    const char *tls_key_pem;
    const char *api_key;         /* NULL: none (only allowed on loopback) */
    size_t max_body_bytes;       /* 0: 8 MiB */
    int header_timeout_s;        /* 0: 10; the head (request line + headers) must be complete this long
                                  * after the connection opened (or after the last request ended) */
    int body_timeout_s;          /* 0: 30; the whole body, from the end of the head */
    int idle_timeout_s;          /* 0: 60; no traffic on a connection that is not waiting for generation */
    int max_connections;         /* 0: 4096; lowered to what the open-file limit allows */
    int max_per_ip;              /* connections per client address; 0: off on a loopback bind, 256
                                  * otherwise; -1: off */
    int threads;                 /* 0: 4; libmicrohttpd's event threads (1..64) */
    int requested_connections;   /* out (mu_http_server_limits): max_connections before lowering */
    const char *cors_origins;    /* NULL: no CORS; "*" or a comma-separated list of origins */
    const mu_http_route *routes; /* ends with a NULL path; a path ending in '*' matches any
                                  * path that starts with what precedes the '*' */
    void *app;                   /* handed to handlers via mu_http_req_app */
} mu_http_opts;

/* Refuses non-loopback binds without TLS and a key; fails if the port is
 * taken. On success the server is accepting connections. */
int mu_http_server_start(const mu_http_opts *o, mu_http_server **out, mu_err *err);
int mu_http_server_port(const mu_http_server *s);
/* The options in effect (defaults filled in, max_connections as lowered to
 * the open-file limit; requested_connections as asked). */
void mu_http_server_limits(const mu_http_server *s, mu_http_opts *eff);
/* Stops accepting, ends every request (waiting ones are resumed and their
 * jobs released) and frees s. */
void mu_http_server_stop(mu_http_server *s);

/* Bind policy, exposed for tests: 0 if (host, has_tls, has_key) may be
 * served; MU_E_ARG with the reason otherwise. *loopback tells which. */
int mu_http_bind_check(const char *host, bool has_tls, bool has_key, bool *loopback, mu_err *err);
/* Reads an API key file: must be a regular file of mode 0600 or stricter,
 * non-empty, at most cap-1 bytes; a trailing newline is dropped. */
int mu_http_read_key_file(const char *path, char *key, size_t cap, mu_err *err);
/* Constant-time comparison of a presented bearer key with the expected one. */
bool mu_http_key_equal(const char *presented, size_t n_presented, const char *expected);

/* ---- inside a handler ------------------------------------------------- */

void *mu_http_req_app(const mu_http_req *r);
mu_http_proto mu_http_req_proto(const mu_http_req *r);
const char *mu_http_req_path(const mu_http_req *r);
/* The method of the route that matched ("GET" for a HEAD request). */
const char *mu_http_req_method(const mu_http_req *r);
/* A request header's value, NULL when absent; valid while the handler runs. */
const char *mu_http_req_header(const mu_http_req *r, const char *name);
/* A query-string argument of the request (decoded), NULL when absent; valid
 * while the handler runs. */
const char *mu_http_req_query(const mu_http_req *r, const char *name);
/* False once the client closed its side (checked without blocking). */
bool mu_http_req_alive(const mu_http_req *r);
int mu_http_req_fd(const mu_http_req *r);

/* Login (docs/dashboard.md, "Login"). True when the server has an API key
 * (then every route but the public ones needs the key or a login). */
bool mu_http_req_needs_key(const mu_http_req *r);
/* Checks key (n bytes, untrusted) against the server's and starts a
 * session: csrf receives its token, set_cookie the Set-Cookie value (cap
 * 256 is enough). MU_E_ARG for a wrong key, MU_E_UNSUPPORTED when the
 * server has no key, MU_E_STATE when the client's address made too many
 * wrong guesses (*wait_s: the seconds until it may try again). */
int mu_http_req_login(mu_http_req *r, const char *key, size_t n, char csrf[MU_SESS_TOKEN_LEN + 1],
                      char *set_cookie, size_t cap, int *wait_s, mu_err *err);
/* True when the request's cookie names a live session; csrf (may be NULL)
 * receives its token. */
bool mu_http_req_session(mu_http_req *r, char csrf[MU_SESS_TOKEN_LEN + 1]);
/* Ends the request's session (if any); set_cookie receives the Set-Cookie
 * value that clears the cookie. */
void mu_http_req_logout(mu_http_req *r, char *set_cookie, size_t cap);

/* Exactly one reply per request. The json is consumed. */
void mu_http_reply_json(mu_http_req *r, int status, json_t *j);
void mu_http_reply_text(mu_http_req *r, int status, const char *content_type, const char *text, size_t n);
/* The same with one more header (name: value). */
void mu_http_reply_text_hdr(mu_http_req *r, int status, const char *content_type, const char *text, size_t n,
                            const char *name, const char *value);
/* An error body in the request's protocol shape; message must not contain
 * secrets or prompt text. param names the offending field (may be NULL). */
void mu_http_reply_error(mu_http_req *r, int status, const char *msg, const char *param);
/* Maps an MU_E_* status to an HTTP status and replies with err's message. */
void mu_http_reply_status(mu_http_req *r, int code, const mu_err *err);
/* 429 with Retry-After. */
void mu_http_reply_busy(mu_http_req *r, const char *msg, int retry_after_s);

/* Nothing a handler or a callback below does may block waiting for
 * generation: a connection thread serves many connections.
 *
 * Replies that wait for generation. The handler submits its jobs, sets each
 * job's notify to mu_http_req_wake(r) (mu_job_set_notify), hands the
 * transport a poll function and returns. The transport calls poll(state, r)
 * on a connection thread at once and again after every wake; in between the
 * connection is suspended (MHD_suspend_connection). poll must not block: it
 * takes what is ready and either replies (mu_http_reply_*) and returns true,
 * or returns false to wait for the next wake. release(state) runs exactly
 * once: after the reply, or when the client hung up or the server stops
 * (then the transport replies 499 / 503 itself); it must free the jobs
 * (mu_job_free, which also stops their notifications). */
typedef bool (*mu_http_poll_fn)(void *state, mu_http_req *r);
void mu_http_reply_later(mu_http_req *r, mu_http_poll_fn poll, void (*release)(void *state), void *state);
/* A handler that cannot go on before work off the connection threads is
 * done (an image encode) waits for it as with mu_http_reply_later; when
 * poll returns true without replying, the transport runs the handler again
 * on the same body (that run may reply, wait or rerun-wait anew). What the
 * work made lives across the runs in the request's carry: set once, and
 * release(carry) runs when the request is freed. mu_http_req_runs counts the
 * handler's runs (1 in the first). */
void mu_http_reply_rerun(mu_http_req *r, mu_http_poll_fn poll, void (*release)(void *state), void *state);
void *mu_http_req_carry(const mu_http_req *r);
void mu_http_req_set_carry(mu_http_req *r, void *carry, void (*release)(void *carry));
int mu_http_req_runs(const mu_http_req *r);
/* The wake-up for a request's jobs (the job notify fn, user = r): resumes
 * the request's connection if it is suspended, else marks a pending wake so
 * the next suspend does not happen. Quick; callable from any thread. */
void mu_http_req_wake(void *r);

/* Streaming: produce() appends what is ready to out without blocking (fd:
 * the client socket, for mu_http_fd_alive) and returns 1 for more (out may
 * stay empty: nothing ready yet; the connection is suspended until the next
 * mu_http_req_wake(r) of the request that queued the stream), 0 at the end
 * (out may hold the last bytes), <0 to abort the connection. release(state)
 * runs exactly once when the response is done or the client is gone, and
 * must free the jobs (mu_job_free). */
typedef int (*mu_http_produce_fn)(void *state, mu_http_buf *out, int fd);
void mu_http_reply_stream(mu_http_req *r, const char *content_type, mu_http_produce_fn produce,
                          void (*release)(void *state), void *state);
bool mu_http_fd_alive(int fd);

/* HTTP status for an MU_E_* code (one place for the mapping). */
int mu_http_status_of(int code);

/* Counters for /metrics. */
typedef struct {
    uint64_t requests, errors_4xx, errors_5xx, rejected_busy;
    uint64_t conns_open;           /* gauge: connections open now */
    uint64_t conns_refused;        /* closed at once: over max_connections */
    uint64_t closed_head_timeout;  /* closed: head not complete by its deadline */
    uint64_t closed_body_timeout;  /* closed: body not complete by its deadline */
} mu_http_counters;
void mu_http_server_counters(mu_http_server *s, mu_http_counters *c);

#endif
