/* server.c: HTTP transport on libmicrohttpd.
 * Owns: the daemon, per-connection state (phase and deadlines, the open
 * count), per-request state (body accumulation under a size cap, the
 * suspend/resume handshake), route lookup, the checks every request passes
 * before a handler sees it (path, method, bearer key, Content-Type, size),
 * the one mapping from MU_E_* codes to HTTP statuses, error bodies per
 * protocol, streaming, and the sweeper thread.
 * Does not own: request semantics (api_*.c) or generation (src/gen).
 * Design: events, not threads. MHD runs epoll with a small pool of threads
 * shared by every connection, so idle or slow clients cost a descriptor and
 * a little memory, never a thread. No callback blocks on generation: a
 * request that waits suspends its connection (MHD_suspend_connection) and
 * its job's notify (mu_http_req_wake, on the engine thread) resumes it; a
 * per-request mutex with a pending flag makes a wake that comes before the
 * suspend stop the suspend, and resume is only called on a suspended
 * connection. MHD does not watch suspended connections, and its idle timeout
 * restarts with every byte, so a sweeper thread (every SWEEP_MS) shuts down
 * connections past their head or body deadline and resumes suspended
 * requests whose client hung up (their handler then frees, thus cancels,
 * their jobs). Over the connection limit the newest connection is closed
 * at once. TLS is libmicrohttpd's transport; the bearer key is compared with
 * OpenSSL's CRYPTO_memcmp over SHA-256 digests so the time does not depend
 * on where or whether the keys differ. With a key, a browser may log in
 * instead (session.c): the login's HttpOnly SameSite=Strict cookie stands
 * for the key, and a POST that comes with the cookie only (no key) must also
 * carry the session's CSRF token in X-CSRF-Token. */
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
#include <limits.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "jcheck.h"
#include "session.h"

#define GEN_TIMEOUT_S 900  /* idle limit once a request is complete and being answered */
#define SWEEP_MS 100       /* the sweeper's interval (server-internal, not a test verdict) */
#define FD_RESERVE 64      /* descriptors kept for everything but connections */

/* What a connection is waiting for; the sweeper enforces the deadlines. */
typedef enum { PH_HEAD, PH_BODY, PH_BUSY } conn_phase;

/* One TCP connection (MHD's socket context), from NOTIFY_CONNECTION STARTED
 * to CLOSED. Everything but fd and mc is guarded by the server's cmu. */
typedef struct hconn {
    struct hconn *prev, *next;
    struct MHD_Connection *mc;
    int fd;
    conn_phase phase;
    double t_phase;       /* when the phase began (head: connect, or the end of the last request) */
    bool listed;          /* counted and in the list (false: refused over the limit) */
    bool shut;            /* the sweeper shut it down */
    mu_http_req *req;     /* the request in progress, if any */
} hconn;

struct mu_http_server {
    struct MHD_Daemon *d[MU_HTTP_MAX_HOSTS]; /* one daemon per address of the host list */
    int nd;
    mu_http_opts o;
    char key[256];
    bool has_key;
    bool tls;
    mu_http_sessions *sessions; /* dashboard logins; NULL without a key */
    mu_http_throttle *throttle; /* wrong keys per client address; NULL without a key */
    atomic_int port;      /* set once the daemon listens (requests read it: the cookie's name) */
    pthread_mutex_t mu;   /* c */
    mu_http_counters c;
    pthread_mutex_t cmu;  /* the connection list, each conn's phase and req, the sweeper's counters */
    pthread_cond_t ccv;   /* wakes the sweeper when stopping */
    hconn *conns;
    int n_open;
    uint64_t n_refused, n_head_closed, n_body_closed;
    atomic_bool stopping;
    bool sweeper_on;
    pthread_t sweeper;
};

struct mu_http_req {
    mu_http_server *srv;
    struct MHD_Connection *conn;
    hconn *c;              /* guarded by srv->cmu; NULL once the request ended */
    atomic_int refs;      /* MHD's (until completed) + a streaming response's */
    const mu_http_route *rt;
    mu_http_proto proto;
    char path[256];
    double t_head0;       /* when the connection began waiting for this request's head */
    bool first_done;
    bool body_done;
    bool responded;
    bool discard;         /* an error was queued early; drop the body */
    bool too_big;
    mu_http_buf body;
    int fd;
    /* suspend / resume: wmu guards these three */
    pthread_mutex_t wmu;
    bool suspended;       /* MHD_suspend_connection was called and no resume yet */
    bool pending;         /* a wake came while not suspended */
    bool hangup;          /* the sweeper saw the client go (or the server stops) */
    /* a reply that waits for generation (mu_http_reply_later) */
    bool later;
    bool rerun;           /* mu_http_reply_rerun: run the handler again when poll is done */
    mu_http_poll_fn poll;
    void (*release)(void *);
    void *state;
    /* what a handler keeps across its runs (mu_http_req_set_carry) */
    void *carry;
    void (*carry_release)(void *);
    int runs;             /* the handler's runs so far */
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

/* The i-th address of a comma-separated host list ("127.0.0.1,::1") into
 * buf; false past the last one. An empty item or more than
 * MU_HTTP_MAX_HOSTS items fail the list's check (host_list_check). */
static bool host_at(const char *list, int i, char *buf, size_t cap) {
    const char *p = list;
    for (int k = 0; k < i; k++) {
        p = strchr(p, ',');
        if (!p) return false;
        p++;
    }
    size_t n = strcspn(p, ",");
    if (n >= cap) n = cap - 1;
    memcpy(buf, p, n);
    buf[n] = 0;
    return true;
}

int mu_http_bind_check(const char *host, bool has_tls, bool has_key, bool *loopback, mu_err *err) {
    char h[256];
    int n = 0;
    bool all_lo = true;
    for (int i = 0; host_at(host, i, h, sizeof h); i++, n++) {
        if (!*h || n >= MU_HTTP_MAX_HOSTS)
            return mu_fail(err, MU_E_ARG, "http: --host takes 1 to %d comma-separated addresses: %s",
                           MU_HTTP_MAX_HOSTS, host);
        struct sockaddr_storage ss;
        socklen_t len;
        int rc = resolve(h, 0, &ss, &len, err);
        if (rc) return rc;
        bool lo = addr_loopback((struct sockaddr *)&ss);
        all_lo = all_lo && lo;
        if (loopback) *loopback = all_lo;
        if (!lo && (!has_tls || !has_key))
            return mu_fail(err, MU_E_ARG,
                           "http: refusing to bind a non-loopback address without TLS and an API key: %s "
                           "(give --tls-cert, --tls-key and --api-key-file)", h);
    }
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
const char *mu_http_req_query(const mu_http_req *r, const char *name) {
    return MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, name);
}

const char *mu_http_req_path(const mu_http_req *r) { return r->path; }
const char *mu_http_req_method(const mu_http_req *r) { return r->rt ? r->rt->method : ""; }
const char *mu_http_req_header(const mu_http_req *r, const char *name) {
    return MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, name);
}
bool mu_http_req_alive(const mu_http_req *r) { return mu_http_fd_alive(r->fd); }
int mu_http_req_fd(const mu_http_req *r) { return r->fd; }

static void count_status(mu_http_server *s, int status) {
    pthread_mutex_lock(&s->mu);
    if (status >= 500) s->c.errors_5xx++;
    else if (status >= 400) s->c.errors_4xx++;
    if (status == 429) s->c.rejected_busy++;
    pthread_mutex_unlock(&s->mu);
}

/* True for an origin on this machine: http(s)://localhost, 127.0.0.1 or
 * [::1], with an optional port and nothing else (the "localhost" entry of
 * --cors, as llama.cpp's --cors-origins reads it). */
static bool origin_is_local(const char *o) {
    const char *h = !strncmp(o, "http://", 7) ? o + 7 : !strncmp(o, "https://", 8) ? o + 8 : NULL;
    if (!h) return false;
    static const char *const hosts[] = {"localhost", "127.0.0.1", "[::1]"};
    for (int i = 0; i < 3; i++) {
        size_t n = strlen(hosts[i]);
        if (strncmp(h, hosts[i], n)) continue;
        const char *p = h + n;
        if (!*p) return true;
        if (*p++ != ':' || !*p || strlen(p) > 5) return false;
        return strspn(p, "0123456789") == strlen(p);
    }
    return false;
}

/* The Origin a CORS answer allows: the request's Origin when "*" is
 * configured or the origin is listed (or local, with the "localhost"
 * entry); "*" for a request without an Origin under "*"; NULL (no CORS
 * header) otherwise. */
static const char *cors_origin(mu_http_req *r) {
    const char *list = r->srv->o.cors_origins;
    if (!list) return NULL;
    const char *o = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Origin");
    if (!strcmp(list, "*")) return o && *o ? o : "*";
    if (!o || !*o) return NULL;
    size_t n = strlen(o);
    for (const char *p = list; *p;) {
        size_t k = strcspn(p, ",");
        if (k == n && !strncmp(p, o, n)) return o;
        if (k == 9 && !strncmp(p, "localhost", 9) && origin_is_local(o)) return o;
        p += k;
        if (*p == ',') p++;
    }
    return NULL;
}

static void queue(mu_http_req *r, int status, struct MHD_Response *resp) {
    MU_ASSERT(!r->responded);
    r->responded = true;
    if (!resp) return;  /* out of memory: MHD closes the connection */
    const char *origin = cors_origin(r);
    if (origin) {
        MHD_add_response_header(resp, "Access-Control-Allow-Origin", origin);
        if (strcmp(origin, "*")) MHD_add_response_header(resp, "Vary", "Origin");
    }
    count_status(r->srv, status);
    MHD_queue_response(r->conn, (unsigned)status, resp);
    MHD_destroy_response(resp);
}

void mu_http_reply_text_hdr(mu_http_req *r, int status, const char *ct, const char *text, size_t n, const char *name,
                            const char *value) {
    struct MHD_Response *resp = MHD_create_response_from_buffer(n, (void *)text, MHD_RESPMEM_MUST_COPY);
    if (resp) MHD_add_response_header(resp, "Content-Type", ct);
    if (resp && name) MHD_add_response_header(resp, name, value);
    queue(r, status, resp);
}

void mu_http_reply_text(mu_http_req *r, int status, const char *ct, const char *text, size_t n) {
    mu_http_reply_text_hdr(r, status, ct, text, n, NULL, NULL);
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
    if (proto == MU_PROTO_ANTHROPIC)
        return json_pack("{s:s,s:{s:s,s:s}}", "type", "error", "error", "type",
                         status >= 500 && status != 503 ? "api_error" : error_type(status), "message", msg);
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

/* ---- waiting without blocking ------------------------------------------ */

static void req_unref(mu_http_req *r) {
    if (atomic_fetch_sub(&r->refs, 1) != 1) return;
    if (r->carry_release) r->carry_release(r->carry);
    pthread_mutex_destroy(&r->wmu);
    mu_http_buf_free(&r->body);
    free(r);
}

void mu_http_req_wake(void *p) {
    mu_http_req *r = p;
    pthread_mutex_lock(&r->wmu);
    if (r->suspended) {
        r->suspended = false;
        MHD_resume_connection(r->conn);
    } else {
        r->pending = true;
    }
    pthread_mutex_unlock(&r->wmu);
}

/* True when the client is gone or the server stops: stop waiting. */
static bool req_gone(mu_http_req *r) {
    pthread_mutex_lock(&r->wmu);
    bool g = r->hangup || atomic_load(&r->srv->stopping);
    pthread_mutex_unlock(&r->wmu);
    return g;
}

/* Called before reading what is ready: a wake from here on is not lost. */
static void req_unpend(mu_http_req *r) {
    pthread_mutex_lock(&r->wmu);
    r->pending = false;
    pthread_mutex_unlock(&r->wmu);
}

/* Suspends the connection unless a wake came since req_unpend (or the
 * client is gone / the server stops); false means: look again now. */
static bool req_suspend(mu_http_req *r) {
    bool done = false;
    pthread_mutex_lock(&r->wmu);
    if (!r->pending && !r->hangup && !atomic_load(&r->srv->stopping)) {
        r->suspended = true;
        MHD_suspend_connection(r->conn);
        done = true;
    }
    r->pending = false;
    pthread_mutex_unlock(&r->wmu);
    return done;
}

void mu_http_reply_later(mu_http_req *r, mu_http_poll_fn poll, void (*release)(void *), void *state) {
    MU_ASSERT(!r->responded && !r->later);
    r->later = true;
    r->poll = poll;
    r->release = release;
    r->state = state;
}

void mu_http_reply_rerun(mu_http_req *r, mu_http_poll_fn poll, void (*release)(void *), void *state) {
    mu_http_reply_later(r, poll, release, state);
    r->rerun = true;
}

void *mu_http_req_carry(const mu_http_req *r) { return r->carry; }
int mu_http_req_runs(const mu_http_req *r) { return r->runs; }

void mu_http_req_set_carry(mu_http_req *r, void *carry, void (*release)(void *)) {
    MU_ASSERT(!r->carry_release);
    r->carry = carry;
    r->carry_release = release;
}

static void later_end(mu_http_req *r) {
    if (!r->later) return;
    r->later = false;
    r->rerun = false;
    if (r->release) r->release(r->state);
    r->state = NULL;
}

static void run_handler(mu_http_req *r);

/* A request whose reply waits for generation: poll what is ready; reply,
 * or suspend until the next wake. Runs on the connection's thread, now and
 * each time MHD calls the handler after a resume. A wait of
 * mu_http_reply_rerun that is done runs the handler again, which may wait
 * anew. */
static enum MHD_Result run_later(mu_http_req *r) {
    for (;;) {
        if (req_gone(r)) {
            later_end(r);
            if (atomic_load(&r->srv->stopping)) mu_http_reply_error(r, 503, "server: shutting down", NULL);
            else mu_http_reply_error(r, 499, "client closed the request", NULL);
            return MHD_YES;
        }
        req_unpend(r);
        bool done = r->poll(r->state, r);
        if (done && r->rerun && !r->responded) {
            later_end(r);
            run_handler(r);
            if (r->later) continue;
            if (!r->responded) mu_http_reply_error(r, 500, "server: the handler gave no reply", NULL);
            return MHD_YES;
        }
        if (done || r->responded) {
            later_end(r);
            if (!r->responded) mu_http_reply_error(r, 500, "server: the handler gave no reply", NULL);
            return MHD_YES;
        }
        if (req_suspend(r)) return MHD_YES;
    }
}

typedef struct {
    mu_http_produce_fn produce;
    void (*release)(void *);
    void *state;
    mu_http_buf buf;
    size_t off;
    bool done;
    int fd;
    mu_http_req *req;     /* a reference: the wake target */
} stream_state;

/* MHD's content reader: never blocks. Returns what is ready, or suspends
 * the connection and returns 0 (MHD calls again after the resume). */
static ssize_t stream_read(void *cls, uint64_t pos, char *out, size_t max) {
    (void)pos;
    stream_state *st = cls;
    for (;;) {
        if (st->off < st->buf.n) {
            size_t n = st->buf.n - st->off;
            if (n > max) n = max;
            memcpy(out, st->buf.p + st->off, n);
            st->off += n;
            return (ssize_t)n;
        }
        if (st->done) return MHD_CONTENT_READER_END_OF_STREAM;
        if (req_gone(st->req)) return MHD_CONTENT_READER_END_WITH_ERROR;
        req_unpend(st->req);
        st->buf.n = 0;
        st->off = 0;
        int rc = st->produce(st->state, &st->buf, st->fd);
        if (rc < 0 || st->buf.oom) return MHD_CONTENT_READER_END_WITH_ERROR;
        if (rc == 0) st->done = true;
        if (st->buf.n || st->done) continue;
        if (req_suspend(st->req)) return 0;
    }
}

static void stream_free(void *cls) {
    stream_state *st = cls;
    if (st->release) st->release(st->state);
    mu_http_buf_free(&st->buf);
    if (st->req) req_unref(st->req);
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
    st->req = r;
    atomic_fetch_add(&r->refs, 1);
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
    if (!strncmp(p, "/v1/messages", 12)) return MU_PROTO_ANTHROPIC;
    if (!strncmp(p, "/v1/", 4) || !strcmp(p, "/chat/completions") || !strcmp(p, "/models")) return MU_PROTO_OPENAI;
    if (!strncmp(p, "/api/", 5)) return MU_PROTO_OLLAMA;
    return MU_PROTO_LLAMACPP;
}

static void *uri_log(void *cls, const char *uri, struct MHD_Connection *mc) {
    mu_http_server *s = cls;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(mc, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    hconn *c = ci ? ci->socket_context : NULL;
    /* a connection refused over the limit (shut down, but a request it sent
     * may still be buffered): no request object, so the handler closes it */
    if (!c) return NULL;
    mu_http_req *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->srv = s;
    r->conn = mc;
    atomic_init(&r->refs, 1);
    pthread_mutex_init(&r->wmu, NULL);
    r->t_head0 = now_s();
    r->fd = -1;
    ci = MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (ci) r->fd = ci->connect_fd;
    pthread_mutex_lock(&s->cmu);
    r->c = c;
    c->req = r;
    r->t_head0 = c->t_phase;
    pthread_mutex_unlock(&s->cmu);
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

/* The connection's phase (deadlines restart with each phase). */
static void set_phase(mu_http_req *r, conn_phase ph) {
    pthread_mutex_lock(&r->srv->cmu);
    if (r->c) {
        r->c->phase = ph;
        r->c->t_phase = now_s();
    }
    pthread_mutex_unlock(&r->srv->cmu);
}

static void completed(void *cls, struct MHD_Connection *mc, void **con_cls, enum MHD_RequestTerminationCode toe) {
    mu_http_server *s = cls;
    (void)mc;
    (void)toe;
    mu_http_req *r = *con_cls;
    if (!r) return;
    *con_cls = NULL;
    pthread_mutex_lock(&s->cmu);
    if (r->c) {
        /* a kept-alive connection waits for its next head from now */
        r->c->req = NULL;
        r->c->phase = PH_HEAD;
        r->c->t_phase = now_s();
        r->c = NULL;
    }
    pthread_mutex_unlock(&s->cmu);
    later_end(r);  /* the client left before the reply: cancels the jobs */
    req_unref(r);
}

static void on_connection(void *cls, struct MHD_Connection *mc, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe) {
    mu_http_server *s = cls;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CONNECTION_FD);
        int fd = ci ? ci->connect_fd : -1;
        hconn *c = calloc(1, sizeof *c);
        pthread_mutex_lock(&s->cmu);
        if (!c || s->n_open >= s->o.max_connections) {
            /* over the limit (or out of memory): the newest connection is
             * closed; MHD sees the end of the stream at its first read */
            s->n_refused++;
            if (fd >= 0) shutdown(fd, SHUT_RDWR);
        } else {
            c->mc = mc;
            c->fd = fd;
            c->phase = PH_HEAD;
            c->t_phase = now_s();
            c->listed = true;
            c->next = s->conns;
            if (s->conns) s->conns->prev = c;
            s->conns = c;
            s->n_open++;
        }
        pthread_mutex_unlock(&s->cmu);
        *socket_context = c;
        return;
    }
    hconn *c = *socket_context;
    if (!c) return;
    pthread_mutex_lock(&s->cmu);
    if (c->listed) {
        if (c->prev) c->prev->next = c->next;
        else s->conns = c->next;
        if (c->next) c->next->prev = c->prev;
        s->n_open--;
    }
    if (c->req) c->req->c = NULL;
    pthread_mutex_unlock(&s->cmu);
    free(c);
    *socket_context = NULL;
}

/* Every SWEEP_MS: closes connections past their head or body deadline
 * (shutdown: MHD then sees the end of the stream and closes them), and
 * resumes suspended requests whose client hung up (their handler then
 * frees, thus cancels, the jobs). MHD catches neither: it does not poll
 * suspended connections, and its idle timeout restarts with every byte. */
static void *sweeper_main(void *p) {
    mu_http_server *s = p;
    pthread_mutex_lock(&s->cmu);
    while (!atomic_load(&s->stopping)) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_nsec += SWEEP_MS * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&s->ccv, &s->cmu, &ts);
        if (atomic_load(&s->stopping)) break;
        double t = now_s();
        for (hconn *c = s->conns; c; c = c->next) {
            if (!c->shut && ((c->phase == PH_HEAD && t - c->t_phase > s->o.header_timeout_s) ||
                             (c->phase == PH_BODY && t - c->t_phase > s->o.body_timeout_s))) {
                if (c->phase == PH_HEAD) s->n_head_closed++;
                else s->n_body_closed++;
                c->shut = true;
                shutdown(c->fd, SHUT_RDWR);
                continue;
            }
            mu_http_req *r = c->req;
            if (c->phase != PH_BUSY || !r) continue;
            pthread_mutex_lock(&r->wmu);
            if (r->suspended && !mu_http_fd_alive(c->fd)) {
                r->hangup = true;
                r->suspended = false;
                MHD_resume_connection(r->conn);
            }
            pthread_mutex_unlock(&r->wmu);
        }
    }
    pthread_mutex_unlock(&s->cmu);
    return NULL;
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

/* The bearer key of a request: Authorization: Bearer KEY, or X-Api-Key:
 * KEY (Anthropic's header; llama.cpp accepts both). NULL when it has none. */
static const char *req_bearer(mu_http_req *r) {
    const char *h = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Authorization");
    if (!h) return MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "X-Api-Key");
    if (strncasecmp(h, "Bearer ", 7)) return "";
    h += 7;
    while (*h == ' ') h++;
    return h;
}

/* The session id the request's cookie carries (NULL when none). */
static const char *req_cookie(mu_http_req *r, size_t *n) {
    char name[32];
    snprintf(name, sizeof name, "muser_%d", atomic_load(&r->srv->port));
    const char *h = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Cookie");
    const char *v;
    return mu_http_cookie_get(h, name, &v, n) ? v : NULL;
}

/* The client's address as the throttle counts it: an IPv4 address, or the
 * /64 of an IPv6 one (an IPv4-mapped one as IPv4). */
static void req_addr(mu_http_req *r, unsigned char a[16]) {
    memset(a, 0, 16);
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    const struct sockaddr *sa = ci ? ci->client_addr : NULL;
    if (!sa) return;
    if (sa->sa_family == AF_INET) {
        memcpy(a, &((const struct sockaddr_in *)sa)->sin_addr, 4);
    } else if (sa->sa_family == AF_INET6) {
        const unsigned char *b = ((const struct sockaddr_in6 *)sa)->sin6_addr.s6_addr;
        static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        if (!memcmp(b, mapped, 12)) memcpy(a, b + 12, 4);
        else {
            a[15] = 6; /* not an IPv4 address */
            memcpy(a + 4, b, 8);
        }
    }
}

/* A presented key: false and counted against the address when wrong. */
static bool key_try(mu_http_req *r, const char *k, size_t n) {
    if (mu_http_key_equal(k, n, r->srv->key)) return true;
    unsigned char a[16];
    req_addr(r, a);
    mu_http_throttle_fail(r->srv->throttle, a, now_s());
    return false;
}

/* Seconds the request's address must wait before it may try a key (0: none). */
static int key_wait(mu_http_req *r) {
    unsigned char a[16];
    req_addr(r, a);
    return mu_http_throttle_wait(r->srv->throttle, a, now_s());
}

typedef enum { AUTH_OK, AUTH_NO, AUTH_CSRF, AUTH_WAIT } auth_result;

static auth_result check_auth(mu_http_req *r, const char *method) {
    mu_http_server *s = r->srv;
    if (!s->has_key || r->rt->public_route) return AUTH_OK;
    const char *h = req_bearer(r);
    if (h) {
        if (key_wait(r)) return AUTH_WAIT;
        return key_try(r, h, strlen(h)) ? AUTH_OK : AUTH_NO;
    }
    size_t n = 0;
    const char *id = req_cookie(r, &n);
    char csrf[MU_SESS_TOKEN_LEN + 1];
    if (!id || !mu_http_session_find(s->sessions, now_s(), id, n, csrf)) return AUTH_NO;
    auth_result a = AUTH_OK;
    if (strcmp(method, "GET") && strcmp(method, "HEAD")) {
        /* state-changing: the page proves it read the token (a cross-site
         * form or script cannot) */
        const char *t = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "X-CSRF-Token");
        if (!t || strlen(t) != MU_SESS_TOKEN_LEN || CRYPTO_memcmp(t, csrf, MU_SESS_TOKEN_LEN)) a = AUTH_CSRF;
    }
    OPENSSL_cleanse(csrf, sizeof csrf);
    return a;
}

bool mu_http_req_needs_key(const mu_http_req *r) { return r->srv->has_key; }

int mu_http_req_login(mu_http_req *r, const char *key, size_t n, char csrf[MU_SESS_TOKEN_LEN + 1],
                      char *set_cookie, size_t cap, int *wait_s, mu_err *err) {
    mu_http_server *s = r->srv;
    *wait_s = 0;
    if (!s->has_key)
        return mu_fail(err, MU_E_UNSUPPORTED, "http: this server has no API key: there is nothing to log in to");
    int w = key_wait(r);
    if (w) {
        *wait_s = w;
        return mu_fail(err, MU_E_STATE, "http: too many wrong keys from this address: try again in %d s", w);
    }
    if (!key_try(r, key, n)) return mu_fail(err, MU_E_ARG, "http: wrong API key");
    char id[MU_SESS_TOKEN_LEN + 1];
    int rc = mu_http_session_create(s->sessions, now_s(), id, csrf, err);
    if (rc) return rc;
    snprintf(set_cookie, cap, "muser_%d=%s; Path=/; Max-Age=%d; HttpOnly; SameSite=Strict%s", atomic_load(&s->port), id,
             MU_SESS_TTL_S, s->tls ? "; Secure" : "");
    OPENSSL_cleanse(id, sizeof id);
    return 0;
}

bool mu_http_req_session(mu_http_req *r, char csrf[MU_SESS_TOKEN_LEN + 1]) {
    size_t n = 0;
    const char *id = r->srv->has_key ? req_cookie(r, &n) : NULL;
    return id && mu_http_session_find(r->srv->sessions, now_s(), id, n, csrf);
}

void mu_http_req_logout(mu_http_req *r, char *set_cookie, size_t cap) {
    size_t n = 0;
    const char *id = r->srv->has_key ? req_cookie(r, &n) : NULL;
    if (id) mu_http_session_drop(r->srv->sessions, id, n);
    snprintf(set_cookie, cap, "muser_%d=; Path=/; Max-Age=0; HttpOnly; SameSite=Strict%s", atomic_load(&r->srv->port),
             r->srv->tls ? "; Secure" : "");
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
    if (!r) return MHD_NO;  /* a refused connection, or allocation failed in uri_log */
    if (!r->first_done) {
        r->first_done = true;
        /* the head is complete: the body deadline runs until the final call */
        set_phase(r, PH_BODY);
        if (now_s() - r->t_head0 > s->o.header_timeout_s)
            return early_error(r, 408, "http: request headers took too long");
        const mu_http_route *match = NULL;
        bool path_known = false;
        for (const mu_http_route *rt = s->o.routes; rt->path; rt++) {
            size_t pl = strlen(rt->path);
            if (pl && rt->path[pl - 1] == '*' ? strncmp(rt->path, r->path, pl - 1) || !r->path[pl - 1]
                                              : strcmp(rt->path, r->path))
                continue;
            path_known = true;
            if (!strcmp(rt->method, method) || (!strcmp(method, "HEAD") && !strcmp(rt->method, "GET"))) {
                match = rt;
                break;
            }
        }
        if (!match && path_known && !strcmp(method, "OPTIONS") && s->o.cors_origins) {
            /* a CORS preflight: answered before the key check (browsers send no key with it) */
            r->discard = true;
            struct MHD_Response *resp = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
            if (resp) {
                MHD_add_response_header(resp, "Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS");
                /* the headers the browser asks for, echoed: SDKs send their own
                 * (the openai package's x-stainless-*), and "*" would not cover
                 * Authorization (Fetch: it must be named) */
                const char *ask = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND,
                                                              "Access-Control-Request-Headers");
                bool plain = ask && *ask && strlen(ask) <= 1024;
                for (const char *c = ask; plain && *c; c++)
                    plain = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
                            *c == '-' || *c == '_' || *c == ',' || *c == ' ';
                MHD_add_response_header(resp, "Access-Control-Allow-Headers",
                                        plain ? ask : "Authorization, Content-Type, X-Api-Key, Anthropic-Version, Idempotency-Key");
                if (plain) MHD_add_response_header(resp, "Vary", "Access-Control-Request-Headers");
                MHD_add_response_header(resp, "Access-Control-Max-Age", "600");
            }
            queue(r, 200, resp); /* any 2xx does; llama.cpp's server answers 200 */
            return MHD_YES;
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
        auth_result au = check_auth(r, method);
        if (au == AUTH_WAIT) {
            r->discard = true;
            char m[128];
            int w = key_wait(r);
            snprintf(m, sizeof m, "http: too many wrong keys from this address: try again in %d s", w);
            mu_http_reply_busy(r, m, w > 0 ? w : 1);
            return MHD_YES;
        }
        if (au == AUTH_CSRF)
            return early_error(r, 403, "http: missing or invalid CSRF token (X-CSRF-Token) for a request that "
                                       "authenticates with the login cookie");
        if (au == AUTH_NO) {
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
        /* (the body deadline is the sweeper's) */
        if (!r->discard) {
            if (r->body.n + *upload_size > s->o.max_body_bytes) {
                r->too_big = true;
                r->discard = true;
            } else {
                mu_http_buf_add(&r->body, upload, *upload_size);
            }
        }
        *upload_size = 0;
        return MHD_YES;
    }
    if (r->later) return run_later(r);  /* called again after a resume */
    if (!r->body_done) {
        r->body_done = true;
        pthread_mutex_lock(&s->cmu);
        bool shut = r->c && r->c->shut;
        if (r->c) {
            r->c->phase = PH_BUSY;
            r->c->t_phase = now_s();
        }
        pthread_mutex_unlock(&s->cmu);
        /* the sweeper shut it (its deadline passed) while the rest of the
         * request was still buffered: start nothing */
        if (shut) return MHD_NO;
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
    /* The request is complete: from here the connection waits on generation
     * (queue, prefill), suspended (MHD does not time suspended connections
     * out; the sweeper catches clients that hang up). A stalled reader of a
     * response is still cut off after the generation limit of idleness. */
    MHD_set_connection_option(conn, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned)GEN_TIMEOUT_S);
    run_handler(r);
    if (r->later) return run_later(r);
    if (!r->responded) mu_http_reply_error(r, 500, "server: the handler gave no reply", NULL);
    return MHD_YES;
}

/* The route's handler on the complete body (parsed anew on each run). */
static void run_handler(mu_http_req *r) {
    json_t *body = NULL;
    if (!strcmp(r->rt->method, "POST")) {
        mu_err err = {0};
        if (mu_jc_parse(r->body.p ? r->body.p : "", r->body.n, &body, &err)) {
            mu_http_reply_error(r, 400, err.msg, NULL);
            return;
        }
    }
    r->runs++;
    r->rt->fn(r, body);
    json_decref(body);
}

/* The most connections the open-file limit leaves room for. */
static int fd_budget(int threads) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl)) return INT_MAX;
    if (rl.rlim_cur == RLIM_INFINITY) return INT_MAX;
    long long b = (long long)rl.rlim_cur - FD_RESERVE - 4LL * threads;
    return b < 1 ? 1 : b > INT_MAX ? INT_MAX : (int)b;
}

/* The server's own state, once the daemon is stopped (or never started). */
static void server_free(mu_http_server *s) {
    pthread_mutex_destroy(&s->mu);
    pthread_mutex_destroy(&s->cmu);
    pthread_cond_destroy(&s->ccv);
    OPENSSL_cleanse(s->key, sizeof s->key);
    mu_http_sessions_free(s->sessions);
    mu_http_throttle_free(s->throttle);
    free(s);
}

int mu_http_server_start(const mu_http_opts *o, mu_http_server **out, mu_err *err) {
    mu_http_server *s = calloc(1, sizeof *s);
    if (!s) return mu_fail(err, MU_E_NOMEM, "http: out of memory");
    s->o = *o;
    if (!s->o.host) s->o.host = "127.0.0.1";
    if (!s->o.max_body_bytes) s->o.max_body_bytes = 8u << 20;
    if (s->o.header_timeout_s <= 0) s->o.header_timeout_s = 10;
    if (s->o.body_timeout_s <= 0) s->o.body_timeout_s = 30;
    if (s->o.idle_timeout_s <= 0) s->o.idle_timeout_s = 60;
    if (s->o.max_connections <= 0) s->o.max_connections = 4096;
    if (s->o.threads <= 0) s->o.threads = 4;
    if (s->o.threads > 64) s->o.threads = 64;
    s->o.requested_connections = s->o.max_connections;
    int budget = fd_budget(s->o.threads);
    if (s->o.max_connections > budget) s->o.max_connections = budget;
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
        int rc = mu_http_sessions_new(&s->sessions, err);
        if (!rc) rc = mu_http_throttle_new(&s->throttle, err);
        if (rc) {
            mu_http_sessions_free(s->sessions);
            OPENSSL_cleanse(s->key, sizeof s->key);
            free(s);
            return rc;
        }
    }
    s->tls = tls;
    atomic_init(&s->port, o->port);
    bool loopback = true;
    int rc = mu_http_bind_check(s->o.host, tls, s->has_key, &loopback, err);
    struct sockaddr_storage ss;
    socklen_t sl;
    char h[256];
    host_at(s->o.host, 0, h, sizeof h);
    if (!rc) rc = resolve(h, o->port, &ss, &sl, err);
    if (rc) {
        OPENSSL_cleanse(s->key, sizeof s->key);
        mu_http_sessions_free(s->sessions);
        mu_http_throttle_free(s->throttle);
        free(s);
        return rc;
    }
    /* per client address: off on a loopback bind (every client is 127.0.0.1
     * there), 256 otherwise; -1 = off */
    if (s->o.max_per_ip == 0) s->o.max_per_ip = loopback ? -1 : 256;
    if (tls && MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES) {
        mu_http_sessions_free(s->sessions);
        mu_http_throttle_free(s->throttle);
        free(s);
        return mu_fail(err, MU_E_UNSUPPORTED, "http: this libmicrohttpd has no TLS support");
    }
    if (MHD_is_feature_supported(MHD_FEATURE_EPOLL) != MHD_YES) {
        mu_http_sessions_free(s->sessions);
        mu_http_throttle_free(s->throttle);
        free(s);
        return mu_fail(err, MU_E_UNSUPPORTED, "http: this libmicrohttpd has no epoll support");
    }
    pthread_mutex_init(&s->mu, NULL);
    pthread_mutex_init(&s->cmu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->ccv, &ca);
    pthread_condattr_destroy(&ca);
    unsigned flags = MHD_USE_EPOLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME;
    if (tls) flags |= MHD_USE_TLS;
    /* MHD's own limit (split among its threads) stays above ours, so the
     * accept loop never stalls: on_connection refuses over our limit */
    unsigned mhd_limit = (unsigned)s->o.max_connections * 2u + 64u;
    struct MHD_OptionItem opts[] = {
        {MHD_OPTION_SOCK_ADDR, 0, &ss},
        {MHD_OPTION_CONNECTION_LIMIT, (intptr_t)mhd_limit, NULL},
        {MHD_OPTION_CONNECTION_TIMEOUT, (intptr_t)s->o.idle_timeout_s, NULL},
        {MHD_OPTION_URI_LOG_CALLBACK, (intptr_t)uri_log, s},
        {MHD_OPTION_NOTIFY_COMPLETED, (intptr_t)completed, s},
        {MHD_OPTION_NOTIFY_CONNECTION, (intptr_t)on_connection, s},
        {MHD_OPTION_CONNECTION_MEMORY_LIMIT, 64 * 1024, NULL},
        {MHD_OPTION_LISTEN_BACKLOG_SIZE, 4096, NULL},
        {s->o.max_per_ip > 0 ? MHD_OPTION_PER_IP_CONNECTION_LIMIT : MHD_OPTION_END, (intptr_t)s->o.max_per_ip, NULL},
        {MHD_OPTION_END, 0, NULL}, /* replaced below */
        {MHD_OPTION_END, 0, NULL},
        {MHD_OPTION_END, 0, NULL},
        {MHD_OPTION_END, 0, NULL},
    };
    size_t k = 0;
    while (opts[k].option != MHD_OPTION_END) k++;
    if (s->o.threads > 1) opts[k++] = (struct MHD_OptionItem){MHD_OPTION_THREAD_POOL_SIZE, s->o.threads, NULL};
    if (tls) {
        opts[k++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_KEY, 0, (void *)o->tls_key_pem};
        opts[k++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_CERT, 0, (void *)o->tls_cert_pem};
    }
    /* one daemon per address, every one on the port the first bound (the
     * same when --port is given; the first's when it is 0) */
    int port = o->port, frc = 0;
    for (int i = 0; !frc && host_at(s->o.host, i, h, sizeof h); i++) {
        if (i > 0 && (frc = resolve(h, port, &ss, &sl, err))) break;
        unsigned fl = flags | (ss.ss_family == AF_INET6 ? MHD_USE_IPv6 : 0);
        s->d[i] = MHD_start_daemon(fl, 0, NULL, NULL, on_request, s, MHD_OPTION_ARRAY, opts, MHD_OPTION_END);
        if (!s->d[i]) {
            frc = mu_fail(err, MU_E_IO, "http: cannot listen on %s port %d (in use, or bad TLS files)", h, port);
            break;
        }
        s->nd = i + 1;
        if (i == 0) {
            const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->d[0], MHD_DAEMON_INFO_BIND_PORT);
            if (di) port = di->port;
        }
    }
    if (frc) { /* err says which address failed */
        for (int i = 0; i < s->nd; i++) MHD_stop_daemon(s->d[i]);
        server_free(s);
        return frc;
    }
    if (pthread_create(&s->sweeper, NULL, sweeper_main, s)) {
        for (int i = 0; i < s->nd; i++) MHD_stop_daemon(s->d[i]);
        server_free(s);
        return mu_fail(err, MU_E_NOMEM, "http: cannot start the connection sweeper thread");
    }
    s->sweeper_on = true;
    atomic_store(&s->port, port);
    *out = s;
    return 0;
}

int mu_http_server_port(const mu_http_server *s) { return atomic_load(&((mu_http_server *)s)->port); }

void mu_http_server_limits(const mu_http_server *s, mu_http_opts *eff) { *eff = s->o; }

void mu_http_server_stop(mu_http_server *s) {
    if (!s) return;
    /* no request suspends from here; resume every suspended one (MHD must
     * not be stopped with suspended connections): their handlers end them */
    atomic_store(&s->stopping, true);
    pthread_mutex_lock(&s->cmu);
    pthread_cond_broadcast(&s->ccv);
    pthread_mutex_unlock(&s->cmu);
    if (s->sweeper_on) pthread_join(s->sweeper, NULL);
    pthread_mutex_lock(&s->cmu);
    for (hconn *c = s->conns; c; c = c->next) {
        mu_http_req *r = c->req;
        if (!r) continue;
        pthread_mutex_lock(&r->wmu);
        r->hangup = true;
        if (r->suspended) {
            r->suspended = false;
            MHD_resume_connection(r->conn);
        }
        pthread_mutex_unlock(&r->wmu);
    }
    pthread_mutex_unlock(&s->cmu);
    for (int i = 0; i < s->nd; i++) MHD_stop_daemon(s->d[i]);
    server_free(s);
}

void mu_http_server_counters(mu_http_server *s, mu_http_counters *c) {
    pthread_mutex_lock(&s->mu);
    *c = s->c;
    pthread_mutex_unlock(&s->mu);
    pthread_mutex_lock(&s->cmu);
    c->conns_open = (uint64_t)s->n_open;
    c->conns_refused = s->n_refused;
    c->closed_head_timeout = s->n_head_closed;
    c->closed_body_timeout = s->n_body_closed;
    pthread_mutex_unlock(&s->cmu);
}
