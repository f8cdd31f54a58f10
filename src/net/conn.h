/* conn.h: byte-stream connections behind a small vtable (plain TCP for unit
 * tests, mutual TLS 1.3 for the lane), listeners, read timeouts, frame I/O,
 * certificate pinning, and the local CA (docs/lane.md "Security").
 * Owns: sockets, OpenSSL contexts, certificates and keys on disk.
 * Does not own: what the frames mean (lanewire.c, src/gen/lane_decoder.c).
 * Design: a peer is authenticated by the SHA-256 fingerprint of its leaf
 * certificate, checked inside the handshake (the verify callback), so an
 * unpinned certificate never completes a handshake; the CA only issues. */
#ifndef MU_NET_CONN_H
#define MU_NET_CONN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../base/err.h"

typedef struct conn conn;
typedef struct {
    /* 0 after exactly n bytes; MU_E_IO (closed, reset, timed out) otherwise */
    int (*read)(conn *c, void *p, size_t n, mu_err *err);
    int (*write)(conn *c, const void *p, size_t n, mu_err *err);
    void (*close)(conn *c);
} conn_vt;
struct conn {
    const conn_vt *vt;
    int fd;
    uint8_t peer_fp[32]; /* TLS: the peer's leaf certificate fingerprint */
    bool has_peer;
};

int conn_read(conn *c, void *p, size_t n, mu_err *err);
int conn_write(conn *c, const void *p, size_t n, mu_err *err);
/* Closes and frees (NULL is fine). */
void conn_close(conn *c);
/* Read and write timeouts of the socket (ms > 0). */
void conn_timeouts(conn *c, int read_ms, int write_ms);

/* "HOST:PORT" (HOST may be [v6]) into host and port. */
int conn_split_addr(const char *addr, char *host, size_t cap, int *port, mu_err *err);
/* A listening socket (port 0: any free; *bound gets the port). */
int conn_listen(const char *host, int port, int *fd, int *bound, mu_err *err);
int conn_tcp_connect(const char *host, int port, int timeout_ms, int *fd, mu_err *err);
/* Wraps a connected fd as plain TCP. */
int conn_tcp_wrap(int fd, conn **out, mu_err *err);

/* ---- frames ------------------------------------------------------------------ */
/* Reads one frame (lanewire.h header, its limits) into *buf (grown, owned
 * by the caller; free it once); *p points into it. */
int conn_read_frame(conn *c, uint8_t **buf, size_t *cap, unsigned *type, const uint8_t **p, uint32_t *len,
                    mu_err *err);
int conn_write_frame(conn *c, unsigned type, const void *p, size_t n, mu_err *err);
/* Writes a frame from two parts (a header and rows) without copying. */
int conn_write_frame2(conn *c, unsigned type, const void *a, size_t an, const void *b, size_t bn, mu_err *err);

/* ---- TLS ------------------------------------------------------------------------ */
typedef struct tls_ctx tls_ctx;
/* pin(user, fp) decides whether a peer certificate is accepted; called in
 * the handshake. */
typedef bool (*tls_pin_fn)(void *user, const uint8_t fp[32]);
/* A TLS 1.3-only context with our certificate and key (PEM files); server
 * contexts require a client certificate. */
int tls_ctx_new(bool server, const char *cert_pem, const char *key_pem, tls_ctx **out, mu_err *err);
void tls_ctx_free(tls_ctx *t);
/* Handshakes over fd (owned by the connection afterwards, closed on
 * failure): the peer's certificate must pass pin. */
int tls_accept(tls_ctx *t, int fd, tls_pin_fn pin, void *user, int timeout_ms, conn **out, mu_err *err);
int tls_connect(tls_ctx *t, int fd, tls_pin_fn pin, void *user, int timeout_ms, conn **out, mu_err *err);
/* The fingerprint of the certificate in a PEM file. */
int tls_cert_fp(const char *cert_pem, uint8_t fp[32], mu_err *err);

/* ---- the local CA ------------------------------------------------------------------ */
/* dir/ca.pem + dir/ca.key (EC P-256, 10 years); MU_E_STATE when either exists. */
int tls_ca_init(const char *dir, mu_err *err);
/* dir/NAME.pem + dir/NAME.key signed by the CA, with one subjectAltName
 * (an IP address when san parses as one, else a DNS name); never
 * overwrites (MU_E_STATE). */
int tls_issue(const char *dir, const char *name, const char *san, mu_err *err);

/* Hex of 32 bytes into out[65]; parse back (false on bad text). */
void lane_hex(const uint8_t p[32], char out[65]);
bool lane_unhex(const char *s, uint8_t out[32]);

#endif
