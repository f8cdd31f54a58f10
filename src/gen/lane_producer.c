/* lane_producer.c: the prefill lane's producer (include/muser_lane.h,
 * docs/lane.md "The producer"): accept, pin, queue and the busy answer,
 * enrollment on the producer's side, the handoff (a session per handoff,
 * the forwards step by step, each layer's rows handed to a sender thread
 * from inside the forward as soon as they are final), the tamper and class
 * test hooks.
 * Owns: the producer's threads, its peers file (<home>/lane/peers), the
 * generation counter. Does not own: the wire (src/net), what the decoder
 * does with the rows (lane_decoder.c).
 * Design: the sender writes (and digests) a layer's frame while the worker
 * computes the next layers and steps (two finished steps queued at most),
 * so memory is bounded and the transfer runs under the compute; the
 * identity and the kernel class are checked before any forward. */
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

#include "lane.h"

#define MAX_WORKERS 16
#define MAX_QUEUE 64

static int send_abort(conn *c, uint32_t code, const char *why) {
    uint8_t *p;
    size_t n;
    mu_err e = {0};
    if (lane_abort_encode(code, why, &p, &n, &e)) return -1;
    int rc = conn_write_frame(c, LANE_ABORT, p, n, &e);
    free(p);
    return rc;
}

typedef struct {
    uint8_t fp[32], key[32];
    uint32_t epoch;
} peer;

/* test hook (docs/lane.md "Tamper hook"): MUSER_LANE_TAMPER is a comma-
 * separated list, entry k acting on the producer's k-th handoff since it
 * started: KIND:FRAME[:OFFSET] or "none". */
typedef enum { T_NONE, T_FLIP, T_TRUNCATE, T_DROP, T_DUP, T_REORDER, T_KILL, T_STALE, T_REPLAY, T_EPOCH, T_RUNS } tamper_kind;
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
        {"reorder", T_REORDER}, {"kill", T_KILL}, {"stale", T_STALE}, {"replay", T_REPLAY}, {"epoch", T_EPOCH},
        {"runs", T_RUNS}};
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
    int rc = mu_lane_write_private(p->peers_path, t, err);
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
    uint8_t (*dg)[32]; /* each LAYER payload's digest, in seq order (the sender's) */
    uint32_t n_dg, cap_dg;
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
        double t0 = mu_lane_now_s();
        if (f->type == LANE_LAYER && !o->failed) { /* its digest, before any tampering */
            if (o->n_dg < o->cap_dg) lane_sha256(f->p, f->n, o->dg[o->n_dg]);
            else rc = mu_fail(&e, MU_E_STATE, "lane: internal: more chunks than declared");
            o->n_dg++;
        }
        if (!last_of_step && !o->failed && !rc) rc = put_frame(o, f->type, f->p, f->n, &e);
        double t1 = mu_lane_now_s();
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

/* Layer streaming: the state of one step's forward as its layers finish. */
typedef struct {
    mu_producer *p;
    out_stream *o;
    mu_session *s;
    const lane_manifest *m;
    uint32_t a, b; /* the step */
    uint32_t chunk; /* LAYER frames made so far: the next seq */
    int rc;         /* the first failure (a forward does not stop for it) */
    mu_err err;
} layer_tap;

/* mu_batch_item.on_layer, on the engine's thread inside the step's forward:
 * once layer il's rows of the whole step [a, b) are final (a step of more
 * than one engine chunk: at its last chunk), its frame, the positions
 * [max(a, lo), b), goes to the sender. The wire order (for each step, for
 * each layer) is the order the forward finishes them in. */
static void layer_final(void *user, int il, int pos0, int n) {
    layer_tap *t = user;
    const lane_manifest *m = t->m;
    if (t->rc || (uint32_t)(pos0 + n) < t->b) return;
    uint32_t lo = m->layers[il].lo > t->a ? m->layers[il].lo : t->a;
    if (lo >= t->b) return;
    uint32_t cnt = t->b - lo;
    size_t len = LANE_LAYER_HDR + 2 * (size_t)cnt * m->row_bytes;
    frame_item *f = malloc(sizeof *f);
    uint8_t *pl = f ? malloc(len) : NULL;
    if (!pl) {
        free(f);
        t->rc = mu_fail(&t->err, MU_E_NOMEM, "lane: out of memory");
        return;
    }
    lane_layer_header(pl, t->chunk, (uint32_t)il, lo, cnt);
    t->rc = mu_session_kv_read(t->s, il, (int)lo, (int)cnt, (uint16_t *)(pl + LANE_LAYER_HDR),
                               (uint16_t *)(pl + LANE_LAYER_HDR + (size_t)cnt * m->row_bytes), &t->err);
    if (t->rc) {
        free(pl);
        free(f);
        return;
    }
    if (t->p->perturb && t->chunk == 0) /* test hook: rows that differ from this engine's in one bit, sealed */
        pl[LANE_LAYER_HDR + (size_t)cnt * m->row_bytes] ^= 1;
    t->chunk++;
    *f = (frame_item){LANE_LAYER, pl, len, NULL};
    out_stream *o = t->o;
    pthread_mutex_lock(&o->mu);
    push(o, f);
    pthread_cond_broadcast(&o->cv);
    pthread_mutex_unlock(&o->mu);
}

static int handoff(mu_producer *p, conn *c, const peer *pr, const lane_hello *h, mu_err *err) {
    const mu_model_info *I = mu_model_get_info(p->m);
    uint32_t *tokens = malloc(4 * (size_t)h->n_ship);
    if (!tokens) return mu_fail(err, MU_E_NOMEM, "lane: out of memory");
    lane_hello_tokens(h, tokens);
    for (uint32_t i = 0; i < h->n_ship; i++)
        if (tokens[i] >= (uint32_t)I->n_vocab) {
            uint32_t bad = tokens[i];
            free(tokens);
            send_abort(c, LANE_ABORT_BAD, "request: token id outside the vocabulary");
            return mu_fail(err, MU_E_ARG, "lane: request: token id %u outside the vocabulary", bad);
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
    uint32_t *runs = NULL;
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
    if (!(runs = malloc(4 * (size_t)(h->n_runs ? h->n_runs : 1)))) {
        rc = mu_fail(err, MU_E_NOMEM, "lane: out of memory");
        goto out;
    }
    lane_hello_runs(h, runs);
    if (tam.kind == T_RUNS && h->n_runs) runs[0] ^= LANE_RUN_SOLO; /* replays another split, says so, sealed */
    lane_runs_digest(runs, h->n_runs, m->runs_digest);
    memcpy(m->kclass, p->kclass, LANE_CLASS_LEN);
    m->n_ctx = h->n_ctx;
    m->step = h->step;
    m->n_have = h->n_have;
    m->n_ship = h->n_ship;
    m->generation = next_generation(p, tam.kind == T_STALE);
    m->key_epoch = pr->epoch + (tam.kind == T_EPOCH ? 1 : 0);
    mu_lane_plan(p->m, m);
    if (!(dg = calloc(m->n_chunks ? m->n_chunks : 1, 32))) {
        rc = mu_fail(err, MU_E_NOMEM, "lane: out of memory");
        goto out;
    }
    o.dg = dg;
    o.cap_dg = m->n_chunks;
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
    /* a delta: the decoder's held prefix, forward by forward as it made it
     * (solo runs as solo rows), so the rows above it attend to the same bits */
    uint32_t pos = 0;
    for (uint32_t r = 0; r < h->n_runs && !rc; r++) {
        uint32_t len = runs[r] & ~LANE_RUN_SOLO;
        double tc = mu_lane_now_s();
        pthread_mutex_lock(&p->engine_mu);
        mu_batch_item it = {.s = s, .tokens = ids + pos, .n_tokens = (int)len, .solo = (runs[r] & LANE_RUN_SOLO) != 0};
        rc = mu_forward(p->e, &it, 1, err);
        pthread_mutex_unlock(&p->engine_mu);
        compute_s += mu_lane_now_s() - tc;
        pos += len;
    }
    layer_tap tap = {.p = p, .o = &o, .s = s, .m = m};
    for (uint64_t a = m->n_have; a < m->n_ship && !rc; a += m->step) {
        uint32_t b = (uint32_t)(a + m->step < m->n_ship ? a + m->step : m->n_ship);
        /* the pipeline is two steps deep: wait while the sender is behind */
        pthread_mutex_lock(&o.mu);
        while (o.queued_steps >= 2 && !o.failed) pthread_cond_wait(&o.cv, &o.mu);
        bool failed = o.failed;
        double tc = mu_lane_now_s();
        o.comp_t0 = tc;
        pthread_mutex_unlock(&o.mu);
        if (failed) break;
        tap.a = (uint32_t)a;
        tap.b = b;
        pthread_mutex_lock(&p->engine_mu);
        /* each layer's frame goes to the sender from inside the forward, as
         * soon as the layer's rows of the step are final (layer_final) */
        mu_batch_item it = {.s = s, .tokens = ids + a, .n_tokens = (int)(b - a), .on_layer = layer_final,
                            .on_layer_user = &tap};
        rc = mu_forward(p->e, &it, 1, err);
        pthread_mutex_unlock(&p->engine_mu);
        if (!rc && tap.rc) {
            rc = tap.rc;
            *err = tap.err;
        }
        double te = mu_lane_now_s();
        compute_s += te - tc;
        frame_item *end = calloc(1, sizeof *end); /* type 0: the step's end marker */
        pthread_mutex_lock(&o.mu);
        if (o.n_iv == o.cap_iv) {
            int nc = o.cap_iv ? 2 * o.cap_iv : 64;
            double(*ni)[2] = realloc(o.iv, (size_t)nc * sizeof *ni);
            if (ni) o.iv = ni, o.cap_iv = nc;
        }
        if (o.n_iv < o.cap_iv) o.iv[o.n_iv][0] = tc, o.iv[o.n_iv][1] = te, o.n_iv++;
        o.comp_t0 = 0;
        if (end) {
            push(&o, end);
            o.queued_steps++;
        }
        pthread_cond_broadcast(&o.cv);
        pthread_mutex_unlock(&o.mu);
        if (!end && !rc) rc = mu_fail(err, MU_E_NOMEM, "lane: out of memory");
    }
    uint32_t chunk = tap.chunk;
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
    if (!rc && (chunk != m->n_chunks || o.n_dg != chunk))
        rc = mu_fail(err, MU_E_STATE, "lane: internal: %u chunks made, %u digested, %u declared", chunk, o.n_dg, m->n_chunks);
    double ts = mu_lane_now_s();
    if (!rc && !(rc = lane_seal_encode(m, (const uint8_t(*)[32])dg, pr->key, &buf, &bn, err)))
        rc = put_frame(&o, LANE_SEAL, buf, bn, err);
    o.send_s += mu_lane_now_s() - ts; /* the SEAL: after the last step, never hidden */
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
    free(runs);
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
            mu_lane_derive_key(p->tok.secret, p->my_fp, c->peer_fp, np.key);
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
    int rc = mu_lane_own_cert("producer", san, cert, key, sizeof cert, p->my_fp, err);
    if (!rc) rc = mu_lane_home_sub(dir, sizeof dir, "lane", err);
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
        mu_lane_token_text(&p->tok, p->token);
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

