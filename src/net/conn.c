/* conn.c: TCP and mutual-TLS 1.3 connections, frame I/O, pinning, the local
 * CA (conn.h).
 * Owns: sockets, SSL objects, PEM files of the CA and issued certificates.
 * Does not own: protocol meaning.
 * Design: one vtable, two implementations; timeouts are the socket's
 * SO_RCVTIMEO/SO_SNDTIMEO, so a TLS read times out exactly as a TCP read
 * does; the peer's leaf certificate is judged by its fingerprint inside
 * the verify callback, never by a chain to some CA. */
#include "conn.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "lanewire.h"

void lane_hex(const uint8_t p[32], char out[65]) {
    for (int i = 0; i < 32; i++) snprintf(out + 2 * i, 3, "%02x", p[i]);
}

bool lane_unhex(const char *s, uint8_t out[32]) {
    if (!s || strlen(s) != 64) return false;
    for (int i = 0; i < 32; i++) {
        unsigned v;
        char b[3] = {s[2 * i], s[2 * i + 1], 0};
        if (!isxdigit((unsigned char)b[0]) || !isxdigit((unsigned char)b[1]) || sscanf(b, "%2x", &v) != 1) return false;
        out[i] = (uint8_t)v;
    }
    return true;
}

/* ---- generic ------------------------------------------------------------------ */

int conn_read(conn *c, void *p, size_t n, mu_err *err) { return c->vt->read(c, p, n, err); }
int conn_write(conn *c, const void *p, size_t n, mu_err *err) { return c->vt->write(c, p, n, err); }
void conn_close(conn *c) {
    if (c) c->vt->close(c);
}

void conn_timeouts(conn *c, int read_ms, int write_ms) {
    struct timeval r = {read_ms / 1000, (read_ms % 1000) * 1000}, w = {write_ms / 1000, (write_ms % 1000) * 1000};
    setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &r, sizeof r);
    setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &w, sizeof w);
}

int conn_split_addr(const char *addr, char *host, size_t cap, int *port, mu_err *err) {
    const char *colon = strrchr(addr, ':');
    if (!colon || colon == addr) return mu_fail(err, MU_E_ARG, "lane: address is not HOST:PORT: %s", addr);
    const char *h = addr;
    size_t hl = (size_t)(colon - addr);
    if (h[0] == '[' && hl >= 2 && h[hl - 1] == ']') h++, hl -= 2;
    if (hl + 1 > cap) return mu_fail(err, MU_E_ARG, "lane: host too long: %s", addr);
    char *end;
    long p = strtol(colon + 1, &end, 10);
    if (*end || !colon[1] || p < 0 || p > 65535) return mu_fail(err, MU_E_ARG, "lane: bad port in %s", addr);
    memcpy(host, h, hl);
    host[hl] = 0;
    *port = (int)p;
    return 0;
}

int conn_listen(const char *host, int port, int *fd_out, int *bound, mu_err *err) {
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *res;
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    int g = getaddrinfo(host, ps, &hints, &res);
    if (g) return mu_fail(err, MU_E_IO, "lane: cannot resolve %s: %s", host, gai_strerror(g));
    int fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
    if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (fd < 0 || bind(fd, res->ai_addr, res->ai_addrlen) || listen(fd, 64)) {
        int e = errno;
        if (fd >= 0) close(fd);
        freeaddrinfo(res);
        return mu_fail(err, MU_E_IO, "lane: cannot listen on %s:%d: %s", host, port, strerror(e));
    }
    freeaddrinfo(res);
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    getsockname(fd, (struct sockaddr *)&ss, &sl);
    *bound = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port : ((struct sockaddr_in *)&ss)->sin_port);
    *fd_out = fd;
    return 0;
}

int conn_tcp_connect(const char *host, int port, int timeout_ms, int *fd_out, mu_err *err) {
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res, *a;
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    int g = getaddrinfo(host, ps, &hints, &res);
    if (g) return mu_fail(err, MU_E_IO, "lane: io: cannot resolve %s: %s", host, gai_strerror(g));
    int fd = -1, e = 0;
    for (a = res; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0) continue;
        if (connect(fd, a->ai_addr, a->ai_addrlen) && errno == EINPROGRESS) {
            struct pollfd pf = {fd, POLLOUT, 0};
            int pr = poll(&pf, 1, timeout_ms);
            socklen_t l = sizeof e;
            if (pr <= 0) e = pr ? errno : ETIMEDOUT;
            else getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &l);
        } else {
            e = errno;
            if (!e || e == EINPROGRESS) e = 0;
        }
        if (e) {
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    if (fd < 0) return mu_fail(err, MU_E_IO, "lane: io: cannot connect to %s:%d: %s", host, port, strerror(e ? e : ECONNREFUSED));
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    *fd_out = fd;
    return 0;
}

static int io_fail(mu_err *err, const char *what) {
    if (errno == EAGAIN || errno == EWOULDBLOCK) return mu_fail(err, MU_E_IO, "lane: timeout: %s timed out", what);
    return mu_fail(err, MU_E_IO, "lane: io: %s failed: %s", what, errno ? strerror(errno) : "the peer closed the connection");
}

static int tcp_read(conn *c, void *p, size_t n, mu_err *err) {
    uint8_t *q = p;
    while (n) {
        ssize_t r = recv(c->fd, q, n, 0);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            if (!r) errno = 0;
            return io_fail(err, "read");
        }
        q += r, n -= (size_t)r;
    }
    return 0;
}

static int tcp_write(conn *c, const void *p, size_t n, mu_err *err) {
    const uint8_t *q = p;
    while (n) {
        ssize_t r = send(c->fd, q, n, MSG_NOSIGNAL);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return io_fail(err, "write");
        q += r, n -= (size_t)r;
    }
    return 0;
}

static void tcp_close(conn *c) {
    close(c->fd);
    free(c);
}

static const conn_vt tcp_vt = {tcp_read, tcp_write, tcp_close};

int conn_tcp_wrap(int fd, conn **out, mu_err *err) {
    conn *c = calloc(1, sizeof *c);
    if (!c) {
        close(fd);
        return mu_fail(err, MU_E_NOMEM, "lane: out of memory");
    }
    c->vt = &tcp_vt;
    c->fd = fd;
    *out = c;
    return 0;
}

/* ---- frames -------------------------------------------------------------------- */

int conn_read_frame(conn *c, uint8_t **buf, size_t *cap, unsigned *type, const uint8_t **p, uint32_t *len,
                    mu_err *err) {
    uint8_t h[LANE_HDR];
    int rc = conn_read(c, h, sizeof h, err);
    if (!rc) rc = lane_frame_parse(h, type, len, err);
    if (rc) return rc;
    if (*len > *cap) {
        size_t nc = *len;
        uint8_t *nb = realloc(*buf, nc ? nc : 1);
        if (!nb) return mu_fail(err, MU_E_NOMEM, "lane: out of memory for a frame of %u bytes", *len);
        *buf = nb;
        *cap = nc;
    }
    if (*len && (rc = conn_read(c, *buf, *len, err))) return rc;
    *p = *buf;
    return 0;
}

int conn_write_frame2(conn *c, unsigned type, const void *a, size_t an, const void *b, size_t bn, mu_err *err) {
    if (an + bn > UINT32_MAX) return mu_fail(err, MU_E_ARG, "lane: frame too large");
    uint8_t h[LANE_HDR];
    lane_frame_header(h, type, (uint32_t)(an + bn));
    int rc = conn_write(c, h, sizeof h, err);
    if (!rc && an) rc = conn_write(c, a, an, err);
    if (!rc && bn) rc = conn_write(c, b, bn, err);
    return rc;
}

int conn_write_frame(conn *c, unsigned type, const void *p, size_t n, mu_err *err) {
    return conn_write_frame2(c, type, p, n, NULL, 0, err);
}

/* ---- TLS ------------------------------------------------------------------------ */

struct tls_ctx {
    SSL_CTX *ctx;
    bool server;
};

typedef struct {
    conn c;
    SSL *ssl;
} tls_conn;

typedef struct {
    tls_pin_fn pin;
    void *user;
    uint8_t fp[32];
    bool seen, ok;
} pin_state;

static int pin_index = -1;
static pthread_once_t pin_once = PTHREAD_ONCE_INIT;
static void pin_index_init(void) { pin_index = SSL_get_ex_new_index(0, NULL, NULL, NULL, NULL); }

static int verify_cb(int preverify, X509_STORE_CTX *x) {
    (void)preverify;
    SSL *ssl = X509_STORE_CTX_get_ex_data(x, SSL_get_ex_data_X509_STORE_CTX_idx());
    pin_state *ps = ssl ? SSL_get_ex_data(ssl, pin_index) : NULL;
    if (!ps) return 0;
    if (X509_STORE_CTX_get_error_depth(x) != 0) return 1; /* only the leaf counts */
    X509 *cert = X509_STORE_CTX_get_current_cert(x);
    unsigned len = 32;
    if (!cert || !X509_digest(cert, EVP_sha256(), ps->fp, &len)) return 0;
    ps->seen = true;
    ps->ok = ps->pin(ps->user, ps->fp);
    return ps->ok ? 1 : 0;
}

static int ssl_err(mu_err *err, const char *what) {
    unsigned long e = ERR_get_error();
    char b[160] = "";
    if (e) ERR_error_string_n(e, b, sizeof b);
    ERR_clear_error();
    if (strstr(b, "alert")) /* the peer refused us (in TLS 1.3 a refused client learns it at its first read) */
        return mu_fail(err, MU_E_STATE, "lane: auth: the peer refused the TLS session: %s", b);
    return mu_fail(err, MU_E_IO, "lane: %s%s%s", what, *b ? ": " : "", b);
}

int tls_ctx_new(bool server, const char *cert, const char *key, tls_ctx **out, mu_err *err) {
    pthread_once(&pin_once, pin_index_init);
    SSL_CTX *ctx = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method());
    if (!ctx) return ssl_err(err, "cannot create a TLS context");
    SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION);
    SSL_CTX_set_max_proto_version(ctx, TLS1_3_VERSION);
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
    SSL_CTX_set_num_tickets(ctx, 0);
    if (SSL_CTX_use_certificate_chain_file(ctx, cert) != 1) {
        SSL_CTX_free(ctx);
        return ssl_err(err, "cannot load the certificate");
    }
    if (SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1 || SSL_CTX_check_private_key(ctx) != 1) {
        SSL_CTX_free(ctx);
        return ssl_err(err, "cannot load the private key");
    }
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, verify_cb);
    tls_ctx *t = calloc(1, sizeof *t);
    if (!t) {
        SSL_CTX_free(ctx);
        return mu_fail(err, MU_E_NOMEM, "lane: out of memory");
    }
    t->ctx = ctx;
    t->server = server;
    *out = t;
    return 0;
}

void tls_ctx_free(tls_ctx *t) {
    if (!t) return;
    SSL_CTX_free(t->ctx);
    free(t);
}

static int tls_io_fail(tls_conn *t, int r, const char *what, mu_err *err) {
    int e = SSL_get_error(t->ssl, r);
    if (e == SSL_ERROR_ZERO_RETURN) return mu_fail(err, MU_E_IO, "lane: io: the peer closed the connection during %s", what);
    if (e == SSL_ERROR_SYSCALL || e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
        ERR_clear_error();
        if (!errno) return mu_fail(err, MU_E_IO, "lane: io: the peer closed the connection during %s", what);
        return io_fail(err, what);
    }
    return ssl_err(err, "io: TLS error");
}

static int tls_read(conn *c, void *p, size_t n, mu_err *err) {
    tls_conn *t = (tls_conn *)c;
    uint8_t *q = p;
    while (n) {
        size_t got = 0;
        errno = 0;
        int r = SSL_read_ex(t->ssl, q, n, &got);
        if (r <= 0) {
            if (errno == EINTR) continue;
            return tls_io_fail(t, r, "read", err);
        }
        q += got, n -= got;
    }
    return 0;
}

static int tls_write(conn *c, const void *p, size_t n, mu_err *err) {
    tls_conn *t = (tls_conn *)c;
    const uint8_t *q = p;
    while (n) {
        size_t put = 0;
        errno = 0;
        int r = SSL_write_ex(t->ssl, q, n, &put);
        if (r <= 0) {
            if (errno == EINTR) continue;
            return tls_io_fail(t, r, "write", err);
        }
        q += put, n -= put;
    }
    return 0;
}

static void tls_close(conn *c) {
    tls_conn *t = (tls_conn *)c;
    SSL_shutdown(t->ssl); /* best effort close_notify; not waited for */
    SSL_free(t->ssl);
    close(c->fd);
    free(t);
}

static const conn_vt tls_vt = {tls_read, tls_write, tls_close};

static int tls_handshake(tls_ctx *tc, int fd, tls_pin_fn pin, void *user, int timeout_ms, conn **out, mu_err *err) {
    tls_conn *t = calloc(1, sizeof *t);
    SSL *ssl = t ? SSL_new(tc->ctx) : NULL;
    if (!ssl) {
        free(t);
        close(fd);
        return mu_fail(err, MU_E_NOMEM, "lane: out of memory");
    }
    signal(SIGPIPE, SIG_IGN); /* SSL writes use write(2) */
    t->c.vt = &tls_vt;
    t->c.fd = fd;
    t->ssl = ssl;
    conn_timeouts(&t->c, timeout_ms, timeout_ms);
    pin_state ps = {pin, user, {0}, false, false};
    SSL_set_ex_data(ssl, pin_index, &ps);
    SSL_set_fd(ssl, fd);
    errno = 0;
    int r = tc->server ? SSL_accept(ssl) : SSL_connect(ssl);
    SSL_set_ex_data(ssl, pin_index, NULL);
    int rc = 0;
    if (r != 1) {
        char fp[65];
        lane_hex(ps.fp, fp);
        if (ps.seen && !ps.ok) rc = mu_fail(err, MU_E_STATE, "lane: auth: the peer's certificate %.16s... is not pinned here", fp);
        else if (errno == EAGAIN || errno == EWOULDBLOCK) rc = mu_fail(err, MU_E_IO, "lane: timeout: the TLS handshake timed out");
        else rc = ssl_err(err, "auth: TLS 1.3 handshake failed");
    } else if (!ps.seen || !ps.ok) {
        rc = mu_fail(err, MU_E_STATE, "lane: auth: the peer presented no pinned certificate");
    }
    if (!rc && !tc->server) {
        /* TLS 1.3: a server refusing our certificate says so after the
         * client's handshake completed; read nothing yet, the first read
         * reports it */
    }
    if (rc) {
        SSL_free(ssl);
        close(fd);
        free(t);
        return rc;
    }
    memcpy(t->c.peer_fp, ps.fp, 32);
    t->c.has_peer = true;
    *out = &t->c;
    return 0;
}

int tls_accept(tls_ctx *t, int fd, tls_pin_fn pin, void *user, int timeout_ms, conn **out, mu_err *err) {
    return tls_handshake(t, fd, pin, user, timeout_ms, out, err);
}
int tls_connect(tls_ctx *t, int fd, tls_pin_fn pin, void *user, int timeout_ms, conn **out, mu_err *err) {
    return tls_handshake(t, fd, pin, user, timeout_ms, out, err);
}

int tls_cert_fp(const char *cert_pem, uint8_t fp[32], mu_err *err) {
    FILE *f = fopen(cert_pem, "r");
    if (!f) return mu_fail(err, MU_E_IO, "lane: cannot open %s: %s", cert_pem, strerror(errno));
    X509 *x = PEM_read_X509(f, NULL, NULL, NULL);
    fclose(f);
    unsigned len = 32;
    int ok = x && X509_digest(x, EVP_sha256(), fp, &len);
    X509_free(x);
    if (!ok) return ssl_err(err, "cannot read the certificate");
    return 0;
}

/* ---- the local CA ----------------------------------------------------------------- */

static EVP_PKEY *new_key(void) { return EVP_EC_gen("P-256"); }

static int write_pem(const char *path, int mode, EVP_PKEY *key, X509 *x, mu_err *err) {
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
    if (fd < 0) return mu_fail(err, errno == EEXIST ? MU_E_STATE : MU_E_IO, "tls: cannot create %s: %s", path, strerror(errno));
    FILE *f = fdopen(fd, "w");
    int ok = f && (key ? PEM_write_PrivateKey(f, key, NULL, NULL, 0, NULL, NULL) : PEM_write_X509(f, x));
    if (f) ok = !fflush(f) && !fsync(fd) && ok, fclose(f);
    else close(fd);
    if (!ok) {
        unlink(path);
        return mu_fail(err, MU_E_IO, "tls: cannot write %s", path);
    }
    return 0;
}

static bool exists(const char *p) {
    struct stat st;
    return !stat(p, &st);
}

static int add_ext(X509 *cert, X509 *issuer, int nid, const char *value) {
    X509V3_CTX ctx;
    X509V3_set_ctx_nodb(&ctx);
    X509V3_set_ctx(&ctx, issuer, cert, NULL, NULL, 0);
    X509_EXTENSION *ex = X509V3_EXT_conf_nid(NULL, &ctx, nid, value);
    if (!ex) return 0;
    int r = X509_add_ext(cert, ex, -1);
    X509_EXTENSION_free(ex);
    return r;
}

static X509 *new_cert(EVP_PKEY *key, const char *cn, long days) {
    X509 *x = X509_new();
    if (!x) return NULL;
    X509_set_version(x, 2);
    BIGNUM *bn = BN_new();
    BN_rand(bn, 120, BN_RAND_TOP_ANY, BN_RAND_BOTTOM_ANY);
    BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(x));
    BN_free(bn);
    X509_gmtime_adj(X509_getm_notBefore(x), -3600);
    X509_gmtime_adj(X509_getm_notAfter(x), days * 86400L);
    X509_set_pubkey(x, key);
    X509_NAME *nm = X509_get_subject_name(x);
    X509_NAME_add_entry_by_txt(nm, "CN", MBSTRING_ASC, (const unsigned char *)cn, -1, -1, 0);
    return x;
}

int tls_ca_init(const char *dir, mu_err *err) {
    char kp[4096], cp[4096];
    snprintf(kp, sizeof kp, "%s/ca.key", dir);
    snprintf(cp, sizeof cp, "%s/ca.pem", dir);
    if (exists(kp) || exists(cp)) return mu_fail(err, MU_E_STATE, "tls: a CA already exists in %s (never overwritten)", dir);
    if (mkdir(dir, 0700) && errno != EEXIST) return mu_fail(err, MU_E_IO, "tls: cannot create %s: %s", dir, strerror(errno));
    EVP_PKEY *key = new_key();
    X509 *x = key ? new_cert(key, "muser local CA", 3650) : NULL;
    int rc = 0;
    if (!x) rc = ssl_err(err, "cannot make the CA key");
    if (!rc) {
        X509_set_issuer_name(x, X509_get_subject_name(x));
        if (!add_ext(x, x, NID_basic_constraints, "critical,CA:TRUE") ||
            !add_ext(x, x, NID_key_usage, "critical,keyCertSign,cRLSign") ||
            !add_ext(x, x, NID_subject_key_identifier, "hash") || !X509_sign(x, key, EVP_sha256()))
            rc = ssl_err(err, "cannot sign the CA certificate");
    }
    if (!rc && !(rc = write_pem(kp, 0600, key, NULL, err)) && (rc = write_pem(cp, 0644, NULL, x, err))) unlink(kp);
    X509_free(x);
    EVP_PKEY_free(key);
    return rc;
}

int tls_issue(const char *dir, const char *name, const char *san, mu_err *err) {
    for (const char *q = name; *q; q++)
        if (!isalnum((unsigned char)*q) && *q != '-' && *q != '_' && *q != '.')
            return mu_fail(err, MU_E_ARG, "tls: name may hold letters, digits, '-', '_', '.': %s", name);
    if (!*name || !strcmp(name, "ca") || name[0] == '.') return mu_fail(err, MU_E_ARG, "tls: bad name: %s", name);
    bool san_ok = *san && strlen(san) <= 253;
    for (const char *q = san; *q && san_ok; q++) san_ok = isalnum((unsigned char)*q) || strchr(".-:", *q);
    if (!san_ok) return mu_fail(err, MU_E_ARG, "tls: --san must be a host name or an IP address: %s", san);
    char kp[4096], cp[4096], cak[4096], cac[4096];
    snprintf(kp, sizeof kp, "%s/%s.key", dir, name);
    snprintf(cp, sizeof cp, "%s/%s.pem", dir, name);
    snprintf(cak, sizeof cak, "%s/ca.key", dir);
    snprintf(cac, sizeof cac, "%s/ca.pem", dir);
    if (exists(kp) || exists(cp)) return mu_fail(err, MU_E_STATE, "tls: %s already exists (never overwritten)", cp);
    FILE *f = fopen(cak, "r");
    EVP_PKEY *cakey = f ? PEM_read_PrivateKey(f, NULL, NULL, NULL) : NULL;
    if (f) fclose(f);
    f = fopen(cac, "r");
    X509 *ca = f ? PEM_read_X509(f, NULL, NULL, NULL) : NULL;
    if (f) fclose(f);
    int rc = 0;
    EVP_PKEY *key = NULL;
    X509 *x = NULL;
    if (!cakey || !ca) rc = mu_fail(err, MU_E_IO, "tls: no CA in %s (run muser tls init first)", dir);
    if (!rc && (!(key = new_key()) || !(x = new_cert(key, name, 825)))) rc = ssl_err(err, "cannot make the key");
    if (!rc) {
        unsigned char ip[16];
        char sanv[300];
        bool is_ip = inet_pton(AF_INET, san, ip) == 1 || inet_pton(AF_INET6, san, ip) == 1;
        snprintf(sanv, sizeof sanv, "%s:%s", is_ip ? "IP" : "DNS", san);
        X509_set_issuer_name(x, X509_get_subject_name(ca));
        if (!add_ext(x, ca, NID_basic_constraints, "critical,CA:FALSE") ||
            !add_ext(x, ca, NID_key_usage, "critical,digitalSignature") ||
            !add_ext(x, ca, NID_ext_key_usage, "serverAuth,clientAuth") || !add_ext(x, ca, NID_subject_alt_name, sanv) ||
            !X509_sign(x, cakey, EVP_sha256()))
            rc = ssl_err(err, "cannot sign the certificate");
    }
    if (!rc && !(rc = write_pem(kp, 0600, key, NULL, err)) && (rc = write_pem(cp, 0644, NULL, x, err))) unlink(kp);
    X509_free(x);
    X509_free(ca);
    EVP_PKEY_free(key);
    EVP_PKEY_free(cakey);
    return rc;
}
