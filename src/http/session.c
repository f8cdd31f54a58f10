/* session.c: dashboard login sessions (session.h).
 * Owns: the session table, the wrong-key throttle and the Cookie header
 * parser.
 * Does not own: when a session is needed (server.c's auth check) or the
 * login routes (dash.c).
 * Design: ids and CSRF tokens are 32 bytes from OpenSSL's RAND_bytes. The
 * table keeps the SHA-256 of each id, never the id, and a lookup hashes the
 * presented value and compares it with every slot through CRYPTO_memcmp, so
 * neither a memory dump nor the time of a lookup tells an id. A fixed table
 * bounds memory: the 65th login replaces the session that expires first.
 * Tokens live in fixed buffers and are wiped when their session ends.
 * Wrong keys are counted per client address in another fixed table (the
 * throttle): too many in a window and the address waits, whatever it sends. */
#include "session.h"

#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <openssl/sha.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    bool live;
    double expires;                       /* monotonic seconds */
    unsigned char id_hash[SHA256_DIGEST_LENGTH];
    char csrf[MU_SESS_TOKEN_LEN + 1];
} sess;

struct mu_http_sessions {
    pthread_mutex_t mu;
    sess t[MU_SESS_MAX];
};

int mu_http_sessions_new(mu_http_sessions **out, mu_err *err) {
    mu_http_sessions *s = calloc(1, sizeof *s);
    if (!s) return mu_fail(err, MU_E_NOMEM, "http: out of memory");
    pthread_mutex_init(&s->mu, NULL);
    *out = s;
    return 0;
}

void mu_http_sessions_free(mu_http_sessions *s) {
    if (!s) return;
    pthread_mutex_destroy(&s->mu);
    OPENSSL_cleanse(s, sizeof *s);
    free(s);
}

static void sess_end(sess *e) { OPENSSL_cleanse(e, sizeof *e); }

static int random_hex(char out[MU_SESS_TOKEN_LEN + 1]) {
    unsigned char b[MU_SESS_TOKEN_LEN / 2];
    if (RAND_bytes(b, sizeof b) != 1) return -1;
    static const char hx[] = "0123456789abcdef";
    for (size_t i = 0; i < sizeof b; i++) {
        out[2 * i] = hx[b[i] >> 4];
        out[2 * i + 1] = hx[b[i] & 15];
    }
    out[MU_SESS_TOKEN_LEN] = 0;
    OPENSSL_cleanse(b, sizeof b);
    return 0;
}

int mu_http_session_create(mu_http_sessions *s, double now_s, char id[MU_SESS_TOKEN_LEN + 1],
                           char csrf[MU_SESS_TOKEN_LEN + 1], mu_err *err) {
    if (random_hex(id) || random_hex(csrf)) {
        OPENSSL_cleanse(id, MU_SESS_TOKEN_LEN + 1);
        return mu_fail(err, MU_E_IO, "http: the random generator failed: cannot make a session");
    }
    pthread_mutex_lock(&s->mu);
    /* a free or expired slot, else the one that expires first */
    int at = 0;
    for (int i = 0; i < MU_SESS_MAX; i++) {
        sess *e = &s->t[i];
        if (!e->live || e->expires <= now_s) {
            at = i;
            break;
        }
        if (e->expires < s->t[at].expires) at = i;
    }
    sess *e = &s->t[at];
    sess_end(e);
    e->live = true;
    e->expires = now_s + MU_SESS_TTL_S;
    SHA256((const unsigned char *)id, MU_SESS_TOKEN_LEN, e->id_hash);
    memcpy(e->csrf, csrf, MU_SESS_TOKEN_LEN + 1);
    pthread_mutex_unlock(&s->mu);
    return 0;
}

/* The slot of a live session whose id hashes to h, or -1; every slot is
 * compared, whatever matches. Called with s->mu held. */
static int sess_lookup(mu_http_sessions *s, double now_s, const unsigned char h[SHA256_DIGEST_LENGTH]) {
    int found = -1;
    for (int i = 0; i < MU_SESS_MAX; i++) {
        sess *e = &s->t[i];
        bool eq = CRYPTO_memcmp(e->id_hash, h, SHA256_DIGEST_LENGTH) == 0;
        if (eq && e->live && e->expires > now_s && found < 0) found = i;
    }
    return found;
}

bool mu_http_session_find(mu_http_sessions *s, double now_s, const char *id, size_t n,
                          char csrf[MU_SESS_TOKEN_LEN + 1]) {
    if (!s || !id || n != MU_SESS_TOKEN_LEN) return false;
    unsigned char h[SHA256_DIGEST_LENGTH];
    SHA256((const unsigned char *)id, n, h);
    pthread_mutex_lock(&s->mu);
    int i = sess_lookup(s, now_s, h);
    if (i >= 0 && csrf) memcpy(csrf, s->t[i].csrf, MU_SESS_TOKEN_LEN + 1);
    pthread_mutex_unlock(&s->mu);
    return i >= 0;
}

void mu_http_session_drop(mu_http_sessions *s, const char *id, size_t n) {
    if (!s || !id || n != MU_SESS_TOKEN_LEN) return;
    unsigned char h[SHA256_DIGEST_LENGTH];
    SHA256((const unsigned char *)id, n, h);
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < MU_SESS_MAX; i++)
        if (s->t[i].live && !CRYPTO_memcmp(s->t[i].id_hash, h, sizeof h)) sess_end(&s->t[i]);
    pthread_mutex_unlock(&s->mu);
}

int mu_http_session_count(mu_http_sessions *s, double now_s) {
    int n = 0;
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < MU_SESS_MAX; i++) n += s->t[i].live && s->t[i].expires > now_s;
    pthread_mutex_unlock(&s->mu);
    return n;
}

/* ---- wrong keys per address ------------------------------------------ */

typedef struct {
    bool used;
    unsigned char addr[16];
    int fails;
    double first, blocked_until;
} tentry;

struct mu_http_throttle {
    pthread_mutex_t mu;
    tentry t[MU_THROTTLE_ADDRS];
};

int mu_http_throttle_new(mu_http_throttle **out, mu_err *err) {
    mu_http_throttle *t = calloc(1, sizeof *t);
    if (!t) return mu_fail(err, MU_E_NOMEM, "http: out of memory");
    pthread_mutex_init(&t->mu, NULL);
    *out = t;
    return 0;
}

void mu_http_throttle_free(mu_http_throttle *t) {
    if (!t) return;
    pthread_mutex_destroy(&t->mu);
    free(t);
}

/* The entry of addr, or NULL. Called with t->mu held. */
static tentry *throttle_find(mu_http_throttle *t, const unsigned char addr[16]) {
    for (int i = 0; i < MU_THROTTLE_ADDRS; i++)
        if (t->t[i].used && !memcmp(t->t[i].addr, addr, 16)) return &t->t[i];
    return NULL;
}

int mu_http_throttle_wait(mu_http_throttle *t, const unsigned char addr[16], double now_s) {
    if (!t) return 0;
    pthread_mutex_lock(&t->mu);
    tentry *e = throttle_find(t, addr);
    int w = 0;
    if (e && e->blocked_until > now_s) {
        double d = e->blocked_until - now_s;
        w = (int)d;
        if (w < d) w++; /* whole seconds, rounded up */
    }
    pthread_mutex_unlock(&t->mu);
    return w;
}

void mu_http_throttle_fail(mu_http_throttle *t, const unsigned char addr[16], double now_s) {
    if (!t) return;
    pthread_mutex_lock(&t->mu);
    tentry *e = throttle_find(t, addr);
    if (!e) {
        /* a free entry, else the one whose window began first (not one
         * that is blocking now, unless every one is) */
        int at = -1;
        for (int i = 0; i < MU_THROTTLE_ADDRS && at < 0; i++)
            if (!t->t[i].used) at = i;
        for (int i = 0; i < MU_THROTTLE_ADDRS && at < 0; i++)
            if (t->t[i].blocked_until <= now_s && (at < 0 || t->t[i].first < t->t[at].first)) at = i;
        for (int i = 0; i < MU_THROTTLE_ADDRS; i++)
            if (at < 0 || (t->t[at].blocked_until > now_s && t->t[i].first < t->t[at].first)) at = i;
        e = &t->t[at];
        *e = (tentry){.used = true, .first = now_s};
        memcpy(e->addr, addr, 16);
    }
    if (now_s - e->first > MU_THROTTLE_WINDOW_S || (e->blocked_until > 0 && e->blocked_until <= now_s)) {
        e->fails = 0; /* a new window */
        e->first = now_s;
        e->blocked_until = 0;
    }
    if (++e->fails >= MU_THROTTLE_FAILS) e->blocked_until = now_s + MU_THROTTLE_BLOCK_S;
    pthread_mutex_unlock(&t->mu);
}

bool mu_http_cookie_get(const char *hdr, const char *name, const char **val, size_t *n) {
    if (!hdr || !name) return false;
    size_t nl = strlen(name);
    const char *p = hdr;
    while (*p) {
        while (*p == ' ' || *p == '\t' || *p == ';') p++;
        if (!*p) break;
        size_t pair = strcspn(p, ";");
        const char *eq = memchr(p, '=', pair);
        if (eq) {
            size_t kl = (size_t)(eq - p);
            while (kl && (p[kl - 1] == ' ' || p[kl - 1] == '\t')) kl--;
            if (kl == nl && !memcmp(p, name, nl)) {
                const char *v = eq + 1;
                size_t vl = pair - (size_t)(v - p);
                while (vl && (*v == ' ' || *v == '\t')) v++, vl--;
                while (vl && (v[vl - 1] == ' ' || v[vl - 1] == '\t')) vl--;
                if (vl >= 2 && v[0] == '"' && v[vl - 1] == '"') v++, vl -= 2;
                *val = v;
                *n = vl;
                return true;
            }
        }
        p += pair;
    }
    return false;
}
