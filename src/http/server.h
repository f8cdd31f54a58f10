/* server.h: the HTTP transport of `muser serve`.
 * Owns: the libmicrohttpd daemon (one thread per connection, so a handler may
 * block while its job runs), the route table walk, request limits (body size,
 * header/body/idle timeouts, connection cap), Content-Type and bearer-key
 * checks, the bind policy (loopback only unless TLS and a key are set), error
 * bodies in each protocol's shape, and chunked streaming responses.
 * Does not own: what a route means (api_*.c) or generation (src/gen). */
#ifndef MU_HTTP_SERVER_H
#define MU_HTTP_SERVER_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../base/err.h"

typedef enum { MU_PROTO_OPENAI, MU_PROTO_LLAMACPP, MU_PROTO_OLLAMA } mu_http_proto;

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
    const char *method;   /* "GET" or "POST" */
    const char *path;
    mu_http_proto proto;
    void (*fn)(mu_http_req *req, const json_t *body);   /* body NULL for GET */
    bool public_route;    /* no API key needed (health) */
} mu_http_route;

typedef struct {
    const char *host;            /* default "127.0.0.1" */
    int port;                    /* default 4949; 0 = any free port */
    const char *tls_cert_pem;    /* both or neither (PEM text) */
    const char *tls_key_pem;
    const char *api_key;         /* NULL: none (only allowed on loopback) */
    size_t max_body_bytes;       /* default 8 MiB */
    int header_timeout_s;        /* request line + headers; default 10 */
    int body_timeout_s;          /* whole body; default 30 */
    int idle_timeout_s;          /* no traffic on a connection; default 60 */
    int max_connections;         /* default 128 */
    const mu_http_route *routes; /* ends with a NULL path */
    void *app;                   /* handed to handlers via mu_http_req_app */
} mu_http_opts;

/* Refuses non-loopback binds without TLS and a key; fails if the port is
 * taken. On success the server is accepting connections. */
int mu_http_server_start(const mu_http_opts *o, mu_http_server **out, mu_err *err);
int mu_http_server_port(const mu_http_server *s);
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
/* False once the client closed its side (checked without blocking). */
bool mu_http_req_alive(const mu_http_req *r);
int mu_http_req_fd(const mu_http_req *r);

/* Exactly one reply per request. The json is consumed. */
void mu_http_reply_json(mu_http_req *r, int status, json_t *j);
void mu_http_reply_text(mu_http_req *r, int status, const char *content_type, const char *text, size_t n);
/* An error body in the request's protocol shape; message must not contain
 * secrets or prompt text. param names the offending field (may be NULL). */
void mu_http_reply_error(mu_http_req *r, int status, const char *msg, const char *param);
/* Maps an MU_E_* status to an HTTP status and replies with err's message. */
void mu_http_reply_status(mu_http_req *r, int code, const mu_err *err);
/* 429 with Retry-After. */
void mu_http_reply_busy(mu_http_req *r, const char *msg, int retry_after_s);

/* Streaming: produce() appends the next bytes to out, blocking as long as it
 * needs (checking fd with mu_http_fd_alive); returns 1 for more, 0 at the
 * end, <0 to abort the connection. release(state) runs exactly once when the
 * response is done or the client is gone. */
typedef int (*mu_http_produce_fn)(void *state, mu_http_buf *out, int fd);
void mu_http_reply_stream(mu_http_req *r, const char *content_type, mu_http_produce_fn produce,
                          void (*release)(void *state), void *state);
bool mu_http_fd_alive(int fd);

/* HTTP status for an MU_E_* code (one place for the mapping). */
int mu_http_status_of(int code);

/* Counters for /metrics. */
typedef struct {
    uint64_t requests, errors_4xx, errors_5xx, rejected_busy;
} mu_http_counters;
void mu_http_server_counters(mu_http_server *s, mu_http_counters *c);

#endif
