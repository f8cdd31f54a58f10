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

/* The value of cookie `name` in a Cookie header (RFC 6265: pairs
 * name=value separated by ";" and optional spaces; a value may be
 * double-quoted). *val points into hdr. False when absent or hdr is NULL;
 * the first pair of that name wins. */
bool mu_http_cookie_get(const char *hdr, const char *name, const char **val, size_t *n);

#endif
