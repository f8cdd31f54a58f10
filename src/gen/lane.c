/* lane.c: the prefill lane between engines (include/muser_lane.h,
 * docs/lane.md): the producer (accept, queue, prefill, stream), the
 * decoder's fetch, verification and atomic install, the circuit breaker,
 * enrollment, qualification and the node registry.
 * Owns: what a handoff means for sessions and models; the registry files.
 * Does not own: bytes on the wire (src/net/lanewire.c), TLS and sockets
 * (src/net/conn.c), the ledger (src/net/ledger.c), the identity digests
 * (src/kv/kvengine.c).
 * Design: the decoder ships to the producer the prompt's whole steps
 * before its last token (step = its scheduler's prefill chunk), so the
 * producer runs exactly the forwards the decoder would have run and the
 * decoder computes exactly its own last step: the committed rows and the
 * logits are bit-identical to local prefill on the same kernel class. The
 * producer streams each step's rows of every layer as soon as that step's
 * forward is done, from a sender thread, while it computes the next step.
 * The decoder keeps every row in a detached shadow (plain memory, not a
 * session) until the SEAL verifies and the ledger admits the generation;
 * only then may the slot install it, in one go, on the engine thread. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include "../../include/muser_kv.h"
#include "../../include/muser_lane.h"
#include "../net/conn.h"
#include "../net/lanewire.h"
#include "../net/ledger.h"

#define DEFAULT_TIMEOUT_MS 30000
#define MAX_WORKERS 16
#define MAX_QUEUE 64

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* ---- files under the muser home ------------------------------------------- */

static int home_sub(char *out, size_t cap, const char *sub, mu_err *err) {
    char home[PATH_MAX - 64];
    int rc = mu_kv_home(home, sizeof home, true, err);
    if (rc) return rc;
    snprintf(out, cap, "%s/%s", home, sub);
    if (mkdir(out, 0700) && errno != EEXIST) return mu_fail(err, MU_E_IO, "lane: cannot create %s: %s", out, strerror(errno));
    return 0;
}

int mu_tls_dir(char *out, size_t cap, mu_err *err) { return home_sub(out, cap, "tls", err); }
int mu_tls_init(const char *dir, mu_err *err) { return tls_ca_init(dir, err); }
int mu_tls_issue(const char *dir, const char *name, const char *san, mu_err *err) { return tls_issue(dir, name, san, err); }
int mu_tls_fingerprint(const char *cert, char out[65], mu_err *err) {
    uint8_t fp[32];
    int rc = tls_cert_fp(cert, fp, err);
    if (!rc) lane_hex(fp, out);
    return rc;
}

/* This end's certificate <home>/tls/NAME.{pem,key}: made (with the CA when
 * there is none) on first use. */
static int own_cert(const char *name, const char *san, char *cert, char *key, size_t cap, uint8_t fp[32], mu_err *err) {
    char dir[PATH_MAX - 64], ca[PATH_MAX];
    int rc = mu_tls_dir(dir, sizeof dir, err);
    if (rc) return rc;
    snprintf(ca, sizeof ca, "%s/ca.pem", dir);
    snprintf(cert, cap, "%s/%s.pem", dir, name);
    snprintf(key, cap, "%s/%s.key", dir, name);
    struct stat st;
    if (stat(ca, &st) && (rc = tls_ca_init(dir, err))) return rc;
    if (stat(cert, &st) && (rc = tls_issue(dir, name, san, err))) return rc;
    return tls_cert_fp(cert, fp, err);
}

static int write_private(const char *path, const char *text, mu_err *err) {
    char tmp[PATH_MAX + 16];
    snprintf(tmp, sizeof tmp, "%s.tmp%d", path, (int)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return mu_fail(err, MU_E_IO, "lane: cannot write %s: %s", tmp, strerror(errno));
    size_t n = strlen(text);
    bool ok = write(fd, text, n) == (ssize_t)n && !fsync(fd);
    close(fd);
    if (!ok || rename(tmp, path)) {
        unlink(tmp);
        return mu_fail(err, MU_E_IO, "lane: cannot write %s", path);
    }
    return 0;
}

/* The node key: HMAC-SHA-256(secret, "muser/lane/v1/node-key" 0 producer_fp decoder_fp). */
static void derive_key(const uint8_t secret[32], const uint8_t pfp[32], const uint8_t dfp[32], uint8_t key[32]) {
    uint8_t both[64];
    memcpy(both, pfp, 32);
    memcpy(both + 32, dfp, 32);
    lane_hmac(secret, "muser/lane/v1/node-key", both, 64, key);
}

static void key_id(const uint8_t key[32], uint8_t out[32]) {
    uint8_t b[64];
    static const char d[] = "muser/lane/v1/key-id";
    memcpy(b, key, 32);
    lane_sha256(d, sizeof d, b + 32);
    lane_sha256(b, 64, out);
    OPENSSL_cleanse(b, sizeof b);
}

/* ---- tokens: "mut1." base64url(secret 32 | producer fp 32 | expiry u64 LE) --- */

static void b64url(const uint8_t *p, size_t n, char *out) {
    static const char A[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    size_t k = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0) | (i + 2 < n ? p[i + 2] : 0);
        out[k++] = A[v >> 18 & 63];
        out[k++] = A[v >> 12 & 63];
        if (i + 1 < n) out[k++] = A[v >> 6 & 63];
        if (i + 2 < n) out[k++] = A[v & 63];
    }
    out[k] = 0;
}

static bool unb64url(const char *s, uint8_t *out, size_t n) {
    size_t len = strlen(s), k = 0;
    if (len != (n * 4 + 2) / 3) return false;
    uint32_t acc = 0;
    int bits = 0;
    for (size_t i = 0; i < len; i++) {
        const char c = s[i];
        int v = c >= 'A' && c <= 'Z' ? c - 'A' : c >= 'a' && c <= 'z' ? c - 'a' + 26 : c >= '0' && c <= '9' ? c - '0' + 52
              : c == '-' ? 62 : c == '_' ? 63 : -1;
        if (v < 0) return false;
        acc = acc << 6 | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            if (k < n) out[k++] = (uint8_t)(acc >> bits);
        }
    }
    return k == n;
}

typedef struct {
    uint8_t secret[32], fp[32];
    uint64_t expiry;
} enroll_token;

static void token_text(const enroll_token *t, char out[160]) {
    uint8_t b[72];
    memcpy(b, t->secret, 32);
    memcpy(b + 32, t->fp, 32);
    for (int i = 0; i < 8; i++) b[64 + i] = (uint8_t)(t->expiry >> (8 * i));
    memcpy(out, "mut1.", 5);
    b64url(b, sizeof b, out + 5);
    OPENSSL_cleanse(b, sizeof b);
}

static int token_parse(const char *s, enroll_token *t, mu_err *err) {
    uint8_t b[72];
    if (strncmp(s, "mut1.", 5) || !unb64url(s + 5, b, sizeof b))
        return mu_fail(err, MU_E_ARG, "lane: auth: not an enrollment token (mut1.<96 characters>)");
    memcpy(t->secret, b, 32);
    memcpy(t->fp, b + 32, 32);
    t->expiry = 0;
    for (int i = 0; i < 8; i++) t->expiry |= (uint64_t)b[64 + i] << (8 * i);
    OPENSSL_cleanse(b, sizeof b);
    if ((uint64_t)time(NULL) > t->expiry) return mu_fail(err, MU_E_STATE, "lane: auth: the enrollment token has expired");
    return 0;
}

/* ---- the model's layer plan ----------------------------------------------------- */

/* m->n_ship and m->n_have set: the layer table, row size and chunk count. */
static void plan(const mu_model *m, lane_manifest *mf) {
    const mu_model_info *I = mu_model_get_info(m);
    lane_layers_plan(mf, I->n_layer, I->swa_layers, I->n_swa);
    mf->row_bytes = (uint32_t)(I->n_head_kv * I->head_dim * 2);
    mf->n_chunks = lane_chunk_count(mf);
}

static int send_abort(conn *c, uint32_t code, const char *why) {
    uint8_t *p;
    size_t n;
    mu_err e = {0};
    if (lane_abort_encode(code, why, &p, &n, &e)) return -1;
    int rc = conn_write_frame(c, LANE_ABORT, p, n, &e);
    free(p);
    return rc;
}

/* ====================================================================== */
/* the producer                                                           */
/* ====================================================================== */

typedef struct {
    uint8_t fp[32], key[32];
    uint32_t epoch;
} peer;

/* test hook (docs/lane.md "Tamper hook"): MUSER_LANE_TAMPER is a comma-
 * separated list, entry k acting on the producer's k-th handoff since it
 * started: KIND:FRAME[:OFFSET] or "none". */
typedef enum { T_NONE, T_FLIP, T_TRUNCATE, T_DROP, T_DUP, T_REORDER, T_KILL, T_STALE, T_REPLAY, T_EPOCH } tamper_kind;
#define MAX_TAMPER 64
typedef struct {
    tamper_kind kind;
    uint32_t frame;
    size_t off;
} tamper;

struct mu_producer {
    mu_engine *e;
    const mu_model *m;
    mu_kv_ident *kid;
    char kclass[LANE_CLASS_LEN]; /* the class its rows are labelled with (the engine's, or the test hook's) */
    bool perturb;                /* test hook: one bit of each handoff's first chunk flipped */
    mu_producer_opts o;
    int lfd, port;
    tls_ctx *tls;
    uint8_t my_fp[32];
    char peers_path[PATH_MAX];
    pthread_mutex_t mu, engine_mu;
    pthread_cond_t cv;
    conn *queue[MAX_QUEUE];
    int q_head, q_n, n_running;
    bool stop;
    pthread_t acceptor, workers[MAX_WORKERS];
    int n_workers;
    peer *peers;
    int n_peers;
    bool enroll_open;
    enroll_token tok;
    char token[160];
    uint64_t last_gen;
    mu_producer_stats st;
    /* tamper hook */
    tamper tam[MAX_TAMPER];
    int n_tam;
    long n_handoffs_begun;
    uint8_t *rec, *prev_rec; /* recorded frames (replay) */
    size_t rec_n, rec_cap, prev_n;
};

static void parse_tamper(mu_producer *p) {
    const char *s = getenv("MUSER_LANE_TAMPER");
    static const struct { const char *n; tamper_kind k; } K[] = {
        {"none", T_NONE}, {"flip", T_FLIP}, {"truncate", T_TRUNCATE}, {"drop", T_DROP}, {"duplicate", T_DUP},
        {"reorder", T_REORDER}, {"kill", T_KILL}, {"stale", T_STALE}, {"replay", T_REPLAY}, {"epoch", T_EPOCH}};
    while (s && *s && p->n_tam < MAX_TAMPER) {
        char kind[32] = "";
        unsigned long fr = 0, off = 0;
        sscanf(s, "%31[a-z]:%lu:%lu", kind, &fr, &off);
        tamper *t = &p->tam[p->n_tam++];
        *t = (tamper){T_NONE, (uint32_t)fr, off};
        for (size_t i = 0; i < sizeof K / sizeof *K; i++)
            if (!strcmp(kind, K[i].n)) t->kind = K[i].k;
        s = strchr(s, ',');
        if (s) s++;
    }
}

static int peers_load(mu_producer *p, mu_err *err) {
    FILE *f = fopen(p->peers_path, "r");
    if (!f) return 0;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        char fp[80], key[80];
        unsigned ep;
        peer pr;
        if (sscanf(line, "%79s %u %79s", fp, &ep, key) != 3 || !lane_unhex(fp, pr.fp) || !lane_unhex(key, pr.key)) continue;
        pr.epoch = ep;
        peer *np = realloc(p->peers, (size_t)(p->n_peers + 1) * sizeof *np);
        if (!np) {
            fclose(f);
            return mu_fail(err, MU_E_NOMEM, "lane: out of memory");
        }
        p->peers = np;
        p->peers[p->n_peers++] = pr;
    }
    OPENSSL_cleanse(line, sizeof line);
    fclose(f);
    return 0;
}

static int peers_save(mu_producer *p, mu_err *err) {
    size_t cap = (size_t)p->n_peers * 200 + 1;
    char *t = malloc(cap);
    if (!t) return mu_fail(err, MU_E_NOMEM, "lane: out of memory");
    size_t k = 0;
    t[0] = 0;
    for (int i = 0; i < p->n_peers; i++) {
        char fp[65], key[65];
        lane_hex(p->peers[i].fp, fp);
        lane_hex(p->peers[i].key, key);
        k += (size_t)snprintf(t + k, cap - k, "%s %u %s\n", fp, p->peers[i].epoch, key);
    }
    int rc = write_private(p->peers_path, t, err);
    OPENSSL_cleanse(t, cap);
    free(t);
    return rc;
}

static peer *find_peer(mu_producer *p, const uint8_t fp[32]) {
    for (int i = 0; i < p->n_peers; i++)
        if (!memcmp(p->peers[i].fp, fp, 32)) return &p->peers[i];
    return NULL;
}

static bool producer_pin(void *user, const uint8_t fp[32]) {
    mu_producer *p = user;
    pthread_mutex_lock(&p->mu);
    bool ok = find_peer(p, fp) || (p->enroll_open && (uint64_t)time(NULL) <= p->tok.expiry);
    pthread_mutex_unlock(&p->mu);
    return ok;
}

/* ---- one handoff's output: tamper hook, recording, sender thread ------------ */

typedef struct frame_item {
    unsigned type;
    uint8_t *p;
    size_t n;
    struct frame_item *next;
} frame_item;

typedef struct {
    mu_producer *p;
    conn *c;
    tamper tam;       /* this handoff's tamper entry (kind T_NONE: none) */
    uint32_t index;   /* frames written so far */
    frame_item *held; /* reorder */
    bool broken;
    /* sender */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    frame_item *head, *tail;
    int queued_steps;
    bool done, failed;
    mu_err err;
    uint64_t bytes;
    double send_s;   /* the sender's time writing frames */
    double hidden_s; /* of which while the worker computed */
    double comp_t0;  /* > 0 while the worker runs a step */
    double (*iv)[2]; /* the worker's finished steps [start, end] */
    int n_iv, cap_iv;
} out_stream;

/* Sender, o->mu held: the part of the write [t0, t1] that ran while the
 * worker computed (a step in progress, or finished ones). */
static double overlap(const out_stream *o, double t0, double t1) {
    double h = 0;
    if (o->comp_t0 > 0 && t1 > o->comp_t0) h += t1 - (t0 > o->comp_t0 ? t0 : o->comp_t0);
    for (int i = o->n_iv - 1; i >= 0 && o->iv[i][1] > t0; i--) {
        double a = o->iv[i][0] > t0 ? o->iv[i][0] : t0, b = o->iv[i][1] < t1 ? o->iv[i][1] : t1;
        if (b > a) h += b - a;
    }
    return h;
}

static void record(mu_producer *p, const void *a, size_t n) {
    if (!getenv("MUSER_LANE_TAMPER") || p->rec_n + n > (256u << 20)) return;
    if (p->rec_n + n > p->rec_cap) {
        size_t nc = (p->rec_n + n) * 2;
        uint8_t *r = realloc(p->rec, nc);
        if (!r) return;
        p->rec = r;
        p->rec_cap = nc;
    }
    memcpy(p->rec + p->rec_n, a, n);
    p->rec_n += n;
}

static int raw_frame(out_stream *o, unsigned type, const uint8_t *pl, size_t n, mu_err *err) {
    uint8_t h[LANE_HDR];
    lane_frame_header(h, type, (uint32_t)n);
    record(o->p, h, sizeof h);
    record(o->p, pl, n);
    o->bytes += sizeof h + n;
    return conn_write_frame(o->c, type, pl, n, err);
}

/* Writes frame number o->index, through the tamper hook when armed. */
static int put_frame(out_stream *o, unsigned type, uint8_t *pl, size_t n, mu_err *err) {
    uint32_t i = o->index++;
    if (o->tam.kind == T_NONE || o->broken) return o->broken ? 0 : raw_frame(o, type, pl, n, err);
    if (o->held) { /* reorder: the held frame goes after this one */
        frame_item *h = o->held;
        o->held = NULL;
        int rc = raw_frame(o, type, pl, n, err);
        if (!rc) rc = raw_frame(o, h->type, h->p, h->n, err);
        free(h->p);
        free(h);
        return rc;
    }
    if (i != o->tam.frame) return raw_frame(o, type, pl, n, err);
    switch (o->tam.kind) {
    case T_FLIP: {
        uint8_t h[LANE_HDR];
        lane_frame_header(h, type, (uint32_t)n);
        size_t off = o->tam.off % (LANE_HDR + n);
        if (off < LANE_HDR) h[off] ^= 0x01;
        else pl[off - LANE_HDR] ^= 0x01;
        int rc = conn_write(o->c, h, sizeof h, err);
        if (!rc) rc = conn_write(o->c, pl, n, err);
        if (off >= LANE_HDR) pl[off - LANE_HDR] ^= 0x01;
        return rc;
    }
    case T_TRUNCATE: {
        uint8_t h[LANE_HDR];
        lane_frame_header(h, type, (uint32_t)n);
        size_t off = o->tam.off % (LANE_HDR + n);
        int rc = conn_write(o->c, h, off < LANE_HDR ? off : LANE_HDR, err);
        if (!rc && off > LANE_HDR) rc = conn_write(o->c, pl, off - LANE_HDR, err);
        shutdown(o->c->fd, SHUT_WR); /* the decoder sees the stream end here */
        o->broken = true;
        return rc;
    }
    case T_DROP: return 0;
    case T_DUP: {
        int rc = raw_frame(o, type, pl, n, err);
        return rc ? rc : raw_frame(o, type, pl, n, err);
    }
    case T_REORDER: {
        frame_item *h = malloc(sizeof *h);
        uint8_t *c = h ? malloc(n ? n : 1) : NULL;
        if (!c) {
            free(h);
            return mu_fail(err, MU_E_NOMEM, "lane: out of memory");
        }
        memcpy(c, pl, n);
        *h = (frame_item){type, c, n, NULL};
        o->held = h;
        return 0;
    }
    case T_KILL: raise(SIGKILL); return 0;
    default: return raw_frame(o, type, pl, n, err);
    }
}

/* While a step computes for longer than this, the sender writes PING
 * frames, so the decoder's per-read timeout measures the link, not the
 * producer's speed. */
#define PING_S 5

static void *sender_main(void *arg) {
    out_stream *o = arg;
    pthread_mutex_lock(&o->mu);
    for (;;) {
        while (!o->head && !o->done) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_sec += PING_S;
            if (pthread_cond_timedwait(&o->cv, &o->mu, &ts) == ETIMEDOUT && !o->head && !o->done && !o->failed &&
                !o->broken) {
                pthread_mutex_unlock(&o->mu);
                mu_err e = {0};
                int rc = conn_write_frame(o->c, LANE_PING, NULL, 0, &e);
                pthread_mutex_lock(&o->mu);
                if (rc && !o->failed) {
                    o->failed = true;
                    o->err = e;
                }
            }
        }
        if (!o->head) break;
        frame_item *f = o->head;
        o->head = f->next;
        if (!o->head) o->tail = NULL;
        bool last_of_step = f->type == 0;
        pthread_mutex_unlock(&o->mu);
        int rc = 0;
        mu_err e = {0};
        double t0 = now_s();
        if (!last_of_step && !o->failed) rc = put_frame(o, f->type, f->p, f->n, &e);
        double t1 = now_s();
        free(f->p);
        free(f);
        pthread_mutex_lock(&o->mu);
        o->send_s += t1 - t0;
        o->hidden_s += overlap(o, t0, t1);
        if (rc && !o->failed) {
            o->failed = true;
            o->err = e;
        }
        if (last_of_step) {
            o->queued_steps--;
            pthread_cond_broadcast(&o->cv);
        }
    }
    pthread_mutex_unlock(&o->mu);
    return NULL;
}

static void push(out_stream *o, frame_item *f) {
    f->next = NULL;
    if (o->tail) o->tail->next = f;
    else o->head = f;
    o->tail = f;
}

static uint64_t next_generation(mu_producer *p, bool stale) {
    pthread_mutex_lock(&p->mu);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t us = (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u, g;
    if (stale && p->last_gen) {
        g = p->last_gen;
    } else {
        g = us > p->last_gen ? us : p->last_gen + 1;
        p->last_gen = g;
    }
    pthread_mutex_unlock(&p->mu);
    return g;
}

static int handoff(mu_producer *p, conn *c, const peer *pr, const lane_hello *h, mu_err *err) {
    const mu_model_info *I = mu_model_get_info(p->m);
    uint32_t *tokens = malloc(4 * (size_t)h->n_ship);
    if (!tokens) return mu_fail(err, MU_E_NOMEM, "lane: out of memory");
    lane_hello_tokens(h, tokens);
    for (uint32_t i = 0; i < h->n_ship; i++)
        if (tokens[i] >= (uint32_t)I->n_vocab) {
            free(tokens);
            send_abort(c, LANE_ABORT_BAD, "request: token id outside the vocabulary");
            return mu_fail(err, MU_E_ARG, "lane: request: token id %u outside the vocabulary", tokens[i]);
        }
    pthread_mutex_lock(&p->mu);
    long idx = p->n_handoffs_begun++;
    tamper tam = idx < p->n_tam ? p->tam[idx] : (tamper){T_NONE, 0, 0};
    if (p->rec_n) { /* the previous handoff's frames become the replay source */
        free(p->prev_rec);
        p->prev_rec = p->rec;
        p->prev_n = p->rec_n;
        p->rec = NULL;
        p->rec_n = p->rec_cap = 0;
    }
    pthread_mutex_unlock(&p->mu);
    if (tam.kind == T_REPLAY) { /* the previous handoff's bytes, verbatim */
        int rc = p->prev_n ? conn_write(c, p->prev_rec, p->prev_n, err) : 0;
        free(tokens);
        return rc;
    }
    lane_manifest *m = calloc(1, sizeof *m);
    mu_session *s = NULL;
    uint8_t(*dg)[32] = NULL;
    uint8_t *buf = NULL;
    size_t bn = 0;
    int rc = 0;
    out_stream o = {.p = p, .c = c, .tam = tam};
    double compute_s = 0;
    pthread_mutex_init(&o.mu, NULL);
    pthread_cond_init(&o.cv, NULL);
    bool sender = false;
    pthread_t th;
    if (!m) {
        rc = mu_fail(err, MU_E_NOMEM, "lane: out of memory");
        goto out;
    }
    memcpy(m->request_id, h->request_id, 16);
    memcpy(m->identity, h->identity, 32);
    lane_token_digest(tokens, h->n_ship, m->token_digest);
    memcpy(m->kclass, p->kclass, LANE_CLASS_LEN);
    m->n_ctx = h->n_ctx;
    m->step = h->step;
    m->n_have = h->n_have;
    m->n_ship = h->n_ship;
    m->generation = next_generation(p, tam.kind == T_STALE);
    m->key_epoch = pr->epoch + (tam.kind == T_EPOCH ? 1 : 0);
    plan(p->m, m);
    if (!(dg = calloc(m->n_chunks ? m->n_chunks : 1, 32))) {
        rc = mu_fail(err, MU_E_NOMEM, "lane: out of memory");
        goto out;
    }
    if ((rc = mu_session_new(p->e, (int)h->n_ctx, &s, err))) {
        send_abort(c, LANE_ABORT_INTERNAL, "internal: cannot make a session of that context");
        goto out;
    }
    if ((rc = lane_begin_encode(m, pr->key, &buf, &bn, err)) || (rc = put_frame(&o, LANE_BEGIN, buf, bn, err))) goto out;
    free(buf);
    buf = NULL;
    if (pthread_create(&th, NULL, sender_main, &o)) {
        rc = mu_fail(err, MU_E_NOMEM, "lane: cannot start the sender thread");
        goto out;
    }
    sender = true;
    int32_t *ids = (int32_t *)tokens; /* ids < n_vocab: the same bits */
    uint32_t chunk = 0;
    for (uint64_t a = 0; a < m->n_ship && !rc; a += m->step) {
        uint32_t b = (uint32_t)(a + m->step < m->n_ship ? a + m->step : m->n_ship);
        /* the pipeline is two steps deep: wait while the sender is behind */
        pthread_mutex_lock(&o.mu);
        while (o.queued_steps >= 2 && !o.failed) pthread_cond_wait(&o.cv, &o.mu);
        bool failed = o.failed;
        double tc = now_s();
        o.comp_t0 = tc;
        pthread_mutex_unlock(&o.mu);
        if (failed) break;
        pthread_mutex_lock(&p->engine_mu);
        mu_batch_item it = {.s = s, .tokens = ids + a, .n_tokens = (int)(b - a)};
        rc = mu_forward(p->e, &it, 1, err);
        frame_item *fl = NULL, **tail = &fl;
        for (uint32_t l = 0; l < m->n_layer && !rc; l++) {
            uint32_t lo = m->layers[l].lo > a ? m->layers[l].lo : (uint32_t)a;
            if (lo >= b) continue;
            uint32_t n = b - lo;
            size_t len = LANE_LAYER_HDR + 2 * (size_t)n * m->row_bytes;
            frame_item *f = malloc(sizeof *f);
            uint8_t *pl = f ? malloc(len) : NULL;
            if (!pl) {
                free(f);
                rc = mu_fail(err, MU_E_NOMEM, "lane: out of memory");
                break;
            }
            lane_layer_header(pl, chunk, l, lo, n);
            rc = mu_session_kv_read(s, (int)l, (int)lo, (int)n, (uint16_t *)(pl + LANE_LAYER_HDR),
                                    (uint16_t *)(pl + LANE_LAYER_HDR + (size_t)n * m->row_bytes), err);
            if (p->perturb && chunk == 0) /* test hook: rows that differ from this engine's in one bit, sealed */
                pl[LANE_LAYER_HDR + (size_t)n * m->row_bytes] ^= 1;
            lane_sha256(pl, len, dg[chunk]);
            chunk++;
            *f = (frame_item){LANE_LAYER, pl, len, NULL};
            *tail = f;
            tail = &f->next;
        }
        pthread_mutex_unlock(&p->engine_mu);
        double te = now_s();
        compute_s += te - tc;
        pthread_mutex_lock(&o.mu);
        if (o.n_iv == o.cap_iv) {
            int nc = o.cap_iv ? 2 * o.cap_iv : 64;
            double(*ni)[2] = realloc(o.iv, (size_t)nc * sizeof *ni);
            if (ni) o.iv = ni, o.cap_iv = nc;
        }
        if (o.n_iv < o.cap_iv) o.iv[o.n_iv][0] = tc, o.iv[o.n_iv][1] = te, o.n_iv++;
        o.comp_t0 = 0;
        pthread_mutex_unlock(&o.mu);
        frame_item *end = calloc(1, sizeof *end); /* type 0: the step's end marker */
        pthread_mutex_lock(&o.mu);
        while (fl) {
            frame_item *nx = fl->next;
            push(&o, fl);
            fl = nx;
        }
        if (end) {
            push(&o, end);
            o.queued_steps++;
        }
        pthread_cond_broadcast(&o.cv);
        pthread_mutex_unlock(&o.mu);
        if (!end && !rc) rc = mu_fail(err, MU_E_NOMEM, "lane: out of memory");
    }
    pthread_mutex_lock(&o.mu);
    o.done = true;
    pthread_cond_broadcast(&o.cv);
    pthread_mutex_unlock(&o.mu);
    pthread_join(th, NULL);
    sender = false;
    if (!rc && o.failed) {
        *err = o.err;
        rc = o.err.code ? o.err.code : MU_E_IO;
    }
    if (!rc && chunk != m->n_chunks) rc = mu_fail(err, MU_E_STATE, "lane: internal: %u chunks made, %u declared", chunk, m->n_chunks);
    double ts = now_s();
    if (!rc && !(rc = lane_seal_encode(m, (const uint8_t(*)[32])dg, pr->key, &buf, &bn, err)))
        rc = put_frame(&o, LANE_SEAL, buf, bn, err);
    o.send_s += now_s() - ts; /* the SEAL: after the last step, never hidden */
    if (!rc && o.held) { /* reorder of the last frame: it goes last */
        frame_item *hf = o.held;
        o.held = NULL;
        rc = raw_frame(&o, hf->type, hf->p, hf->n, err);
        free(hf->p);
        free(hf);
    }
    if (!rc && !o.broken) { /* the decoder's ACK (its verdict; it owes us nothing) */
        uint8_t *rb = NULL;
        size_t rcap = 0;
        unsigned t;
        const uint8_t *pp;
        uint32_t len;
        mu_err e2 = {0};
        conn_read_frame(c, &rb, &rcap, &t, &pp, &len, &e2);
        free(rb);
    }
out:
    if (sender) {
        pthread_mutex_lock(&o.mu);
        o.done = true;
        o.failed = true;
        pthread_cond_broadcast(&o.cv);
        pthread_mutex_unlock(&o.mu);
        pthread_join(th, NULL);
    }
    while (o.head) {
        frame_item *f = o.head;
        o.head = f->next;
        free(f->p);
        free(f);
    }
    if (o.held) free(o.held->p), free(o.held);
    free(o.iv);
    pthread_mutex_destroy(&o.mu);
    pthread_cond_destroy(&o.cv);
    pthread_mutex_lock(&p->mu);
    p->st.n_bytes += o.bytes;
    pthread_mutex_unlock(&p->mu);
    if (rc && !lane_reason(err)) send_abort(c, LANE_ABORT_INTERNAL, err->msg);
    if (p->o.on_handoff) {
        mu_handoff_report r = {.n_ship = (int)h->n_ship, .n_have = (int)h->n_have, .bytes = o.bytes, .compute_s = compute_s, .send_s = o.send_s,
                               .exposed_s = o.send_s - o.hidden_s, .ok = !rc};
        p->o.on_handoff(p->o.on_handoff_user, &r);
    }
    mu_session_free(s);
    free(buf);
    free(dg);
    free(m);
    free(tokens);
    return rc;
}

static void serve_conn(mu_producer *p, conn *c) {
    uint8_t *buf = NULL;
    size_t cap = 0;
    unsigned type;
    const uint8_t *pl;
    uint32_t len;
    mu_err err = {0};
    lane_hello h;
    int rc = conn_read_frame(c, &buf, &cap, &type, &pl, &len, &err);
    if (!rc && type != LANE_HELLO) rc = mu_fail(&err, MU_E_FORMAT, "lane: order: frame type %u where HELLO belongs", type);
    if (!rc) rc = lane_hello_decode(pl, len, &h, &err);
    if (rc) {
        send_abort(c, LANE_ABORT_BAD, err.msg);
        goto out;
    }
    pthread_mutex_lock(&p->mu);
    peer *found = find_peer(p, c->peer_fp), pr = found ? *found : (peer){0};
    pthread_mutex_unlock(&p->mu);
    if (h.ask == LANE_ASK_ENROLL) {
        pthread_mutex_lock(&p->mu);
        bool ok = p->enroll_open && (uint64_t)time(NULL) <= p->tok.expiry && lane_eq(h.secret, p->tok.secret, 32);
        peer np = {0};
        if (ok) {
            p->enroll_open = false; /* single use */
            memcpy(np.fp, c->peer_fp, 32);
            derive_key(p->tok.secret, p->my_fp, c->peer_fp, np.key);
            OPENSSL_cleanse(&p->tok.secret, 32);
            peer *old = find_peer(p, c->peer_fp);
            np.epoch = old ? old->epoch + 1 : 1;
            if (old) *old = np;
            else {
                peer *pp = realloc(p->peers, (size_t)(p->n_peers + 1) * sizeof *pp);
                if (pp) p->peers = pp, p->peers[p->n_peers++] = np;
                else ok = false;
            }
            if (ok && peers_save(p, &err)) ok = false;
        }
        pthread_mutex_unlock(&p->mu);
        if (!ok) {
            send_abort(c, LANE_ABORT_AUTH, "auth: the enrollment token is wrong, used or expired");
            goto out;
        }
        pr = np;
        h.ask = LANE_ASK_PROBE; /* answer with INFO */
    }
    if (!found && h.ask != LANE_ASK_PROBE) {
        send_abort(c, LANE_ABORT_AUTH, "auth: this decoder is not enrolled here");
        goto out;
    }
    if (h.ask == LANE_ASK_PROBE) {
        if (!pr.epoch) {
            send_abort(c, LANE_ABORT_AUTH, "auth: this decoder is not enrolled here");
            goto out;
        }
        lane_info in = {.version = LANE_VERSION, .key_epoch = pr.epoch, .n_ctx_max = (uint32_t)p->o.max_ctx};
        mu_kv_ident_digest(p->kid, 0, in.identity, NULL);
        memcpy(in.kclass, p->kclass, LANE_CLASS_LEN);
        snprintf(in.name, sizeof in.name, "%s", mu_model_get_info(p->m)->name);
        uint8_t *ib;
        size_t in_n;
        if (!lane_info_encode(&in, &ib, &in_n, &err)) {
            conn_write_frame(c, LANE_INFO, ib, in_n, &err);
            free(ib);
        }
        goto out;
    }
    /* HANDOFF */
    uint8_t want[32];
    mu_kv_ident_digest(p->kid, (int)h.n_ctx, want, NULL);
    const char *why = NULL;
    char wbuf[160];
    if (!lane_eq(want, h.identity, 32)) {
        why = "identity: the producer's model or cache layout differs";
    } else if (memcmp(h.kclass, p->kclass, LANE_CLASS_LEN)) {
        snprintf(wbuf, sizeof wbuf, "identity: this producer computes with kernel class %.31s, the decoder accepts %.31s "
                 "(muser node qualify)", p->kclass, h.kclass);
        why = wbuf;
    }
    if (why) {
        send_abort(c, LANE_ABORT_IDENTITY, why);
        pthread_mutex_lock(&p->mu);
        p->st.n_failed++;
        pthread_mutex_unlock(&p->mu);
        goto out;
    }
    if (h.n_ctx > (uint32_t)p->o.max_ctx) {
        send_abort(c, LANE_ABORT_BAD, "limit: context larger than this producer serves");
        goto out;
    }
    rc = handoff(p, c, &pr, &h, &err);
    pthread_mutex_lock(&p->mu);
    if (rc) p->st.n_failed++;
    else p->st.n_handoffs++;
    pthread_mutex_unlock(&p->mu);
out:
    free(buf);
}

static void *worker_main(void *arg) {
    mu_producer *p = arg;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->q_n && !p->stop) pthread_cond_wait(&p->cv, &p->mu);
        if (p->stop) break;
        conn *c = p->queue[p->q_head];
        p->q_head = (p->q_head + 1) % MAX_QUEUE;
        p->q_n--;
        p->n_running++;
        pthread_mutex_unlock(&p->mu);
        serve_conn(p, c);
        conn_close(c);
        pthread_mutex_lock(&p->mu);
        p->n_running--;
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

static void *acceptor_main(void *arg) {
    mu_producer *p = arg;
    for (;;) {
        int fd = accept4(p->lfd, NULL, NULL, SOCK_CLOEXEC);
        pthread_mutex_lock(&p->mu);
        bool stop = p->stop;
        pthread_mutex_unlock(&p->mu);
        if (stop) {
            if (fd >= 0) close(fd);
            break;
        }
        if (fd < 0) continue;
        conn *c;
        mu_err err = {0};
        if (tls_accept(p->tls, fd, producer_pin, p, p->o.timeout_ms, &c, &err)) continue;
        conn_timeouts(c, p->o.timeout_ms, p->o.timeout_ms);
        pthread_mutex_lock(&p->mu);
        bool busy = p->q_n >= p->o.queue_max;
        if (!busy) {
            p->queue[(p->q_head + p->q_n) % MAX_QUEUE] = c;
            p->q_n++;
            pthread_cond_signal(&p->cv);
        } else {
            p->st.n_busy++;
        }
        pthread_mutex_unlock(&p->mu);
        if (busy) {
            send_abort(c, LANE_ABORT_BUSY, "busy: the producer's queue is full");
            conn_close(c);
        }
    }
    return NULL;
}

/* The kernel class the producer's rows are labelled with: the engine's,
 * unless the test hook MUSER_LANE_TEST_CLASS=[NAME][:perturb] relabels
 * them (NAME) and/or flips the lowest bit of the first V value of each
 * handoff's first chunk (docs/lane.md, "Test hooks"): how the tests stand
 * in for a producer of another class on one machine. */
static int producer_class(mu_producer *p, mu_err *err) {
    const char *kc = "";
    mu_kv_ident_digest(p->kid, 0, (uint8_t[32]){0}, &kc);
    const char *t = getenv("MUSER_LANE_TEST_CLASS");
    char name[64];
    snprintf(name, sizeof name, "%s", kc);
    if (t && *t) {
        const char *colon = strchr(t, ':');
        size_t l = colon ? (size_t)(colon - t) : strlen(t);
        if (l) snprintf(name, sizeof name, "%.*s", (int)(l < 63 ? l : 63), t);
        if (colon && strcmp(colon + 1, "perturb"))
            return mu_fail(err, MU_E_ARG, "lane: MUSER_LANE_TEST_CLASS: NAME[:perturb], not %s", t);
        p->perturb = colon != NULL;
    }
    if (!lane_class_put(p->kclass, name)) return mu_fail(err, MU_E_ARG, "lane: the kernel class is not a name: %s", name);
    return 0;
}

int mu_producer_start(mu_engine *e, const mu_producer_opts *o, mu_producer **out, mu_err *err) {
    mu_producer *p = calloc(1, sizeof *p);
    if (!p) return mu_fail(err, MU_E_NOMEM, "lane: out of memory");
    p->e = e;
    p->m = mu_engine_model(e);
    p->o = *o;
    p->lfd = -1;
    if (!p->o.host) p->o.host = "127.0.0.1";
    if (p->o.n_workers <= 0) p->o.n_workers = 1;
    if (p->o.n_workers > MAX_WORKERS) p->o.n_workers = MAX_WORKERS;
    if (p->o.queue_max <= 0) p->o.queue_max = 4;
    if (p->o.queue_max > MAX_QUEUE) p->o.queue_max = MAX_QUEUE;
    if (p->o.timeout_ms <= 0) p->o.timeout_ms = DEFAULT_TIMEOUT_MS;
    if (p->o.enroll_ttl_s <= 0) p->o.enroll_ttl_s = 600;
    int ctx_train = mu_model_get_info(p->m)->n_ctx_train;
    if (p->o.max_ctx <= 0 || p->o.max_ctx > ctx_train) p->o.max_ctx = ctx_train;
    pthread_mutex_init(&p->mu, NULL);
    pthread_mutex_init(&p->engine_mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    parse_tamper(p);
    char cert[PATH_MAX], key[PATH_MAX], dir[PATH_MAX - 64];
    const char *san = strcmp(p->o.host, "0.0.0.0") && strcmp(p->o.host, "::") ? p->o.host : "localhost";
    int rc = own_cert("producer", san, cert, key, sizeof cert, p->my_fp, err);
    if (!rc) rc = home_sub(dir, sizeof dir, "lane", err);
    if (!rc) {
        snprintf(p->peers_path, sizeof p->peers_path, "%s/peers", dir);
        rc = peers_load(p, err);
    }
    if (!rc) rc = tls_ctx_new(true, cert, key, &p->tls, err);
    if (!rc) rc = mu_kv_ident_new(e, o->model_path, &p->kid, err);
    if (!rc) rc = producer_class(p, err);
    if (!rc) rc = conn_listen(p->o.host, p->o.port, &p->lfd, &p->port, err);
    if (!rc && p->o.enroll) {
        RAND_bytes(p->tok.secret, 32);
        memcpy(p->tok.fp, p->my_fp, 32);
        p->tok.expiry = (uint64_t)time(NULL) + (uint64_t)p->o.enroll_ttl_s;
        token_text(&p->tok, p->token);
        p->enroll_open = true;
    }
    if (!rc && pthread_create(&p->acceptor, NULL, acceptor_main, p)) rc = mu_fail(err, MU_E_NOMEM, "lane: cannot start a thread");
    if (rc) {
        if (p->lfd >= 0) close(p->lfd);
        tls_ctx_free(p->tls);
        mu_kv_ident_free(p->kid);
        free(p->peers);
        free(p);
        return rc;
    }
    for (int i = 0; i < p->o.n_workers; i++)
        if (!pthread_create(&p->workers[p->n_workers], NULL, worker_main, p)) p->n_workers++;
    *out = p;
    return 0;
}

int mu_producer_port(const mu_producer *p) { return p->port; }
const char *mu_producer_token(const mu_producer *p) { return p->o.enroll ? p->token : NULL; }
const char *mu_producer_kclass(const mu_producer *p) { return p->kclass; }

void mu_producer_get_stats(mu_producer *p, mu_producer_stats *st) {
    pthread_mutex_lock(&p->mu);
    *st = p->st;
    st->n_queued = p->q_n;
    st->n_running = p->n_running;
    pthread_mutex_unlock(&p->mu);
}

void mu_producer_stop(mu_producer *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->stop = true;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    shutdown(p->lfd, SHUT_RDWR); /* wakes accept() */
    pthread_join(p->acceptor, NULL);
    for (int i = 0; i < p->n_workers; i++) pthread_join(p->workers[i], NULL);
    close(p->lfd);
    while (p->q_n) {
        conn_close(p->queue[p->q_head]);
        p->q_head = (p->q_head + 1) % MAX_QUEUE;
        p->q_n--;
    }
    tls_ctx_free(p->tls);
    mu_kv_ident_free(p->kid);
    OPENSSL_cleanse(p->peers, (size_t)p->n_peers * sizeof *p->peers);
    OPENSSL_cleanse(&p->tok, sizeof p->tok);
    free(p->peers);
    free(p->rec);
    free(p->prev_rec);
    pthread_mutex_destroy(&p->mu);
    pthread_mutex_destroy(&p->engine_mu);
    pthread_cond_destroy(&p->cv);
    free(p);
}

/* ====================================================================== */
/* the decoder                                                            */
/* ====================================================================== */

typedef struct {
    char name[64], host[256];
    int port;
    uint8_t fp[32], key[32], kid[32];
    uint32_t epoch;
    char kclass[LANE_CLASS_LEN]; /* the producer's kernel class, as enrolled: the only one accepted */
} node_ref;

struct mu_lane {
    mu_engine *e;
    mu_kv_ident *kid;
    mu_lane_opts o;
    node_ref node;
    tls_ctx *tls;
    ledger *led;
    uint8_t identity[32];
    char own_class[LANE_CLASS_LEN]; /* this engine's kernel class */
    pthread_mutex_t mu;
    mu_lane_stats st;
    double open_until;
};

/* The rows of one handoff, verified, not yet in any session. */
typedef struct {
    int n_have, n_ship, n_layer;
    char kclass[LANE_CLASS_LEN]; /* the producer's kernel class */
    bool cross;                  /* not this engine's class */
    uint32_t row_bytes;
    uint32_t lo[LANE_MAX_LAYERS], count[LANE_MAX_LAYERS];
    uint8_t *rows[LANE_MAX_LAYERS]; /* [count][row] K then [count][row] V */
    uint8_t *mem;
    uint64_t wire_bytes;
    /* a delta: positions [0, n_have) come from the prefix cache, whose path
     * of tokens[0, n_have) is pinned until the shadow is freed */
    mu_kv_cache *cache;
    int32_t *tokens;
    mu_kv_lineage *lin; /* scratch: the slot's own lineage is the scheduler's */
} shadow;

static void shadow_free(void *user) {
    shadow *sh = user;
    if (!sh) return;
    if (sh->cache && sh->tokens) mu_kv_cache_pin(sh->cache, sh->tokens, sh->n_have, false);
    mu_kv_lineage_free(sh->lin);
    free(sh->tokens);
    free(sh->mem);
    free(sh);
}

/* On the engine thread, into an empty session: a delta's prefix from the
 * prefix cache, then the shipped rows, then the position count. */
static int shadow_install(void *user, mu_session *s, mu_err *err) {
    shadow *sh = user;
    int rc = 0;
    if (sh->n_have > 0) {
        int src = 0, n = sh->cache && sh->lin ? mu_kv_cache_restore(sh->cache, s, sh->lin, sh->tokens, sh->n_have, 0, &src) : 0;
        if (n != sh->n_have)
            rc = mu_fail(err, MU_E_STATE, "lane: delta: the prefix cache restored %d positions, not the %d held", n, sh->n_have);
    }
    for (int il = 0; il < sh->n_layer && !rc; il++) {
        const uint8_t *k = sh->rows[il], *v = k + (size_t)sh->count[il] * sh->row_bytes;
        rc = mu_session_kv_write(s, il, (int)sh->lo[il], (int)sh->count[il], (const uint16_t *)k, (const uint16_t *)v, err);
    }
    if (!rc) rc = mu_session_kv_commit(s, sh->n_ship, err);
    if (rc) mu_session_reset(s);
    return rc;
}

static int registry_path(const char *name, char *out, size_t cap, mu_err *err) {
    for (const char *q = name; *q; q++)
        if (!((*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z') || (*q >= '0' && *q <= '9') || *q == '-' || *q == '_'))
            return mu_fail(err, MU_E_ARG, "node: a name holds letters, digits, '-' and '_': %s", name);
    if (!*name || strlen(name) > 63) return mu_fail(err, MU_E_ARG, "node: a name has 1..63 characters");
    char dir[PATH_MAX - 128];
    int rc = home_sub(dir, sizeof dir, "lane", err);
    if (!rc) {
        strncat(dir, "/nodes", sizeof dir - strlen(dir) - 1);
        if (mkdir(dir, 0700) && errno != EEXIST) return mu_fail(err, MU_E_IO, "node: cannot create %s", dir);
        snprintf(out, cap, "%s/%s.json", dir, name);
    }
    return rc;
}

static int node_load(const char *name, node_ref *n, json_t **doc, mu_err *err) {
    char path[PATH_MAX];
    int rc = registry_path(name, path, sizeof path, err);
    if (rc) return rc;
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    if (!j) return mu_fail(err, MU_E_ARG, "node: no node named %s (muser node add)", name);
    const char *addr = json_string_value(json_object_get(j, "addr")), *fp = json_string_value(json_object_get(j, "producer_fp")),
               *key = json_string_value(json_object_get(j, "key")), *kc = json_string_value(json_object_get(j, "kernel_class"));
    json_int_t ep = json_integer_value(json_object_get(j, "epoch"));
    memset(n, 0, sizeof *n);
    snprintf(n->name, sizeof n->name, "%s", name);
    if (!addr || conn_split_addr(addr, n->host, sizeof n->host, &n->port, err) || !lane_unhex(fp, n->fp) ||
        !lane_unhex(key, n->key) || ep < 1 || !kc || !lane_class_put(n->kclass, kc)) {
        json_decref(j);
        return mu_fail(err, MU_E_FORMAT, "node: the registry entry %s is damaged", path);
    }
    n->epoch = (uint32_t)ep;
    key_id(n->key, n->kid);
    if (doc) *doc = j;
    else json_decref(j);
    return 0;
}

static int node_save(const char *name, json_t *doc, mu_err *err) {
    char path[PATH_MAX];
    int rc = registry_path(name, path, sizeof path, err);
    if (rc) return rc;
    char *t = json_dumps(doc, JSON_INDENT(2) | JSON_SORT_KEYS);
    if (!t) return mu_fail(err, MU_E_NOMEM, "node: out of memory");
    rc = write_private(path, t, err);
    OPENSSL_cleanse(t, strlen(t));
    free(t);
    return rc;
}

/* The only registered node's name (when no --node is given). */
static int only_node(char *out, size_t cap, mu_err *err) {
    char dir[PATH_MAX - 128];
    int rc = home_sub(dir, sizeof dir, "lane", err);
    if (rc) return rc;
    strncat(dir, "/nodes", sizeof dir - strlen(dir) - 1);
    DIR *d = opendir(dir);
    int found = 0;
    struct dirent *de;
    while (d && (de = readdir(d))) {
        size_t l = strlen(de->d_name);
        if (l < 6 || l - 5 >= cap || strcmp(de->d_name + l - 5, ".json")) continue;
        if (!found++) snprintf(out, cap, "%.*s", (int)(l - 5), de->d_name);
    }
    if (d) closedir(d);
    if (found == 1) return 0;
    return mu_fail(err, MU_E_ARG, "lane: %s; name one with --node", found ? "several nodes are registered" : "no node is registered (muser node add)");
}

static bool lane_pin(void *user, const uint8_t fp[32]) { return !memcmp(user, fp, 32); }

static int lane_connect(tls_ctx *tls, const node_ref *n, int timeout_ms, conn **c, mu_err *err) {
    int fd;
    int rc = conn_tcp_connect(n->host, n->port, timeout_ms, &fd, err);
    if (rc) return rc;
    rc = tls_connect(tls, fd, lane_pin, (void *)n->fp, timeout_ms, c, err);
    if (!rc) conn_timeouts(*c, timeout_ms, timeout_ms);
    return rc;
}

static int peer_abort(const uint8_t *p, uint32_t len, mu_err *err) {
    uint32_t code;
    char why[300];
    mu_err e2;
    if (lane_abort_decode(p, len, &code, why, sizeof why, &e2)) return mu_fail(err, MU_E_FORMAT, "%s", e2.msg);
    if (code == LANE_ABORT_BUSY) return mu_fail(err, MU_E_STATE, "lane: busy: the producer said: %s", why);
    if (code == LANE_ABORT_IDENTITY) return mu_fail(err, MU_E_STATE, "lane: identity: the producer said: %s", why);
    if (code == LANE_ABORT_AUTH) return mu_fail(err, MU_E_STATE, "lane: auth: the producer said: %s", why);
    return mu_fail(err, MU_E_STATE, "lane: abort: the producer said (%u): %s", code, why);
}

/* The next frame that is not a PING; the whole handoff must end by deadline. */
static int read_data_frame(conn *c, uint8_t **buf, size_t *cap, unsigned *type, const uint8_t **pl, uint32_t *len,
                           double deadline, mu_err *err) {
    for (;;) {
        int rc = conn_read_frame(c, buf, cap, type, pl, len, err);
        if (rc || *type != LANE_PING) return rc;
        if (now_s() > deadline) return mu_fail(err, MU_E_IO, "lane: timeout: the handoff did not end within its deadline");
    }
}

/* Asks the node for the rows of positions [n_have, n_ship) of tokens (the
 * producer computes all of [0, n_ship)); *out holds them, verified. */
static int fetch(mu_lane *l, const int32_t *tokens, int n_have, int n_ship, int n_ctx, shadow **out, mu_err *err) {
    const mu_model *model = mu_engine_model(l->e);
    conn *c = NULL;
    int rc = lane_connect(l->tls, &l->node, l->o.timeout_ms, &c, err);
    if (rc) return rc;
    lane_hello h = {.version = LANE_VERSION, .ask = LANE_ASK_HANDOFF, .n_ctx = (uint32_t)n_ctx,
                    .step = (uint32_t)l->o.step, .n_have = (uint32_t)n_have, .n_ship = (uint32_t)n_ship,
                    .tokens = (const uint32_t *)tokens};
    memcpy(h.kclass, l->node.kclass, LANE_CLASS_LEN);
    RAND_bytes(h.request_id, 16);
    mu_kv_ident_digest(l->kid, n_ctx, h.identity, NULL);
    lane_manifest *want = calloc(1, sizeof *want), *m = calloc(1, sizeof *m);
    shadow *sh = calloc(1, sizeof *sh);
    uint8_t *hb = NULL, *buf = NULL;
    size_t hn = 0, cap = 0;
    uint8_t(*dg)[32] = NULL;
    unsigned type;
    const uint8_t *pl;
    uint32_t len;
    if (!want || !m || !sh) {
        rc = mu_fail(err, MU_E_NOMEM, "lane: out of memory");
        goto out;
    }
    /* what this decoder expects, from its own request and model */
    memcpy(want->request_id, h.request_id, 16);
    memcpy(want->identity, h.identity, 32);
    lane_token_digest((const uint32_t *)tokens, (uint32_t)n_ship, want->token_digest);
    memcpy(want->kclass, h.kclass, LANE_CLASS_LEN);
    want->n_ctx = h.n_ctx;
    want->step = h.step;
    want->n_have = h.n_have;
    want->n_ship = h.n_ship;
    want->key_epoch = l->node.epoch;
    plan(model, want);
    if ((rc = lane_hello_encode(&h, &hb, &hn, err)) || (rc = conn_write_frame(c, LANE_HELLO, hb, hn, err))) goto out;
    if ((rc = conn_read_frame(c, &buf, &cap, &type, &pl, &len, err))) goto out;
    if (type == LANE_ABORT) {
        rc = peer_abort(pl, len, err);
        goto out;
    }
    if (type != LANE_BEGIN) {
        rc = mu_fail(err, MU_E_STATE, "lane: order: frame type %u where BEGIN belongs", type);
        goto out;
    }
    if ((rc = lane_begin_open(pl, len, l->node.key, m, err))) goto out;
    if (!lane_eq(m->request_id, want->request_id, 16)) {
        rc = mu_fail(err, MU_E_STATE, "lane: request: the handoff answers another request (replayed?)");
        goto out;
    }
    if (!lane_eq(m->identity, want->identity, 32)) {
        rc = mu_fail(err, MU_E_STATE, "lane: identity: the handoff's model identity differs from this decoder's");
        goto out;
    }
    if (memcmp(m->kclass, want->kclass, LANE_CLASS_LEN)) {
        rc = mu_fail(err, MU_E_STATE, "lane: identity: the rows come from kernel class %.31s, the node was qualified for %.31s",
                     m->kclass, want->kclass);
        goto out;
    }
    if (!lane_eq(m->token_digest, want->token_digest, 32) || m->n_ctx != want->n_ctx || m->step != want->step ||
        m->n_ship != want->n_ship || m->n_have != want->n_have) {
        rc = mu_fail(err, MU_E_STATE, "lane: request: the handoff's tokens, context or step differ from the request");
        goto out;
    }
    if (m->key_epoch != want->key_epoch) {
        rc = mu_fail(err, MU_E_STATE, "lane: request: key epoch %u, this node's is %u", m->key_epoch, want->key_epoch);
        goto out;
    }
    uint64_t hw = 0;
    if ((rc = ledger_high(l->led, l->node.kid, m->key_epoch, &hw, err))) goto out;
    if (m->generation <= hw) { /* refused early; ledger_admit decides again at the end */
        rc = mu_fail(err, MU_E_STATE, "lane: stale: generation %llu is not above the ledger's %llu",
                     (unsigned long long)m->generation, (unsigned long long)hw);
        goto out;
    }
    bool same = m->row_bytes == want->row_bytes && m->n_layer == want->n_layer && m->n_chunks == want->n_chunks;
    for (uint32_t i = 0; same && i < m->n_layer; i++)
        same = m->layers[i].cls == want->layers[i].cls && m->layers[i].lo == want->layers[i].lo &&
               m->layers[i].count == want->layers[i].count;
    if (!same) {
        rc = mu_fail(err, MU_E_STATE, "lane: layout: the layer table (classes, ranges, row size) differs from this model's");
        goto out;
    }
    /* the shadow: every layer's rows, in one allocation */
    uint64_t total = 0;
    for (uint32_t i = 0; i < m->n_layer; i++) total += 2ull * m->layers[i].count * m->row_bytes;
    if (total > LANE_MAX_TOTAL || !(sh->mem = malloc(total ? (size_t)total : 1)) ||
        !(dg = calloc(m->n_chunks ? m->n_chunks : 1, 32))) {
        rc = mu_fail(err, MU_E_NOMEM, "lane: limit: no memory for a handoff of %llu bytes", (unsigned long long)total);
        goto out;
    }
    sh->n_have = n_have;
    sh->n_ship = n_ship;
    memcpy(sh->kclass, m->kclass, LANE_CLASS_LEN);
    sh->cross = memcmp(m->kclass, l->own_class, LANE_CLASS_LEN) != 0;
    sh->n_layer = (int)m->n_layer;
    sh->row_bytes = m->row_bytes;
    uint64_t off = 0;
    for (uint32_t i = 0; i < m->n_layer; i++) {
        sh->lo[i] = m->layers[i].lo;
        sh->count[i] = m->layers[i].count;
        sh->rows[i] = sh->mem + off;
        off += 2ull * m->layers[i].count * m->row_bytes;
    }
    sh->wire_bytes = LANE_HDR + len;
    double deadline = now_s() + l->o.deadline_s;
    for (uint32_t i = 0; i < m->n_chunks; i++) {
        if ((rc = read_data_frame(c, &buf, &cap, &type, &pl, &len, deadline, err))) goto out;
        sh->wire_bytes += LANE_HDR + len;
        if (type == LANE_ABORT) {
            rc = peer_abort(pl, len, err);
            goto out;
        }
        if (type != LANE_LAYER) {
            rc = mu_fail(err, MU_E_STATE, "lane: order: frame type %u where LAYER %u belongs", type, i);
            goto out;
        }
        const uint8_t *rows;
        if ((rc = lane_layer_check(pl, len, m, i, &rows, err))) goto out;
        lane_sha256(pl, len, dg[i]);
        uint32_t il, pos0, n;
        lane_chunk_at(m, i, &il, &pos0, &n);
        size_t rb = m->row_bytes, at = (size_t)(pos0 - sh->lo[il]) * rb, kbytes = (size_t)sh->count[il] * rb;
        memcpy(sh->rows[il] + at, rows, (size_t)n * rb);
        memcpy(sh->rows[il] + kbytes + at, rows + (size_t)n * rb, (size_t)n * rb);
    }
    if ((rc = read_data_frame(c, &buf, &cap, &type, &pl, &len, deadline, err))) goto out;
    sh->wire_bytes += LANE_HDR + len;
    if (type == LANE_ABORT) {
        rc = peer_abort(pl, len, err);
        goto out;
    }
    if (type != LANE_SEAL) {
        rc = mu_fail(err, MU_E_STATE, "lane: order: frame type %u where SEAL belongs", type);
        goto out;
    }
    if ((rc = lane_seal_open(pl, len, l->node.key, m, (const uint8_t(*)[32])dg, err))) goto out;
    if ((rc = ledger_admit(l->led, l->node.kid, m->key_epoch, m->generation, err))) goto out;
    uint8_t ack[20];
    lane_ack_encode(m->request_id, true, ack);
    mu_err e2;
    conn_write_frame(c, LANE_ACK, ack, sizeof ack, &e2); /* the handoff is ours already */
    *out = sh;
    sh = NULL;
out:
    conn_close(c);
    shadow_free(sh);
    free(hb);
    free(buf);
    free(dg);
    free(want);
    free(m);
    return rc;
}

int mu_prefill_parse(const char *name) {
    if (!strcmp(name, "local")) return MU_PREFILL_LOCAL;
    if (!strcmp(name, "auto")) return MU_PREFILL_AUTO;
    if (!strcmp(name, "remote")) return MU_PREFILL_REMOTE;
    return -1;
}

static int lane_open(mu_engine *e, const char *model_path, const char *node, const mu_lane_opts *o, mu_lane **out,
                     mu_err *err) {
    mu_lane *l = calloc(1, sizeof *l);
    if (!l) return mu_fail(err, MU_E_NOMEM, "lane: out of memory");
    l->e = e;
    l->o = *o;
    if (l->o.step <= 0) l->o.step = 512;
    if (l->o.step > 4096) {
        free(l);
        return mu_fail(err, MU_E_ARG, "lane: a prefill step of %d tokens (the lane serves 1..4096)", o->step);
    }
    if (l->o.breaker_failures <= 0) l->o.breaker_failures = 3;
    if (l->o.breaker_s <= 0) l->o.breaker_s = 30;
    if (l->o.timeout_ms <= 0) l->o.timeout_ms = DEFAULT_TIMEOUT_MS;
    if (l->o.deadline_s <= 0) l->o.deadline_s = 3600;
    l->st.breaker_failures = l->o.breaker_failures;
    l->st.breaker_s = l->o.breaker_s;
    pthread_mutex_init(&l->mu, NULL);
    char cert[PATH_MAX], key[PATH_MAX], dir[PATH_MAX - 64], path[PATH_MAX];
    uint8_t fp[32];
    int rc = node_load(node, &l->node, NULL, err);
    if (!rc) rc = own_cert("decoder", "localhost", cert, key, sizeof cert, fp, err);
    if (!rc) rc = tls_ctx_new(false, cert, key, &l->tls, err);
    if (!rc) rc = home_sub(dir, sizeof dir, "lane", err);
    if (!rc) {
        snprintf(path, sizeof path, "%s/ledger.db", dir);
        rc = ledger_open(path, &l->led, err);
    }
    if (!rc) rc = mu_kv_ident_new(e, model_path, &l->kid, err);
    if (!rc) {
        const char *kc = "";
        mu_kv_ident_digest(l->kid, 0, l->identity, &kc);
        if (!lane_class_put(l->own_class, kc)) rc = mu_fail(err, MU_E_STATE, "lane: the kernel class is not a name: %s", kc);
    }
    if (rc) {
        mu_lane_free(l);
        return rc;
    }
    *out = l;
    return 0;
}

int mu_lane_new(mu_engine *e, const char *model_path, const mu_lane_opts *o, mu_lane **out, mu_err *err) {
    *out = NULL;
    if (o->mode == MU_PREFILL_LOCAL) return 0;
    char name[64];
    const char *node = o->node;
    if (!node) {
        int rc = only_node(name, sizeof name, err);
        if (rc) return rc;
        node = name;
    }
    return lane_open(e, model_path, node, o, out, err);
}

void mu_lane_free(mu_lane *l) {
    if (!l) return;
    tls_ctx_free(l->tls);
    ledger_close(l->led);
    mu_kv_ident_free(l->kid);
    OPENSSL_cleanse(&l->node, sizeof l->node);
    pthread_mutex_destroy(&l->mu);
    free(l);
}

/* The positions the node prefills for a prompt of n tokens (0: none, the
 * prompt is at most one step). The same kernel class: the whole steps
 * before the last token, so that every forward splits as local prefill's
 * and the answer is bit for bit local prefill's. Another class: every
 * token but the last (the answer is local prefill's under the tie-aware
 * rule either way, and the decoder then computes one token, not up to a
 * step: the point of a fast producer). */
static int ship_count(const mu_lane *l, int n) {
    int step = l->o.step;
    if (n - 1 < step) return 0;
    return strcmp(l->node.kclass, l->own_class) ? n - 1 : (n - 1) / step * step;
}

int mu_lane_prepare(mu_lane *l, mu_gen_req *q, bool *remote, mu_err *err) {
    *remote = false;
    if (!l || l->o.mode == MU_PREFILL_LOCAL || q->install || q->embd) return 0;
    if (q->n_prompt >= l->o.n_ctx) return 0; /* the scheduler refuses it: no handoff for nothing */
    int n_ship = ship_count(l, q->n_prompt);
    pthread_mutex_lock(&l->mu);
    if (n_ship < 1) {
        l->st.n_local_short++;
        pthread_mutex_unlock(&l->mu);
        return 0;
    }
    if (l->o.mode == MU_PREFILL_AUTO && now_s() < l->open_until) {
        l->st.n_skipped_open++;
        pthread_mutex_unlock(&l->mu);
        return 0;
    }
    pthread_mutex_unlock(&l->mu);
    /* a delta: the prefix cache holds a prefix (pinned from here), the node
     * ships the rest; only for requests that reuse a cached prefix anyway */
    int n_have = q->keep_prefix && l->o.cache ? mu_kv_cache_hold(l->o.cache, q->prompt, n_ship, l->o.step) : 0;
    if (n_have > 0 && n_ship - n_have < l->o.step) { /* less than a step to gain: the reuse ladder's job */
        mu_kv_cache_pin(l->o.cache, q->prompt, n_have, false);
        pthread_mutex_lock(&l->mu);
        l->st.n_local_cached++;
        pthread_mutex_unlock(&l->mu);
        return 0;
    }
    shadow *sh = NULL;
    mu_err e2 = {0};
    int rc = fetch(l, q->prompt, n_have, n_ship, l->o.n_ctx, &sh, &e2);
    if (!rc && n_have > 0) {
        sh->cache = l->o.cache;
        if (!(sh->tokens = malloc((size_t)n_have * sizeof *sh->tokens)) ||
            mu_kv_lineage_new(l->o.cache, l->o.n_ctx, &sh->lin, &e2)) {
            free(sh->tokens);
            sh->tokens = NULL;
            shadow_free(sh);
            sh = NULL;
            rc = mu_fail(&e2, MU_E_NOMEM, "lane: out of memory");
        } else {
            memcpy(sh->tokens, q->prompt, (size_t)n_have * sizeof *sh->tokens);
        }
    }
    if (n_have > 0 && !(sh && sh->tokens)) mu_kv_cache_pin(l->o.cache, q->prompt, n_have, false); /* not handed on */
    pthread_mutex_lock(&l->mu);
    if (rc) {
        l->st.n_failed++;
        snprintf(l->st.last_error, sizeof l->st.last_error, "%s", e2.msg);
        if (++l->st.fails_in_row >= l->o.breaker_failures && l->o.mode == MU_PREFILL_AUTO) {
            l->open_until = now_s() + l->o.breaker_s;
            l->st.fails_in_row = 0;
        }
        if (l->o.mode == MU_PREFILL_AUTO) l->st.n_fallback++;
    } else {
        l->st.fails_in_row = 0;
        l->st.n_remote++;
        l->st.n_bytes += sh->wire_bytes;
        if (sh->cross) l->st.n_cross_class++;
        if (n_have > 0) l->st.n_delta++, l->st.n_delta_held += (uint64_t)n_have;
    }
    pthread_mutex_unlock(&l->mu);
    if (rc) {
        if (l->o.mode == MU_PREFILL_AUTO) return 0;
        *err = e2;
        return rc;
    }
    q->install = shadow_install;
    q->install_user = sh;
    q->install_free = shadow_free;
    q->n_installed = n_ship;
    q->install_class = sh->cross ? sh->kclass : NULL;
    q->keep_prefix = false;
    *remote = true;
    return 0;
}

void mu_lane_get_stats(mu_lane *l, mu_lane_stats *st) {
    pthread_mutex_lock(&l->mu);
    *st = l->st;
    snprintf(st->node_class, sizeof st->node_class, "%.31s", l->node.kclass);
    snprintf(st->own_class, sizeof st->own_class, "%.31s", l->own_class);
    double left = l->open_until - now_s();
    st->open = left > 0;
    st->open_left_s = left > 0 ? left : 0;
    pthread_mutex_unlock(&l->mu);
}

int mu_lane_metrics(mu_lane *l, char *buf, size_t cap) {
    if (!l) return 0;
    mu_lane_stats s;
    mu_lane_get_stats(l, &s);
    int n = snprintf(buf, cap,
                     "# HELP muser:lane_remote_total Prompts prefilled by the node.\n# TYPE muser:lane_remote_total counter\n"
                     "muser:lane_remote_total %llu\n"
                     "# HELP muser:lane_failed_total Handoffs that failed (any reason).\n# TYPE muser:lane_failed_total counter\n"
                     "muser:lane_failed_total %llu\n"
                     "# HELP muser:lane_fallback_total auto: failed handoffs prefilled locally instead.\n# TYPE muser:lane_fallback_total counter\n"
                     "muser:lane_fallback_total %llu\n"
                     "# HELP muser:lane_skipped_open_total auto: prompts prefilled locally while the breaker was open.\n# TYPE muser:lane_skipped_open_total counter\n"
                     "muser:lane_skipped_open_total %llu\n"
                     "# HELP muser:lane_local_short_total Prompts shorter than one step, prefilled locally.\n# TYPE muser:lane_local_short_total counter\n"
                     "muser:lane_local_short_total %llu\n"
                     "# HELP muser:lane_bytes_total Bytes received in handoffs.\n# TYPE muser:lane_bytes_total counter\n"
                     "muser:lane_bytes_total %llu\n"
                     "# HELP muser:lane_breaker_open 1 while the circuit breaker skips the node.\n# TYPE muser:lane_breaker_open gauge\n"
                     "muser:lane_breaker_open %d\n"
                     "# HELP muser:lane_breaker_failures Failures in a row that open the breaker.\n# TYPE muser:lane_breaker_failures gauge\n"
                     "muser:lane_breaker_failures %d\n"
                     "# HELP muser:lane_breaker_seconds How long the breaker stays open.\n# TYPE muser:lane_breaker_seconds gauge\n"
                     "muser:lane_breaker_seconds %d\n"
                     "# HELP muser:lane_cross_class_total Handoffs whose rows another kernel class computed (the node's).\n# TYPE muser:lane_cross_class_total counter\n"
                     "muser:lane_cross_class_total %llu\n"
                     "# HELP muser:lane_node_info The node's kernel class as enrolled and this decoder's.\n# TYPE muser:lane_node_info gauge\n"
                     "muser:lane_node_info{node_class=\"%s\",decoder_class=\"%s\"} 1\n"
                     "# HELP muser:lane_delta_total Delta handoffs: the prefix cache held a prefix, the node shipped the rest.\n# TYPE muser:lane_delta_total counter\n"
                     "muser:lane_delta_total %llu\n"
                     "# HELP muser:lane_delta_held_positions_total Positions delta handoffs did not ship (the cache held them).\n# TYPE muser:lane_delta_held_positions_total counter\n"
                     "muser:lane_delta_held_positions_total %llu\n"
                     "# HELP muser:lane_local_cached_total Prompts left to the prefix cache: it held all but less than a step.\n# TYPE muser:lane_local_cached_total counter\n"
                     "muser:lane_local_cached_total %llu\n",
                     (unsigned long long)s.n_remote, (unsigned long long)s.n_failed, (unsigned long long)s.n_fallback,
                     (unsigned long long)s.n_skipped_open, (unsigned long long)s.n_local_short,
                     (unsigned long long)s.n_bytes, s.open ? 1 : 0, s.breaker_failures, s.breaker_s,
                     (unsigned long long)s.n_cross_class, s.node_class, s.own_class, (unsigned long long)s.n_delta,
                     (unsigned long long)s.n_delta_held, (unsigned long long)s.n_local_cached);
    return n < 0 ? 0 : n >= (int)cap ? (int)cap - 1 : n;
}

/* ====================================================================== */
/* enrollment, qualification, the registry                                */
/* ====================================================================== */

static double wall_ms(void) { return now_s() * 1e3; }

/* A generated prompt of n tokens (seeded): BOS first when the model wants
 * one, then ids drawn uniformly from the vocabulary. */
static void gen_prompt(const mu_model *m, uint64_t seed, int32_t *out, int n) {
    const mu_model_info *I = mu_model_get_info(m);
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (int i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        out[i] = (int32_t)((s >> 33) % (uint64_t)I->n_vocab);
    }
    if (I->add_bos && I->bos >= 0 && n) out[0] = I->bos;
}

static int prefill_local(mu_engine *e, mu_session *s, const int32_t *t, int a, int b, int step, mu_err *err) {
    for (int i = a; i < b; i += step) {
        mu_batch_item it = {.s = s, .tokens = t + i, .n_tokens = b - i < step ? b - i : step};
        int rc = mu_forward(e, &it, 1, err);
        if (rc) return rc;
    }
    return 0;
}

/* The tie-aware rule of the team's fixtures (tests/golden/compare.py),
 * local prefill the reference: greedy ids equal step by step; a mismatch
 * is accepted only where the reference's two picks are a near-tie
 * (log(p_ref(ref_id) / p_ref(our_id)) < 0.02, ours in the reference's top
 * 8), and the comparison stops there; at every compared step each of the
 * reference's top-8 probabilities matches ours within 2e-3. */
#define TIE_LOG 0.02
#define TIE_PROB 2e-3
#define TIE_TOP 8
#define TIE_STEPS 16

typedef struct {
    int steps;       /* steps compared */
    int near_tie_at; /* -1: none */
    double max_dp;   /* the largest top-8 probability difference seen */
} tie_result;

/* Greedy decoding of TIE_STEPS tokens from two sessions whose last forward
 * ended the same prompt (ref: local prefill), compared by the rule above. */
static int tie_compare(mu_engine *e, mu_session *ref, mu_session *ours, tie_result *tr, mu_err *err) {
    const int V = mu_model_get_info(mu_engine_model(e))->n_vocab;
    *tr = (tie_result){0, -1, 0};
    for (int k = 0; k < TIE_STEPS; k++) {
        const float *lr = mu_session_logits(ref, -1), *lo = mu_session_logits(ours, -1);
        int32_t rid[TIE_TOP], oid[1];
        float rp[TIE_TOP], op[1];
        mu_token_probs(lr, V, 0, TIE_TOP, NULL, rid, rp, NULL);
        mu_token_probs(lo, V, 0, 1, NULL, oid, op, NULL);
        tr->steps = k + 1;
        for (int i = 0; i < TIE_TOP; i++) {
            float lp;
            mu_token_probs(lo, V, rid[i], 0, &lp, NULL, NULL, NULL);
            double d = fabs(exp((double)lp) - (double)rp[i]);
            if (d > tr->max_dp) tr->max_dp = d;
            if (d > TIE_PROB)
                return mu_fail(err, MU_E_STATE,
                               "node: qualification: step %d: p(%d) = %.6f after the node's rows, %.6f after local prefill",
                               k, rid[i], exp((double)lp), (double)rp[i]);
        }
        if (oid[0] != rid[0]) {
            for (int i = 1; i < TIE_TOP; i++)
                if (rid[i] == oid[0] && log((double)rp[0] / (double)rp[i]) < TIE_LOG) {
                    tr->near_tie_at = k;
                    return 0;
                }
            return mu_fail(err, MU_E_STATE, "node: qualification: step %d: greedy id %d after the node's rows, %d after local prefill",
                           k, oid[0], rid[0]);
        }
        if (k + 1 == TIE_STEPS) break;
        int rc = 0;
        for (int w = 0; w < 2 && !rc; w++) {
            mu_batch_item it = {.s = w ? ours : ref, .tokens = &rid[0], .n_tokens = 1};
            rc = mu_forward(e, &it, 1, err);
        }
        if (rc) return rc;
    }
    return 0;
}

/* One qualification run: the node's rows and the logits after them against
 * local prefill: bit for bit when the node computes with this engine's
 * kernel class, else greedy ids under the tie-aware rule. */
static int qualify_run(mu_lane *l, int L, uint64_t seed, json_t *runs, mu_err *err) {
    const mu_model *m = mu_engine_model(l->e);
    const mu_model_info *I = mu_model_get_info(m);
    int step = l->o.step, n_ctx = l->o.n_ctx, n_ship = ship_count(l, L);
    int32_t *t = malloc((size_t)L * sizeof *t);
    mu_session *a = NULL, *b = NULL;
    shadow *sh = NULL;
    uint8_t *rows = NULL;
    float *la = NULL;
    bool rows_equal = true, logits_equal = false;
    tie_result tr = {0, -1, 0};
    int rc = t ? 0 : mu_fail(err, MU_E_NOMEM, "node: out of memory");
    if (!rc) gen_prompt(m, seed, t, L);
    double t0 = wall_ms();
    if (!rc) rc = fetch(l, t, 0, n_ship, n_ctx, &sh, err);
    double t1 = wall_ms();
    if (!rc) rc = mu_session_new(l->e, n_ctx, &a, err);
    if (!rc) rc = prefill_local(l->e, a, t, 0, n_ship, step, err);
    double t2 = wall_ms();
    bool cross = sh && sh->cross;
    size_t rb = (size_t)(I->n_head_kv * I->head_dim * 2);
    for (int il = 0; !rc && il < I->n_layer; il++) {
        size_t kb = (size_t)sh->count[il] * rb;
        free(rows);
        if (!(rows = malloc(2 * kb))) rc = mu_fail(err, MU_E_NOMEM, "node: out of memory");
        if (!rc) rc = mu_session_kv_read(a, il, (int)sh->lo[il], (int)sh->count[il], (uint16_t *)rows, (uint16_t *)(rows + kb), err);
        if (!rc && memcmp(rows, sh->rows[il], 2 * kb)) {
            rows_equal = false;
            if (!cross)
                rc = mu_fail(err, MU_E_STATE, "node: qualification: layer %d's rows from the node differ from local prefill", il);
        }
    }
    /* the rest of the prompt on both: the logits must agree bit for bit
     * (same class), or the greedy continuations under the tie-aware rule */
    if (!rc) rc = mu_session_new(l->e, n_ctx, &b, err);
    if (!rc) rc = shadow_install(sh, b, err);
    if (!rc) rc = prefill_local(l->e, a, t, n_ship, L, step, err);
    if (!rc && !(la = malloc((size_t)I->n_vocab * sizeof *la))) rc = mu_fail(err, MU_E_NOMEM, "node: out of memory");
    if (!rc) memcpy(la, mu_session_logits(a, -1), (size_t)I->n_vocab * sizeof *la);
    if (!rc) rc = prefill_local(l->e, b, t, n_ship, L, step, err);
    if (!rc) logits_equal = !memcmp(la, mu_session_logits(b, -1), (size_t)I->n_vocab * sizeof *la);
    if (!rc && !cross && !logits_equal)
        rc = mu_fail(err, MU_E_STATE, "node: qualification: the logits after the node's rows differ from local prefill");
    if (!rc && cross) rc = tie_compare(l->e, a, b, &tr, err);
    if (!rc) {
        json_t *r = json_pack("{s:i, s:i, s:I, s:f, s:f, s:b, s:b}", "tokens", L, "shipped", n_ship, "bytes",
                              (json_int_t)sh->wire_bytes, "remote_ms", t1 - t0, "local_ms", t2 - t1, "rows_equal",
                              rows_equal, "logits_equal", logits_equal);
        if (cross) {
            json_object_set_new(r, "greedy_steps", json_integer(tr.steps));
            json_object_set_new(r, "near_tie_at", json_integer(tr.near_tie_at));
            json_object_set_new(r, "max_prob_diff", json_real(tr.max_dp));
        }
        json_array_append_new(runs, r);
    }
    mu_session_free(a);
    mu_session_free(b);
    shadow_free(sh);
    free(rows);
    free(la);
    free(t);
    return rc;
}

static int qualify(mu_engine *e, const char *model_path, const char *name, int L, json_t *doc, char **report, mu_err *err) {
    const mu_model_info *I = mu_model_get_info(mu_engine_model(e));
    if (L <= 0) L = 2048;
    if (L + TIE_STEPS > I->n_ctx_train) L = I->n_ctx_train - TIE_STEPS;
    int step = L > 1024 ? 512 : L > 128 ? 64 : 8;
    mu_lane_opts o = {.mode = MU_PREFILL_REMOTE, .step = step, .n_ctx = L + TIE_STEPS};
    mu_lane *l = NULL;
    int rc = lane_open(e, model_path, name, &o, &l, err);
    bool cross = l && strcmp(l->node.kclass, l->own_class);
    json_t *runs = json_array();
    for (int r = 0; !rc && r < 3; r++) rc = qualify_run(l, L, (uint64_t)r + 1, runs, err);
    json_t *q = json_pack("{s:b, s:i, s:i, s:o, s:s, s:s, s:s, s:s}", "ok", !rc, "tokens", L, "step", step, "runs", runs,
                          "error", rc ? err->msg : "", "rule", cross ? "tie-aware" : "bit-identical", "node_class",
                          l ? l->node.kclass : "", "decoder_class", l ? l->own_class : "");
    mu_lane_free(l);
    json_object_set(doc, "qualification", q);
    json_object_set_new(doc, "state", json_string(rc ? "failed" : "healthy"));
    json_object_set_new(doc, "qualified_unix", json_integer((json_int_t)time(NULL)));
    mu_err e2 = {0};
    int src = node_save(name, doc, &e2);
    if (report) *report = json_dumps(q, JSON_COMPACT);
    json_decref(q);
    if (!rc && src) {
        *err = e2;
        rc = src;
    }
    return rc;
}

int mu_node_add(mu_engine *e, const char *model_path, const char *name, const char *addr, const char *token,
                int qualify_tokens, char **report, mu_err *err) {
    char path[PATH_MAX];
    struct stat sb;
    int rc = registry_path(name, path, sizeof path, err);
    if (rc) return rc;
    if (!stat(path, &sb)) return mu_fail(err, MU_E_STATE, "node: %s is registered already (muser node remove %s)", name, name);
    enroll_token tk;
    if ((rc = token_parse(token, &tk, err))) return rc;
    node_ref n = {0};
    snprintf(n.name, sizeof n.name, "%s", name);
    memcpy(n.fp, tk.fp, 32);
    if ((rc = conn_split_addr(addr, n.host, sizeof n.host, &n.port, err))) return rc;
    char cert[PATH_MAX], key[PATH_MAX];
    uint8_t my_fp[32];
    tls_ctx *tls = NULL;
    conn *c = NULL;
    uint8_t *buf = NULL;
    size_t cap = 0;
    if ((rc = own_cert("decoder", "localhost", cert, key, sizeof cert, my_fp, err)) ||
        (rc = tls_ctx_new(false, cert, key, &tls, err)) || (rc = lane_connect(tls, &n, DEFAULT_TIMEOUT_MS, &c, err)))
        goto out;
    lane_hello h = {.version = LANE_VERSION, .ask = LANE_ASK_ENROLL};
    memcpy(h.secret, tk.secret, 32);
    uint8_t *hb;
    size_t hn;
    if ((rc = lane_hello_encode(&h, &hb, &hn, err))) goto out;
    rc = conn_write_frame(c, LANE_HELLO, hb, hn, err);
    OPENSSL_cleanse(hb, hn);
    free(hb);
    OPENSSL_cleanse(h.secret, 32);
    unsigned type;
    const uint8_t *pl;
    uint32_t len;
    if (!rc) rc = conn_read_frame(c, &buf, &cap, &type, &pl, &len, err);
    if (rc) goto out;
    if (type == LANE_ABORT) {
        rc = peer_abort(pl, len, err);
        goto out;
    }
    lane_info in;
    if (type != LANE_INFO) {
        rc = mu_fail(err, MU_E_STATE, "lane: order: frame type %u where INFO belongs", type);
        goto out;
    }
    if ((rc = lane_info_decode(pl, len, &in, err))) goto out;
    derive_key(tk.secret, tk.fp, my_fp, n.key);
    n.epoch = in.key_epoch;
    mu_kv_ident *kid = NULL;
    uint8_t mine[32];
    const char *kclass = "";
    if ((rc = mu_kv_ident_new(e, model_path, &kid, err))) goto out;
    mu_kv_ident_digest(kid, 0, mine, &kclass);
    char kc[48];
    snprintf(kc, sizeof kc, "%s", kclass);
    mu_kv_ident_free(kid);
    if (!lane_eq(mine, in.identity, 32)) {
        rc = mu_fail(err, MU_E_STATE,
                     "lane: identity: the node runs another model or cache layout (model '%s'); nothing registered",
                     in.name);
        goto out;
    }
    char pfp[65], dfp[65], khex[65], idhex[65], pc[LANE_CLASS_LEN + 1];
    snprintf(pc, sizeof pc, "%.*s", (int)LANE_CLASS_LEN, in.kclass);
    lane_hex(n.fp, pfp);
    lane_hex(my_fp, dfp);
    lane_hex(n.key, khex);
    lane_hex(in.identity, idhex);
    json_t *doc = json_pack("{s:s, s:s, s:s, s:s, s:i, s:s, s:s, s:s, s:s, s:s, s:I, s:s}", "name", name, "addr", addr,
                            "producer_fp", pfp, "decoder_fp", dfp, "epoch", (int)n.epoch, "key", khex, "identity", idhex,
                            "kernel_class", pc, "decoder_class", kc, "model", in.name, "enrolled_unix",
                            (json_int_t)time(NULL), "state", "enrolled");
    OPENSSL_cleanse(khex, sizeof khex);
    if (!doc) {
        rc = mu_fail(err, MU_E_NOMEM, "node: out of memory");
        goto out;
    }
    rc = node_save(name, doc, err);
    conn_close(c);
    c = NULL;
    if (!rc) rc = qualify(e, model_path, name, qualify_tokens, doc, report, err);
    json_decref(doc);
out:
    OPENSSL_cleanse(&tk, sizeof tk);
    OPENSSL_cleanse(&n, sizeof n);
    conn_close(c);
    tls_ctx_free(tls);
    free(buf);
    return rc;
}

static json_t *probe(const node_ref *n, mu_err *err);

/* Qualifies the node for the kernel class it computes with now (its INFO):
 * a node whose producer changed its backend is qualified again, under the
 * rule its new class takes. */
int mu_node_qualify(mu_engine *e, const char *model_path, const char *name, int qualify_tokens, char **report,
                    mu_err *err) {
    node_ref n;
    json_t *doc = NULL;
    int rc = node_load(name, &n, &doc, err);
    json_t *pr = rc ? NULL : probe(&n, err);
    OPENSSL_cleanse(&n, sizeof n);
    if (rc) return rc;
    if (!json_is_true(json_object_get(pr, "reachable"))) {
        rc = mu_fail(err, MU_E_IO, "node: %s is unreachable: %s", name, json_string_value(json_object_get(pr, "error")) ?: "?");
    } else if (strcmp(json_string_value(json_object_get(pr, "identity")) ?: "",
                      json_string_value(json_object_get(doc, "identity")) ?: "-")) {
        rc = mu_fail(err, MU_E_STATE, "lane: identity: node %s runs another model or cache layout now (model '%s')", name,
                     json_string_value(json_object_get(pr, "model")) ?: "?");
    } else {
        json_object_set(doc, "kernel_class", json_object_get(pr, "kernel_class"));
        rc = node_save(name, doc, err);
    }
    json_decref(pr);
    if (!rc) rc = qualify(e, model_path, name, qualify_tokens, doc, report, err);
    json_decref(doc);
    return rc;
}

int mu_node_remove(const char *name, mu_err *err) {
    char path[PATH_MAX];
    int rc = registry_path(name, path, sizeof path, err);
    if (rc) return rc;
    if (unlink(path)) return mu_fail(err, MU_E_ARG, "node: no node named %s", name);
    return 0;
}

static json_t *probe(const node_ref *n, mu_err *err) {
    char cert[PATH_MAX], key[PATH_MAX];
    uint8_t fp[32];
    tls_ctx *tls = NULL;
    conn *c = NULL;
    uint8_t *buf = NULL, *hb = NULL;
    size_t cap = 0, hn;
    unsigned type;
    const uint8_t *pl;
    uint32_t len;
    lane_info in;
    lane_hello h = {.version = LANE_VERSION, .ask = LANE_ASK_PROBE};
    double t0 = wall_ms();
    int rc = own_cert("decoder", "localhost", cert, key, sizeof cert, fp, err);
    if (!rc) rc = tls_ctx_new(false, cert, key, &tls, err);
    if (!rc) rc = lane_connect(tls, n, 5000, &c, err);
    if (!rc) rc = lane_hello_encode(&h, &hb, &hn, err);
    if (!rc) rc = conn_write_frame(c, LANE_HELLO, hb, hn, err);
    if (!rc) rc = conn_read_frame(c, &buf, &cap, &type, &pl, &len, err);
    if (!rc && type == LANE_ABORT) rc = peer_abort(pl, len, err);
    else if (!rc && type != LANE_INFO) rc = mu_fail(err, MU_E_STATE, "lane: order: frame type %u where INFO belongs", type);
    if (!rc) rc = lane_info_decode(pl, len, &in, err);
    json_t *j;
    if (rc) {
        j = json_pack("{s:b, s:s}", "reachable", 0, "error", err->msg);
    } else {
        char id[65], kc[LANE_CLASS_LEN + 1];
        lane_hex(in.identity, id);
        snprintf(kc, sizeof kc, "%.*s", (int)LANE_CLASS_LEN, in.kclass);
        j = json_pack("{s:b, s:f, s:i, s:s, s:s, s:s, s:i}", "reachable", 1, "rtt_ms", wall_ms() - t0, "epoch",
                      (int)in.key_epoch, "identity", id, "kernel_class", kc, "model", in.name, "max_ctx", (int)in.n_ctx_max);
    }
    conn_close(c);
    tls_ctx_free(tls);
    free(buf);
    free(hb);
    return j;
}

int mu_node_status(bool live, char **json, mu_err *err) {
    char dir[PATH_MAX - 128];
    int rc = home_sub(dir, sizeof dir, "lane", err);
    if (rc) return rc;
    strncat(dir, "/nodes", sizeof dir - strlen(dir) - 1);
    json_t *arr = json_array();
    struct dirent **ents = NULL;
    int n = scandir(dir, &ents, NULL, alphasort);
    for (int i = 0; i < n; i++) {
        size_t l = strlen(ents[i]->d_name);
        if (l > 5 && !strcmp(ents[i]->d_name + l - 5, ".json") && l - 5 < 64) {
            char name[64];
            snprintf(name, sizeof name, "%.*s", (int)(l - 5), ents[i]->d_name);
            node_ref nr;
            json_t *doc = NULL;
            mu_err e2 = {0};
            json_t *entry = json_object();
            json_object_set_new(entry, "name", json_string(name));
            if (node_load(name, &nr, &doc, &e2)) {
                json_object_set_new(entry, "registry", json_pack("{s:s}", "error", e2.msg));
            } else {
                json_object_del(doc, "key"); /* never shown */
                json_object_set(entry, "registry", doc);
                if (live) json_object_set_new(entry, "probe", probe(&nr, &e2));
                json_decref(doc);
            }
            OPENSSL_cleanse(&nr, sizeof nr);
            json_array_append_new(arr, entry);
        }
        free(ents[i]);
    }
    free(ents);
    *json = json_dumps(arr, JSON_INDENT(2));
    json_decref(arr);
    return *json ? 0 : mu_fail(err, MU_E_NOMEM, "node: out of memory");
}
