/* session.h: dashboard login sessions (docs/dashboard.md, "Login").
 * Owns: a fixed table of sessions, each a random id (kept only as its
 * SHA-256) with a random CSRF token and an expiry; the parser of the Cookie
 * header. Does not own: the HTTP exchange (server.c sets and reads the
 * cookie, dash.c has the routes). */
#ifndef MU_HTTP_SESSION_H
#define MU_HTTP_SESSION_H

#include <stdbool.h>
#include <stddef.h>

#include "../base/err.h"

#define MU_SESS_MAX 64          /* live sessions; a new one past this replaces the oldest */
#define MU_SESS_TOKEN_LEN 64    /* ids and CSRF tokens: 32 random bytes as lowercase hex */
#define MU_SESS_TTL_S 43200     /* a session lives 12 hours from its login */

typedef struct mu_http_sessions mu_http_sessions;

int mu_http_sessions_new(mu_http_sessions **out, mu_err *err);
/* Wipes every token. NULL is fine. */
void mu_http_sessions_free(mu_http_sessions *s);
/* A new session at time now_s (monotonic seconds): id and csrf receive
 * MU_SESS_TOKEN_LEN hex digits and a NUL. MU_E_IO when the random
 * generator fails. Thread-safe. */
int mu_http_session_create(mu_http_sessions *s, double now_s, char id[MU_SESS_TOKEN_LEN + 1],
                           char csrf[MU_SESS_TOKEN_LEN + 1], mu_err *err);
/* True when id (n bytes, untrusted) names a live session; csrf (may be
 * NULL) then receives its token. Constant time in the id's contents. */
bool mu_http_session_find(mu_http_sessions *s, double now_s, const char *id, size_t n,
                          char csrf[MU_SESS_TOKEN_LEN + 1]);
/* Ends the session id names, if any. */
void mu_http_session_drop(mu_http_sessions *s, const char *id, size_t n);
/* Live sessions now (for tests and /snapshot). */
int mu_http_session_count(mu_http_sessions *s, double now_s);

/* Wrong keys per client address: after MU_THROTTLE_FAILS wrong keys
 * (a login, a bearer key) within MU_THROTTLE_WINDOW_S, the address is
 * refused (429) for MU_THROTTLE_BLOCK_S, right key or not. Addresses are
 * 16 bytes: an IPv4 address, or the /64 prefix of an IPv6 one. A fixed
 * table; when it is full the entry whose window began first gives way. */
#define MU_THROTTLE_FAILS 10
#define MU_THROTTLE_WINDOW_S 600
#define MU_THROTTLE_BLOCK_S 60
#define MU_THROTTLE_ADDRS 256
typedef struct mu_http_throttle mu_http_throttle;
int mu_http_throttle_new(mu_http_throttle **out, mu_err *err);
void mu_http_throttle_free(mu_http_throttle *t);
/* 0 when addr may try a key now, else the seconds until it may (>= 1). */
int mu_http_throttle_wait(mu_http_throttle *t, const unsigned char addr[16], double now_s);
/* A wrong key from addr. */
void mu_http_throttle_fail(mu_http_throttle *t, const unsigned char addr[16], double now_s);

/* The value of cookie `name` in a Cookie header (RFC 6265: pairs
 * name=value separated by ";" and optional spaces; a value may be
 * double-quoted). *val points into hdr. False when absent or hdr is NULL;
 * the first pair of that name wins. */
bool mu_http_cookie_get(const char *hdr, const char *name, const char **val, size_t *n);

#endif
