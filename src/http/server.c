/* server.c: HTTP transport on libmicrohttpd.
 * Owns: the daemon, per-request state (body accumulation under a size cap),
 * route lookup, the checks every request passes before a handler sees it
 * (path, method, bearer key, Content-Type, size, timeouts), the one mapping
 * from MU_E_* codes to HTTP statuses, error bodies per protocol, streaming.
 * Does not own: request semantics (api_*.c) or generation (src/gen).
 * Design: one thread per connection. Handlers block while their job runs and
 * poll the socket for hang-up (POLLRDHUP) between waits, so a client that
 * disconnects cancels only its own job. TLS is libmicrohttpd's transport;
 * the bearer key is compared with OpenSSL's CRYPTO_memcmp over SHA-256
 * digests so the time does not depend on where or whether the keys differ. */
#include "server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <netdb.h>
#include <openssl/crypto.h>
#include <openssl/sha.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "jcheck.h"

#define GEN_TIMEOUT_S 900  /* idle limit once a request is complete and being answered */

struct mu_http_server {
    struct MHD_Daemon *d;
    mu_http_opts o;
    char key[256];
    bool has_key;
    int port;
    pthread_mutex_t mu;
    mu_http_counters c;
};

struct mu_http_req {
    mu_http_server *srv;
    struct MHD_Connection *conn;
    const mu_http_route *rt;
    mu_http_proto proto;
    char path[256];
    double t_line;        /* request line received */
    double t_headers;     /* headers complete (first handler call) */
    bool first_done;
    bool responded;
    bool discard;         /* an error was queued early; drop the body */
    bool too_big;
    mu_http_buf body;
    int fd;
};

/* ---- buffers ---------------------------------------------------------- */

void mu_http_buf_add(mu_http_buf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) {
            if (cap > (SIZE_MAX >> 2)) {
                b->oom = true;
                return;
            }
            cap *= 2;
        }
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

void mu_http_buf_str(mu_http_buf *b, const char *s) { mu_http_buf_add(b, s, strlen(s)); }

void mu_http_buf_fmt(mu_http_buf *b, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n < sizeof tmp) {
        mu_http_buf_add(b, tmp, (size_t)n);
        return;
    }
    char *big = malloc((size_t)n + 1);
    if (!big) {
        b->oom = true;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    mu_http_buf_add(b, big, (size_t)n);
    free(big);
}

static int buf_dump_cb(const char *s, size_t n, void *data) {
    mu_http_buf_add(data, s, n);
    return 0;
}

void mu_http_buf_json(mu_http_buf *b, const json_t *j) {
    json_dump_callback(j, buf_dump_cb, b, JSON_COMPACT | JSON_ENCODE_ANY);
}

void mu_http_buf_free(mu_http_buf *b) {
    free(b->p);
    *b = (mu_http_buf){0};
}

/* ---- policy helpers --------------------------------------------------- */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static bool addr_loopback(const struct sockaddr *sa) {
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *a = (const void *)sa;
        return (ntohl(a->sin_addr.s_addr) >> 24) == 127;
    }
    if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const void *)sa;
        if (IN6_IS_ADDR_LOOPBACK(&a->sin6_addr)) return true;
        if (IN6_IS_ADDR_V4MAPPED(&a->sin6_addr)) return a->sin6_addr.s6_addr[12] == 127;
    }
    return false;
}

static int resolve(const char *host, int port, struct sockaddr_storage *ss, socklen_t *len, mu_err *err) {
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE};
    struct addrinfo *res = NULL;
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    int rc = getaddrinfo(host, ps, &hints, &res);
    if (rc || !res) return mu_fail(err, MU_E_ARG, "http: cannot resolve host: %s", host);
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    *len = res->ai_addrlen;
    freeaddrinfo(res);
    return 0;
}

int mu_http_bind_check(const char *host, bool has_tls, bool has_key, bool *loopback, mu_err *err) {
    struct sockaddr_storage ss;
    socklen_t len;
    int rc = resolve(host, 0, &ss, &len, err);
    if (rc) return rc;
    bool lo = addr_loopback((struct sockaddr *)&ss);
    if (loopback) *loopback = lo;
    if (!lo && (!has_tls || !has_key))
        return mu_fail(err, MU_E_ARG,
                       "http: refusing to bind a non-loopback address without TLS and an API key: %s "
                       "(give --tls-cert, --tls-key and --api-key-file)", host);
    return 0;
}

int mu_http_read_key_file(const char *path, char *key, size_t cap, mu_err *err) {
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return mu_fail(err, MU_E_IO, "http: cannot open API key file: %s", path);
    struct stat st;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
        close(fd);
        return mu_fail(err, MU_E_ARG, "http: API key file is not a regular file: %s", path);
    }
    if (st.st_mode & 077) {
        close(fd);
        return mu_fail(err, MU_E_ARG, "http: API key file must have mode 0600 (is %03o): %s",
                       (unsigned)(st.st_mode & 0777), path);
    }
    ssize_t n = read(fd, key, cap);
    close(fd);
    if (n < 0) return mu_fail(err, MU_E_IO, "http: cannot read API key file: %s", path);
    if ((size_t)n >= cap) {
        OPENSSL_cleanse(key, cap);
        return mu_fail(err, MU_E_ARG, "http: API key file too long (at most %zu bytes): %s", cap - 1, path);
    }
    while (n > 0 && (key[n - 1] == '\n' || key[n - 1] == '\r')) n--;
    key[n] = 0;
    if (n == 0) return mu_fail(err, MU_E_ARG, "http: API key file is empty: %s", path);
    for (ssize_t i = 0; i < n; i++)
        if ((unsigned char)key[i] <= 0x20 || (unsigned char)key[i] >= 0x7f) {
            OPENSSL_cleanse(key, cap);
            return mu_fail(err, MU_E_ARG, "http: API key must be printable ASCII without spaces: %s", path);
        }
    return 0;
}

bool mu_http_key_equal(const char *presented, size_t n_presented, const char *expected) {
    unsigned char a[SHA256_DIGEST_LENGTH], b[SHA256_DIGEST_LENGTH];
    SHA256((const unsigned char *)presented, n_presented, a);
    SHA256((const unsigned char *)expected, strlen(expected), b);
    return CRYPTO_memcmp(a, b, sizeof a) == 0;
}

int mu_http_status_of(int code) {
    switch (code) {
    case MU_OK: return 200;
    case MU_E_ARG:
    case MU_E_FORMAT:
    case MU_E_UNSUPPORTED: return 400;
    case MU_E_STATE: return 429;
    case MU_E_NOMEM: return 503;
    default: return 500;
    }
}

bool mu_http_fd_alive(int fd) {
    if (fd < 0) return true;
    struct pollfd p = {.fd = fd, .events = POLLRDHUP};
    int n = poll(&p, 1, 0);
    if (n <= 0) return true;
    return !(p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

/* ---- replies ---------------------------------------------------------- */

void *mu_http_req_app(const mu_http_req *r) { return r->srv->o.app; }
mu_http_proto mu_http_req_proto(const mu_http_req *r) { return r->proto; }
const char *mu_http_req_path(const mu_http_req *r) { return r->path; }
bool mu_http_req_alive(const mu_http_req *r) { return mu_http_fd_alive(r->fd); }
int mu_http_req_fd(const mu_http_req *r) { return r->fd; }

static void count_status(mu_http_server *s, int status) {
    pthread_mutex_lock(&s->mu);
    if (status >= 500) s->c.errors_5xx++;
    else if (status >= 400) s->c.errors_4xx++;
    if (status == 429) s->c.rejected_busy++;
    pthread_mutex_unlock(&s->mu);
}

static void queue(mu_http_req *r, int status, struct MHD_Response *resp) {
    MU_ASSERT(!r->responded);
    r->responded = true;
    if (!resp) return;  /* out of memory: MHD closes the connection */
    count_status(r->srv, status);
    MHD_queue_response(r->conn, (unsigned)status, resp);
    MHD_destroy_response(resp);
}

void mu_http_reply_text(mu_http_req *r, int status, const char *ct, const char *text, size_t n) {
    struct MHD_Response *resp = MHD_create_response_from_buffer(n, (void *)text, MHD_RESPMEM_MUST_COPY);
    if (resp) MHD_add_response_header(resp, "Content-Type", ct);
    queue(r, status, resp);
}

void mu_http_reply_json(mu_http_req *r, int status, json_t *j) {
    mu_http_buf b = {0};
    if (j) mu_http_buf_json(&b, j);
    json_decref(j);
    if (!j || b.oom) {
        mu_http_buf_free(&b);
        const char *m = "{\"error\":\"server: out of memory\"}";
        mu_http_reply_text(r, 500, "application/json", m, strlen(m));
        return;
    }
    mu_http_buf_add(&b, "\n", 1);
    mu_http_reply_text(r, status, "application/json; charset=utf-8", b.p, b.n);
    mu_http_buf_free(&b);
}

static const char *error_type(int status) {
    switch (status) {
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 429: return "rate_limit_error";
    case 501: return "not_supported_error";
    case 503: return "unavailable_error";
    default: return status >= 500 ? "server_error" : "invalid_request_error";
    }
}

static json_t *error_body(mu_http_proto proto, int status, const char *msg, const char *param) {
    if (proto == MU_PROTO_OLLAMA) return json_pack("{s:s}", "error", msg);
    if (proto == MU_PROTO_LLAMACPP)
        return json_pack("{s:{s:i,s:s,s:s}}", "error", "code", status, "message", msg, "type", error_type(status));
    json_t *e = json_pack("{s:s,s:s,s:o,s:o}", "message", msg, "type", error_type(status), "param",
                          param && *param ? json_string(param) : json_null(), "code",
                          status == 404 && param && !strcmp(param, "model") ? json_string("model_not_found")
                                                                             : json_null());
    return e ? json_pack("{s:o}", "error", e) : NULL;
}

void mu_http_reply_error(mu_http_req *r, int status, const char *msg, const char *param) {
    mu_http_reply_json(r, status, error_body(r->proto, status, msg, param));
}

void mu_http_reply_status(mu_http_req *r, int code, const mu_err *err) {
    int status = mu_http_status_of(code);
    const char *msg = err && err->msg[0] ? err->msg : mu_status_name(code);
    if (status == 429) {
        mu_http_reply_busy(r, msg, 1);
        return;
    }
    mu_http_reply_error(r, status, msg, code == MU_E_ARG ? mu_jc_last_param() : NULL);
}

void mu_http_reply_busy(mu_http_req *r, const char *msg, int retry_after_s) {
    mu_http_buf b = {0};
    json_t *j = error_body(r->proto, 429, msg, NULL);
    if (j) mu_http_buf_json(&b, j);
    json_decref(j);
    mu_http_buf_add(&b, "\n", 1);
    struct MHD_Response *resp =
        b.oom ? NULL : MHD_create_response_from_buffer(b.n, b.p, MHD_RESPMEM_MUST_COPY);
    mu_http_buf_free(&b);
    if (resp) {
        char ra[16];
        snprintf(ra, sizeof ra, "%d", retry_after_s);
        MHD_add_response_header(resp, "Content-Type", "application/json; charset=utf-8");
        MHD_add_response_header(resp, "Retry-After", ra);
    }
    queue(r, 429, resp);
}

typedef struct {
    mu_http_produce_fn produce;
    void (*release)(void *);
    void *state;
    mu_http_buf buf;
    size_t off;
    bool done;
    int fd;
} stream_state;

static ssize_t stream_read(void *cls, uint64_t pos, char *out, size_t max) {
    (void)pos;
    stream_state *st = cls;
    while (st->off == st->buf.n) {
        if (st->done) return MHD_CONTENT_READER_END_OF_STREAM;
        st->buf.n = 0;
        st->off = 0;
        int rc = st->produce(st->state, &st->buf, st->fd);
        if (rc < 0 || st->buf.oom) return MHD_CONTENT_READER_END_WITH_ERROR;
        if (rc == 0) st->done = true;
    }
    size_t n = st->buf.n - st->off;
    if (n > max) n = max;
    memcpy(out, st->buf.p + st->off, n);
    st->off += n;
    return (ssize_t)n;
}

static void stream_free(void *cls) {
    stream_state *st = cls;
    if (st->release) st->release(st->state);
    mu_http_buf_free(&st->buf);
    free(st);
}

void mu_http_reply_stream(mu_http_req *r, const char *ct, mu_http_produce_fn produce, void (*release)(void *),
                          void *state) {
    stream_state *st = calloc(1, sizeof *st);
    if (!st) {
        if (release) release(state);
        mu_http_reply_error(r, 503, "server: out of memory", NULL);
        return;
    }
    st->produce = produce;
    st->release = release;
    st->state = state;
    st->fd = r->fd;
    struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_read, st, stream_free);
    if (!resp) {
        stream_free(st);
        mu_http_reply_error(r, 503, "server: out of memory", NULL);
        return;
    }
    MHD_add_response_header(resp, "Content-Type", ct);
    MHD_add_response_header(resp, "Cache-Control", "no-cache");
    if (!strncmp(ct, "text/event-stream", 17)) MHD_add_response_header(resp, "X-Accel-Buffering", "no");
    queue(r, 200, resp);
}

/* ---- request pipeline ------------------------------------------------- */

static mu_http_proto proto_of_path(const char *p) {
    if (!strncmp(p, "/v1/", 4)) return MU_PROTO_OPENAI;
    if (!strncmp(p, "/api/", 5)) return MU_PROTO_OLLAMA;
    return MU_PROTO_LLAMACPP;
}

static void *uri_log(void *cls, const char *uri, struct MHD_Connection *conn) {
    mu_http_server *s = cls;
    mu_http_req *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->srv = s;
    r->conn = conn;
    r->t_line = now_s();
    r->fd = -1;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (ci) r->fd = ci->connect_fd;
    /* path without the query string */
    size_t n = strcspn(uri ? uri : "", "?");
    if (n >= sizeof r->path) n = sizeof r->path - 1;
    memcpy(r->path, uri ? uri : "", n);
    r->path[n] = 0;
    r->proto = proto_of_path(r->path);
    pthread_mutex_lock(&s->mu);
    s->c.requests++;
    pthread_mutex_unlock(&s->mu);
    return r;
}

static void completed(void *cls, struct MHD_Connection *conn, void **con_cls, enum MHD_RequestTerminationCode toe) {
    (void)cls;
    (void)conn;
    (void)toe;
    mu_http_req *r = *con_cls;
    if (!r) return;
    mu_http_buf_free(&r->body);
    free(r);
    *con_cls = NULL;
}

static bool content_type_json(const char *ct) {
    if (!ct) return false;
    while (*ct == ' ') ct++;
    size_t n = strcspn(ct, "; \t");
    if (n != 16 || strncasecmp(ct, "application/json", 16)) return false;
    const char *p = ct + n;
    while (*p == ' ' || *p == '\t') p++;
    if (!*p) return true;
    if (*p != ';') return false;
    p++;
    while (*p == ' ') p++;
    /* only charset=utf-8 is meaningful; anything else is refused */
    if (!strncasecmp(p, "charset=", 8)) {
        p += 8;
        if (*p == '"') p++;
        return !strncasecmp(p, "utf-8", 5) && (p[5] == 0 || p[5] == '"' || p[5] == ' ' || p[5] == ';');
    }
    return false;
}

static bool check_auth(mu_http_req *r) {
    mu_http_server *s = r->srv;
    if (!s->has_key || r->rt->public_route) return true;
    const char *h = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Authorization");
    if (!h || strncasecmp(h, "Bearer ", 7)) return false;
    h += 7;
    while (*h == ' ') h++;
    return mu_http_key_equal(h, strlen(h), s->key);
}

static enum MHD_Result early_error(mu_http_req *r, int status, const char *msg) {
    r->discard = true;
    mu_http_reply_error(r, status, msg, NULL);
    return MHD_YES;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    (void)url;
    (void)version;
    mu_http_server *s = cls;
    mu_http_req *r = *con_cls;
    if (!r) return MHD_NO;  /* allocation failed in uri_log */
    if (!r->first_done) {
        r->first_done = true;
        r->t_headers = now_s();
        if (s->o.header_timeout_s > 0 && r->t_headers - r->t_line > s->o.header_timeout_s)
            return early_error(r, 408, "http: request headers took too long");
        const mu_http_route *match = NULL;
        bool path_known = false;
        for (const mu_http_route *rt = s->o.routes; rt->path; rt++) {
            if (strcmp(rt->path, r->path)) continue;
            path_known = true;
            if (!strcmp(rt->method, method) || (!strcmp(method, "HEAD") && !strcmp(rt->method, "GET"))) {
                match = rt;
                break;
            }
        }
        if (!match) {
            char m[300];
            if (path_known) {
                snprintf(m, sizeof m, "http: method %s is not allowed on %.200s", method, r->path);
                return early_error(r, 405, m);
            }
            snprintf(m, sizeof m, "http: no such route: %.200s", r->path);
            return early_error(r, 404, m);
        }
        r->rt = match;
        r->proto = match->proto;
        if (!check_auth(r)) {
            r->discard = true;
            mu_http_buf b = {0};
            json_t *j = error_body(r->proto, 401, "http: missing or invalid API key", NULL);
            if (j) mu_http_buf_json(&b, j);
            json_decref(j);
            struct MHD_Response *resp = b.oom ? NULL : MHD_create_response_from_buffer(b.n, b.p, MHD_RESPMEM_MUST_COPY);
            mu_http_buf_free(&b);
            if (resp) {
                MHD_add_response_header(resp, "Content-Type", "application/json; charset=utf-8");
                MHD_add_response_header(resp, "WWW-Authenticate", "Bearer");
            }
            queue(r, 401, resp);
            return MHD_YES;
        }
        if (!strcmp(match->method, "POST")) {
            const char *ct = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Type");
            if (!content_type_json(ct)) return early_error(r, 415, "http: Content-Type must be application/json");
            const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Length");
            if (cl) {
                char *end;
                errno = 0;
                unsigned long long v = strtoull(cl, &end, 10);
                if (errno || *end || v > s->o.max_body_bytes) {
                    char m[128];
                    snprintf(m, sizeof m, "http: request body too large (limit %zu bytes)", s->o.max_body_bytes);
                    return early_error(r, 413, m);
                }
            }
        }
        return MHD_YES;
    }
    if (*upload_size) {
        if (!r->discard) {
            if (s->o.body_timeout_s > 0 && now_s() - r->t_headers > s->o.body_timeout_s) {
                r->discard = true;
                return MHD_NO;   /* slow body: drop the connection */
            }
            if (r->body.n + *upload_size > s->o.max_body_bytes) {
                r->too_big = true;
                r->discard = true;
            } else {
                mu_http_buf_add(&r->body, upload, *upload_size);
            }
        } else if (r->too_big && s->o.body_timeout_s > 0 && now_s() - r->t_headers > s->o.body_timeout_s) {
            return MHD_NO;
        }
        *upload_size = 0;
        return MHD_YES;
    }
    if (r->responded) return MHD_YES;
    if (r->too_big) {
        char m[128];
        snprintf(m, sizeof m, "http: request body too large (limit %zu bytes)", s->o.max_body_bytes);
        mu_http_reply_error(r, 413, m, NULL);
        return MHD_YES;
    }
    if (r->body.oom) {
        mu_http_reply_error(r, 503, "server: out of memory", NULL);
        return MHD_YES;
    }
    json_t *body = NULL;
    /* The request is complete: from here the connection waits on generation
     * (queue, prefill), which may exceed the idle timeout; dead clients are
     * caught by the hang-up polls instead. A stalled reader is still cut off
     * after the generation limit. */
    MHD_set_connection_option(conn, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned)GEN_TIMEOUT_S);
    if (!strcmp(r->rt->method, "POST")) {
        mu_err err = {0};
        if (mu_jc_parse(r->body.p ? r->body.p : "", r->body.n, &body, &err)) {
            mu_http_reply_error(r, 400, err.msg, NULL);
            return MHD_YES;
        }
    }
    r->rt->fn(r, body);
    json_decref(body);
    if (!r->responded) mu_http_reply_error(r, 500, "server: the handler gave no reply", NULL);
    return MHD_YES;
}

int mu_http_server_start(const mu_http_opts *o, mu_http_server **out, mu_err *err) {
    mu_http_server *s = calloc(1, sizeof *s);
    if (!s) return mu_fail(err, MU_E_NOMEM, "http: out of memory");
    s->o = *o;
    if (!s->o.host) s->o.host = "127.0.0.1";
    if (!s->o.max_body_bytes) s->o.max_body_bytes = 8u << 20;
    if (!s->o.header_timeout_s) s->o.header_timeout_s = 10;
    if (!s->o.body_timeout_s) s->o.body_timeout_s = 30;
    if (!s->o.idle_timeout_s) s->o.idle_timeout_s = 60;
    if (!s->o.max_connections) s->o.max_connections = 128;
    bool tls = o->tls_cert_pem && o->tls_key_pem;
    if (!!o->tls_cert_pem != !!o->tls_key_pem) {
        free(s);
        return mu_fail(err, MU_E_ARG, "http: TLS needs both a certificate and a key");
    }
    if (o->api_key) {
        if (strlen(o->api_key) >= sizeof s->key || !*o->api_key) {
            free(s);
            return mu_fail(err, MU_E_ARG, "http: API key is empty or too long");
        }
        snprintf(s->key, sizeof s->key, "%s", o->api_key);
        s->has_key = true;
    }
    int rc = mu_http_bind_check(s->o.host, tls, s->has_key, NULL, err);
    struct sockaddr_storage ss;
    socklen_t sl;
    if (!rc) rc = resolve(s->o.host, o->port, &ss, &sl, err);
    if (rc) {
        OPENSSL_cleanse(s->key, sizeof s->key);
        free(s);
        return rc;
    }
    if (tls && MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES) {
        free(s);
        return mu_fail(err, MU_E_UNSUPPORTED, "http: this libmicrohttpd has no TLS support");
    }
    pthread_mutex_init(&s->mu, NULL);
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL;
    if (ss.ss_family == AF_INET6) flags |= MHD_USE_IPv6;
    if (tls) flags |= MHD_USE_TLS;
    struct MHD_OptionItem opts[] = {
        {MHD_OPTION_SOCK_ADDR, 0, &ss},
        {MHD_OPTION_CONNECTION_LIMIT, (intptr_t)s->o.max_connections, NULL},
        {MHD_OPTION_CONNECTION_TIMEOUT, (intptr_t)s->o.idle_timeout_s, NULL},
        {MHD_OPTION_URI_LOG_CALLBACK, (intptr_t)uri_log, s},
        {MHD_OPTION_NOTIFY_COMPLETED, (intptr_t)completed, s},
        {MHD_OPTION_CONNECTION_MEMORY_LIMIT, 64 * 1024, NULL},
        {tls ? MHD_OPTION_HTTPS_MEM_KEY : MHD_OPTION_END, 0, (void *)o->tls_key_pem},
        {tls ? MHD_OPTION_HTTPS_MEM_CERT : MHD_OPTION_END, 0, (void *)o->tls_cert_pem},
        {MHD_OPTION_END, 0, NULL},
    };
    s->d = MHD_start_daemon(flags, 0, NULL, NULL, on_request, s, MHD_OPTION_ARRAY, opts, MHD_OPTION_END);
    if (!s->d) {
        pthread_mutex_destroy(&s->mu);
        OPENSSL_cleanse(s->key, sizeof s->key);
        free(s);
        return mu_fail(err, MU_E_IO, "http: cannot listen on %s port %d (in use, or bad TLS files)", o->host ? o->host : "127.0.0.1", o->port);
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : o->port;
    *out = s;
    return 0;
}

int mu_http_server_port(const mu_http_server *s) { return s->port; }

void mu_http_server_stop(mu_http_server *s) {
    if (!s) return;
    MHD_stop_daemon(s->d);
    pthread_mutex_destroy(&s->mu);
    OPENSSL_cleanse(s->key, sizeof s->key);
    free(s);
}

void mu_http_server_counters(mu_http_server *s, mu_http_counters *c) {
    pthread_mutex_lock(&s->mu);
    *c = s->c;
    pthread_mutex_unlock(&s->mu);
}
