/* api_sessions.c: named conversations on the server (/v1/sessions,
 * docs/api.md "Sessions").
 * Owns: the table of sessions (id, revision, the conversation's token ids,
 * the responses remembered by Idempotency-Key), the routes' arguments and
 * answers, and the save hook that persists a turn's KV state as the pack
 * <pack-dir>/session-<id> (encrypted, with its token ids).
 * Does not own: the reuse of KV state (a turn is a keep_prefix job over the
 * whole conversation; the scheduler's ladder finds the live slot, the
 * prefix cache or the session's pack in the store), the pack format (src/kv).
 * Design: a turn is atomic. It is committed (the tokens, revision + 1) only
 * when its job ended normally and, with --pack-dir, its pack was written on
 * the engine thread before the slot took other work (mu_gen_req.save), so
 * the pack is exactly the state the turn left; a failed or cancelled turn
 * leaves the session as it was. A continue names the revision it extends
 * (optimistic concurrency: 409 when another turn came first); with
 * "stream" its text and tokens go out as server-sent events as they come
 * and its answer is the last event. A restore verifies its pack on a
 * thread of its own, never on a connection thread (the session is busy
 * meanwhile), and commits whether or not its client waits for the answer. */
#include <openssl/sha.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "api.h"

#define SESS_MAX 256       /* sessions a server keeps */
#define SESS_ID_MAX 64     /* id bytes: [A-Za-z0-9_-] */
#define SESS_IDEM 16       /* responses remembered per session */
#define SESS_IDEM_KEY 255  /* Idempotency-Key bytes at most */

typedef struct {
    char key[SESS_IDEM_KEY + 1];  /* "" when unused */
    uint8_t digest[32];           /* SHA-256 of the request body (canonical JSON) */
    char *resp;                   /* the JSON answered */
} idem_rec;

typedef struct {
    bool used;
    char id[SESS_ID_MAX + 1];
    int64_t created;
    uint64_t revision;
    int32_t *toks;                /* the conversation: every prompt and generated token */
    int n_toks;
    bool busy;                    /* a turn or a restore is running */
    bool persisted;               /* its pack holds this revision's state */
    uint64_t pack_bytes;
    idem_rec idem[SESS_IDEM];
    int idem_next;
} sess;

struct api_sessions {
    pthread_mutex_t mu;
    pthread_cond_t idle;          /* n_restoring fell to 0 */
    int n_restoring;              /* restore threads running (mu) */
    sess s[SESS_MAX];
    atomic_uint_fast64_t n_made;  /* for generated ids */
    pthread_mutex_t gc_mu;        /* one budget pass at a time */
    uint64_t n_evicted, bytes_evicted, store_bytes; /* (gc_mu) */
};

int api_sessions_new(api_sessions **out) {
    api_sessions *t = calloc(1, sizeof *t);
    if (!t) return -1;
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->idle, NULL);
    pthread_mutex_init(&t->gc_mu, NULL);
    *out = t;
    return 0;
}

static void sess_clear(sess *s) {
    free(s->toks);
    for (int i = 0; i < SESS_IDEM; i++) free(s->idem[i].resp);
    memset(s, 0, sizeof *s);
}

void api_sessions_free(api_sessions *t) {
    if (!t) return;
    pthread_mutex_lock(&t->mu); /* restores still verifying write their result into the table */
    while (t->n_restoring) pthread_cond_wait(&t->idle, &t->mu);
    pthread_mutex_unlock(&t->mu);
    for (int i = 0; i < SESS_MAX; i++) sess_clear(&t->s[i]);
    pthread_cond_destroy(&t->idle);
    pthread_mutex_destroy(&t->mu);
    pthread_mutex_destroy(&t->gc_mu);
    free(t);
}

static bool id_ok(const char *s, size_t n) {
    if (n < 1 || n > SESS_ID_MAX) return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-'))
            return false;
    }
    return true;
}

/* With t->mu held. */
static sess *find(api_sessions *t, const char *id) {
    for (int i = 0; i < SESS_MAX; i++)
        if (t->s[i].used && !strcmp(t->s[i].id, id)) return &t->s[i];
    return NULL;
}

static json_t *sess_json(const sess *s) {
    return json_pack("{s:s,s:s,s:I,s:I,s:i,s:b,s:b}", "id", s->id, "object", "session", "created",
                     (json_int_t)s->created, "revision", (json_int_t)s->revision, "n_tokens", s->n_toks, "persisted",
                     s->persisted, "busy", s->busy);
}

static void pack_path(const mu_http_app *a, const char *id, char *out, size_t cap) {
    snprintf(out, cap, "%s/session-%s", a->pack_dir, id);
}

/* The store's budget (--pack-max-bytes): the least recently used packs go
 * until the store fits, never the one just written (keep). A reader of a
 * pack being removed (the prefix cache's store search, a restore) sees the
 * whole pack or none (mu_kv_store_gc renames it away first). */
void api_sessions_budget(mu_http_app *a, const char *keep) {
    if (!a->pack_dir[0] || !a->pack_max_bytes) return;
    api_sessions *t = a->sessions;
    mu_kv_gc_report rep;
    mu_err err = {0};
    pthread_mutex_lock(&t->gc_mu);
    int rc = mu_kv_store_gc_keep(a->pack_dir, a->pack_max_bytes, keep, false, &rep, &err);
    if (!rc) {
        t->n_evicted += (uint64_t)rep.n_removed;
        t->bytes_evicted += rep.bytes_removed;
        t->store_bytes = rep.bytes - rep.bytes_removed;
    }
    pthread_mutex_unlock(&t->gc_mu);
    if (rc) fprintf(stderr, "muser serve: pack store budget: %s\n", err.msg);
}

void api_sessions_store_stats(mu_http_app *a, uint64_t *n_evicted, uint64_t *bytes_evicted, uint64_t *store_bytes) {
    api_sessions *t = a->sessions;
    pthread_mutex_lock(&t->gc_mu);
    *n_evicted = t->n_evicted;
    *bytes_evicted = t->bytes_evicted;
    *store_bytes = t->store_bytes;
    pthread_mutex_unlock(&t->gc_mu);
}

/* The session's pack is still in the store (the budget may have evicted it). */
static bool pack_there(const mu_http_app *a, const char *id) {
    char path[sizeof a->pack_dir + 100];
    snprintf(path, sizeof path, "%s/session-%s/manifest.kvpk", a->pack_dir, id);
    return !access(path, F_OK);
}

static void no_session(mu_http_req *r, const char *id) {
    char m[128];
    snprintf(m, sizeof m, "sessions: no session %s", id);
    mu_http_reply_error(r, 404, m, NULL);
}

/* ---- the checks of the routes ------------------------------------------ */

/* The route's session with t->mu held, or NULL after answering 404 (t->mu
 * released). */
static sess *lock_session(mu_http_req *r, api_sessions *t, const char *id) {
    pthread_mutex_lock(&t->mu);
    sess *s = find(t, id);
    if (!s) {
        pthread_mutex_unlock(&t->mu);
        no_session(r, id);
    }
    return s;
}

/* With t->mu held: a turn or a restore of s is running: 409, t->mu released. */
static bool busy_refused(mu_http_req *r, api_sessions *t, const sess *s) {
    if (!s->busy) return false;
    pthread_mutex_unlock(&t->mu);
    mu_http_reply_error(r, 409, "sessions: a turn of the session is running", NULL);
    return true;
}

/* With t->mu held: want is not s's revision: 409 naming it, t->mu released. */
static bool revision_refused(mu_http_req *r, api_sessions *t, const sess *s, uint64_t want) {
    if (s->revision == want) return false;
    char m[160];
    snprintf(m, sizeof m, "sessions: revision %llu is not the session's (%llu)", (unsigned long long)want,
             (unsigned long long)s->revision);
    pthread_mutex_unlock(&t->mu);
    mu_http_reply_error(r, 409, m, "revision");
    return true;
}

/* With t->mu held: a free entry of the table named id, or NULL after
 * answering 429 (t->mu released). */
static sess *new_session(mu_http_req *r, api_sessions *t, const char *id) {
    sess *s = NULL;
    for (int i = 0; i < SESS_MAX && !s; i++)
        if (!t->s[i].used) s = &t->s[i];
    if (!s) {
        pthread_mutex_unlock(&t->mu);
        mu_http_reply_error(r, 429, "sessions: the server holds its most sessions (256): delete one", NULL);
        return NULL;
    }
    s->used = true;
    snprintf(s->id, sizeof s->id, "%s", id);
    s->created = api_unix_now();
    return s;
}

/* Without a pack store (--pack-dir): 501 for what needs one. */
static bool store_refused(mu_http_req *r, const mu_http_app *a, const char *what) {
    if (a->pack_dir[0]) return false;
    char m[160];
    snprintf(m, sizeof m, "sessions: %s needs a pack store: start the server with --pack-dir", what);
    mu_http_reply_error(r, 501, m, NULL);
    return true;
}

static void body_digest(const json_t *body, uint8_t out[32]) {
    char *txt = json_dumps(body, JSON_COMPACT | JSON_SORT_KEYS);
    SHA256((const uint8_t *)(txt ? txt : ""), txt ? strlen(txt) : 0, out);
    free(txt);
}

/* ---- the request schemas (api.c: api_schema) ---------------------------- */

static bool check(mu_http_req *r, const json_t *body, const jc_field *f) {
    mu_err err = {0};
    int rc = mu_jc_check(body, f, &err);
    if (rc) mu_http_reply_status(r, rc, &err);
    return !rc;
}

/* ---- create, list, get, delete ---------------------------------------- */

static void sess_create(mu_http_req *r, mu_http_app *a, const json_t *body) {
    if (!check(r, body, api_schema("/v1/sessions"))) return;
    char id[SESS_ID_MAX + 1];
    const char *want = mu_jc_str(body, "id", NULL);
    if (want) {
        if (!id_ok(want, strlen(want))) {
            mu_http_reply_error(r, 400, "sessions: an id is 1..64 of A-Z a-z 0-9 _ -", "id");
            return;
        }
        snprintf(id, sizeof id, "%s", want);
    } else {
        uint64_t k = atomic_fetch_add(&a->sessions->n_made, 1);
        snprintf(id, sizeof id, "sess-%llx-%llx", (unsigned long long)api_unix_now(), (unsigned long long)k);
    }
    api_sessions *t = a->sessions;
    pthread_mutex_lock(&t->mu);
    if (find(t, id)) {
        pthread_mutex_unlock(&t->mu);
        char m[128];
        snprintf(m, sizeof m, "sessions: session %s exists", id);
        mu_http_reply_error(r, 409, m, "id");
        return;
    }
    sess *s = new_session(r, t, id);
    if (!s) return;
    json_t *o = sess_json(s);
    pthread_mutex_unlock(&t->mu);
    mu_http_reply_json(r, 201, o);
}

void api_sessions_root(mu_http_req *r, const json_t *body) {
    mu_http_app *a = mu_http_req_app(r);
    if (body) {
        sess_create(r, a, body);
        return;
    }
    api_sessions *t = a->sessions;
    json_t *arr = json_array();
    pthread_mutex_lock(&t->mu);
    for (int i = 0; i < SESS_MAX && arr; i++)
        if (t->s[i].used) json_array_append_new(arr, sess_json(&t->s[i]));
    pthread_mutex_unlock(&t->mu);
    json_t *o = arr ? json_pack("{s:s,s:o}", "object", "list", "data", arr) : NULL;
    if (o) mu_http_reply_json(r, 200, o);
    else mu_http_reply_error(r, 503, "server: out of memory", NULL);
}

static void sess_delete(mu_http_req *r, mu_http_app *a, const char *id) {
    api_sessions *t = a->sessions;
    sess *s = lock_session(r, t, id);
    if (!s || busy_refused(r, t, s)) return;
    s->busy = true; /* no new turn while its pack goes */
    pthread_mutex_unlock(&t->mu);
    mu_err err = {0};
    int rc = 0;
    if (a->pack_dir[0]) {
        char dir[sizeof a->pack_dir + 80];
        pack_path(a, id, dir, sizeof dir);
        rc = mu_kv_pack_remove(dir, &err);
    }
    pthread_mutex_lock(&t->mu);
    if (rc) s->busy = false;
    else sess_clear(s);
    pthread_mutex_unlock(&t->mu);
    if (rc) {
        mu_http_reply_status(r, rc, &err);
        return;
    }
    mu_http_reply_json(r, 200, json_pack("{s:s,s:s,s:b}", "id", id, "object", "session.deleted", "deleted", 1));
}

/* ---- continue --------------------------------------------------------- */

/* What the save hook shares with the turn: the job holds one reference,
 * the turn the other (a hung-up client frees the turn while the engine
 * may still save). */
typedef struct {
    atomic_int refs;
    mu_http_app *a;
    char dir[4200];
    bool saved;                   /* written by the engine thread before FINISH */
    uint64_t bytes;
    double ms;
} save_ctx;

static void save_unref(void *user) {
    save_ctx *c = user;
    if (c && atomic_fetch_sub(&c->refs, 1) == 1) free(c);
}

static int turn_save(void *user, const mu_session *s, const int32_t *tokens, int n, int32_t last, mu_err *err) {
    save_ctx *c = user;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    /* a delta on the session's previous pack when it can be one: a turn writes only its own positions */
    mu_kv_save_opts so = {.with_tokens = true, .full_ring = true, .tail = &last, .n_tail = 1, .chain = true,
                          .parent = c->dir};
    int rc = mu_kv_pack_save(s, c->a->kv_id, tokens, n, c->a->kv_key, &so, c->dir, err);
    if (!rc) rc = mu_kv_pack_bytes(c->dir, &c->bytes, err);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    c->ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
    c->saved = !rc;
    return rc;
}

typedef struct {
    api_job g;
    mu_http_app *a;
    char id[SESS_ID_MAX + 1];
    uint64_t revision;            /* the revision the turn extends */
    int32_t *conv;                /* the prompt submitted: the conversation and the new input */
    int n_conv;
    char idem[SESS_IDEM_KEY + 1]; /* "" when none */
    uint8_t digest[32];
    bool logprobs;
    bool stream;                  /* server-sent events */
    int sent;                     /* tokens sent (stream) */
    save_ctx *sv;                 /* NULL without --pack-dir */
    bool ended;                   /* committed or given up: the session is no longer busy */
} turn;

/* Ends the turn's hold on its session; commit: the tokens and revision + 1,
 * with resp remembered under the turn's key (taken). */
static void turn_end(turn *u, bool commit, const int32_t *gen, int n_gen, char *resp) {
    if (u->ended) {
        free(resp);
        return;
    }
    u->ended = true;
    api_sessions *t = u->a->sessions;
    pthread_mutex_lock(&t->mu);
    sess *s = find(t, u->id);
    if (s && commit) {
        int32_t *nt = malloc(((size_t)u->n_conv + (size_t)n_gen) * sizeof *nt + 1);
        if (nt) {
            memcpy(nt, u->conv, (size_t)u->n_conv * sizeof *nt);
            memcpy(nt + u->n_conv, gen, (size_t)n_gen * sizeof *nt);
            free(s->toks);
            s->toks = nt;
            s->n_toks = u->n_conv + n_gen;
            s->revision = u->revision + 1;
            s->persisted = u->sv && u->sv->saved;
            s->pack_bytes = u->sv ? u->sv->bytes : 0;
            if (u->idem[0] && resp) {
                idem_rec *rec = &s->idem[s->idem_next];
                s->idem_next = (s->idem_next + 1) % SESS_IDEM;
                free(rec->resp);
                snprintf(rec->key, sizeof rec->key, "%s", u->idem);
                memcpy(rec->digest, u->digest, 32);
                rec->resp = resp;
                resp = NULL;
            }
        }
    }
    if (s) s->busy = false;
    pthread_mutex_unlock(&t->mu);
    free(resp);
}

static void turn_release(void *state) {
    turn *u = state;
    turn_end(u, false, NULL, 0, NULL);
    api_job_free(&u->g);
    save_unref(u->sv);
    free(u->conv);
    free(u);
}

static const char *finish_name(mu_finish f) {
    return f == MU_FINISH_STOP ? "stop" : f == MU_FINISH_WORD ? "stop" : "length";
}

/* The answer of a turn that ended normally, committed (remembered under
 * its Idempotency-Key): its JSON text and a newline, *n bytes, malloc'ed;
 * NULL when out of memory (the turn then ends uncommitted). */
static char *turn_answer(turn *u, size_t *n) {
    api_job *g = &u->g;
    json_t *toks = json_array(), *lps = u->logprobs ? json_array() : NULL;
    for (int i = 0; toks && i < g->n_ids; i++) {
        json_array_append_new(toks, json_integer(g->ids[i]));
        if (lps) json_array_append_new(lps, json_real(g->toks[i].logprob));
    }
    json_t *o = json_pack("{s:s,s:s,s:I,s:o,s:o,s:i,s:s,s:b,s:o}", "id", u->id, "object", "session.turn", "revision",
                          (json_int_t)(u->revision + 1), "content", api_json_text(g->content.p ? g->content.p : "", g->content.n),
                          "tokens", toks, "n_tokens", u->n_conv + g->n_ids, "finish_reason", finish_name(g->finish),
                          "persisted", u->sv && u->sv->saved, "timings", api_job_timings(g));
    /* what the ladder reused, beside timings as on /completion */
    if (o) json_object_set_new(o, "cache_source", json_string(mu_kv_src_name(g->st.reuse_src)));
    if (o && lps) json_object_set_new(o, "logprobs", lps);
    else json_decref(lps);
    if (o && u->sv && u->sv->saved) {
        json_object_set_new(o, "pack_bytes", json_integer((json_int_t)u->sv->bytes));
        json_object_set_new(o, "save_ms", json_real(u->sv->ms));
    }
    /* the answer as text: a replay by Idempotency-Key sends these bytes again */
    mu_http_buf b = {0};
    if (o) mu_http_buf_json(&b, o);
    mu_http_buf_add(&b, "\n", 1);
    json_decref(o);
    char *txt = !o || b.oom ? NULL : strndup(b.p, b.n);
    mu_http_buf_free(&b);
    if (!txt) {
        turn_end(u, false, NULL, 0, NULL);
        return NULL;
    }
    char *keep = u->idem[0] ? strdup(txt) : NULL;
    if (u->idem[0] && !keep) {
        free(txt);
        turn_end(u, false, NULL, 0, NULL);
        return NULL;
    }
    *n = strlen(txt);
    turn_end(u, true, g->ids, g->n_ids, keep);
    return txt;
}

/* After the answer went out: the store's budget, never the pack just written. */
static void turn_budget(turn *u) {
    if (!u->sv || !u->sv->saved) return;
    char name[SESS_ID_MAX + 16];
    snprintf(name, sizeof name, "session-%s", u->id);
    api_sessions_budget(u->a, name);
}

static bool turn_poll(void *state, mu_http_req *r) {
    turn *u = state;
    if (api_job_poll(&u->g, mu_http_req_fd(r))) return false;
    api_job *g = &u->g;
    if (g->finish == MU_FINISH_ERROR || g->finish == MU_FINISH_CANCEL) {
        turn_end(u, false, NULL, 0, NULL);
        api_job_reply_failed(r, g);
        return true;
    }
    size_t n = 0;
    char *txt = turn_answer(u, &n);
    if (!txt) {
        mu_http_reply_error(r, 503, "server: out of memory", NULL);
        return true;
    }
    mu_http_reply_text(r, 200, "application/json; charset=utf-8", txt, n);
    free(txt);
    turn_budget(u);
    return true;
}

/* "stream": one event per read of the job, {"object": "session.turn.chunk",
 * "id", "revision", "content": the text released since the last, "tokens":
 * the ids generated since the last, "logprobs"?}, then the answer itself
 * as the last event (object "session.turn", committed before it is sent)
 * and data: [DONE]. An error ends the stream with {"error": {...}}, the
 * session unchanged. */
static int turn_produce(void *state, mu_http_buf *out, int fd) {
    turn *u = state;
    api_job *g = &u->g;
    bool running = api_job_poll(g, fd);
    if (g->finish == MU_FINISH_CANCEL) return -1; /* the release ends the turn uncommitted */
    if (!running && g->finish == MU_FINISH_ERROR) {
        turn_end(u, false, NULL, 0, NULL);
        json_t *e = json_pack("{s:{s:i,s:s,s:s}}", "error", "code", 500, "message", g->err, "type", "server_error");
        mu_http_buf_str(out, "data: ");
        if (e) mu_http_buf_json(out, e);
        mu_http_buf_str(out, "\n\ndata: [DONE]\n\n");
        json_decref(e);
        return 0;
    }
    size_t nc = 0;
    const char *cs = api_job_take_content(g, &nc);
    if (g->n_ids > u->sent || nc) {
        json_t *toks = json_array(), *lps = u->logprobs ? json_array() : NULL;
        for (int i = u->sent; toks && i < g->n_ids; i++) {
            json_array_append_new(toks, json_integer(g->ids[i]));
            if (lps) json_array_append_new(lps, json_real(g->toks[i].logprob));
        }
        json_t *c = json_pack("{s:s,s:s,s:I,s:o,s:o}", "id", u->id, "object", "session.turn.chunk", "revision",
                              (json_int_t)(u->revision + 1), "content", api_json_text(cs, nc), "tokens", toks);
        if (c && lps) json_object_set_new(c, "logprobs", lps);
        else json_decref(lps);
        if (!c) return -1;
        mu_http_buf_str(out, "data: ");
        mu_http_buf_json(out, c);
        mu_http_buf_str(out, "\n\n");
        json_decref(c);
        u->sent = g->n_ids;
    }
    if (running) return 1;
    size_t n = 0;
    char *txt = turn_answer(u, &n);
    if (!txt) return -1;
    mu_http_buf_str(out, "data: ");
    mu_http_buf_add(out, txt, n - 1); /* without its newline */
    mu_http_buf_str(out, "\n\ndata: [DONE]\n\n");
    free(txt);
    turn_budget(u);
    return out->oom ? -1 : 0;
}

/* The input of a turn: text (BOS first when the conversation is empty and
 * the model adds one), or token ids as given. */
static bool turn_input(mu_http_req *r, mu_http_app *a, const json_t *p, bool first, int32_t **ids, int *n) {
    mu_err err = {0};
    if (json_is_string(p)) {
        const char *s = json_string_value(p);
        int rc = first ? api_tokenize_prompt(a, s, true, ids, n, &err)
                       : mu_tok_encode(a->tok, s, json_string_length(p), true, ids, n, &err);
        if (rc) {
            mu_http_reply_status(r, rc, &err);
            return false;
        }
    } else {
        size_t k = json_array_size(p);
        *ids = malloc((k ? k : 1) * sizeof **ids);
        if (!*ids) {
            mu_http_reply_error(r, 503, "server: out of memory", NULL);
            return false;
        }
        for (size_t i = 0; i < k; i++) (*ids)[i] = (int32_t)json_integer_value(json_array_get(p, i));
        *n = (int)k;
    }
    if (*n < 1) {
        free(*ids);
        mu_http_reply_error(r, 400, "sessions: the prompt is empty", "prompt");
        return false;
    }
    return true;
}

static void sess_continue(mu_http_req *r, mu_http_app *a, const char *id, const json_t *body) {
    if (!check(r, body, api_schema("/v1/sessions/{id}/continue"))) return;
    const char *key = mu_http_req_header(r, "Idempotency-Key");
    if (key && (!*key || strlen(key) > SESS_IDEM_KEY)) {
        mu_http_reply_error(r, 400, "sessions: an Idempotency-Key is 1..255 bytes", NULL);
        return;
    }
    uint64_t want = (uint64_t)mu_jc_int(body, "revision", 0);
    uint8_t digest[32];
    body_digest(body, digest);
    const bool stream = mu_jc_bool(body, "stream", false);
    api_sessions *t = a->sessions;
    sess *s = lock_session(r, t, id);
    if (!s) return;
    if (key) {
        for (int i = 0; i < SESS_IDEM; i++) {
            idem_rec *rec = &s->idem[i];
            if (!rec->resp || strcmp(rec->key, key)) continue;
            if (memcmp(rec->digest, digest, 32)) {
                pthread_mutex_unlock(&t->mu);
                mu_http_reply_error(r, 422, "sessions: this Idempotency-Key was used with another request body", NULL);
                return;
            }
            /* the same answer, nothing run again (streamed: as the last event) */
            mu_http_buf again = {0};
            if (stream) mu_http_buf_str(&again, "data: ");
            mu_http_buf_str(&again, rec->resp);
            if (stream) mu_http_buf_str(&again, "\ndata: [DONE]\n\n");
            pthread_mutex_unlock(&t->mu);
            if (again.oom) mu_http_reply_error(r, 503, "server: out of memory", NULL);
            else
                mu_http_reply_text_hdr(r, 200, stream ? "text/event-stream" : "application/json; charset=utf-8",
                                       again.p, again.n, "Idempotent-Replayed", "true");
            mu_http_buf_free(&again);
            return;
        }
    }
    if (busy_refused(r, t, s) || revision_refused(r, t, s, want)) return;
    turn *u = calloc(1, sizeof *u);
    int32_t *conv = u && s->n_toks ? malloc((size_t)s->n_toks * sizeof *conv) : NULL;
    if (!u || (s->n_toks && !conv)) {
        pthread_mutex_unlock(&t->mu);
        free(u);
        mu_http_reply_error(r, 503, "server: out of memory", NULL);
        return;
    }
    int n_have = s->n_toks;
    if (n_have) memcpy(conv, s->toks, (size_t)n_have * sizeof *conv);
    s->busy = true;
    pthread_mutex_unlock(&t->mu);
    u->a = a;
    snprintf(u->id, sizeof u->id, "%s", id);
    u->revision = want;
    u->logprobs = mu_jc_bool(body, "logprobs", false);
    u->stream = stream;
    if (key) snprintf(u->idem, sizeof u->idem, "%s", key);
    memcpy(u->digest, digest, 32);
    int32_t *in = NULL;
    int n_in = 0;
    if (!turn_input(r, a, json_object_get(body, "prompt"), n_have == 0, &in, &n_in)) {
        free(conv);
        turn_release(u); /* (the session is free again) */
        return;
    }
    int32_t *all = realloc(conv, ((size_t)n_have + (size_t)n_in) * sizeof *all);
    if (!all) {
        free(in);
        free(conv);
        turn_release(u);
        mu_http_reply_error(r, 503, "server: out of memory", NULL);
        return;
    }
    memcpy(all + n_have, in, (size_t)n_in * sizeof *all);
    free(in);
    u->n_conv = n_have + n_in;
    u->conv = malloc((size_t)u->n_conv * sizeof *u->conv);
    if (!u->conv) {
        free(all);
        turn_release(u);
        mu_http_reply_error(r, 503, "server: out of memory", NULL);
        return;
    }
    memcpy(u->conv, all, (size_t)u->n_conv * sizeof *all);
    mu_gen_req q = {0};
    q.n_predict = (int)mu_jc_int(body, "n_predict", -1);
    q.sp = api_sample_params(a, body, "seed");
    q.ignore_eos = mu_jc_bool(body, "ignore_eos", false);
    if (q.ignore_eos) api_ban_eog(a, &q.sp);
    q.logprobs = u->logprobs;
    q.keep_prefix = true;
    if (a->pack_dir[0]) {
        u->sv = calloc(1, sizeof *u->sv);
        if (!u->sv) {
            free(all);
            turn_release(u);
            mu_http_reply_error(r, 503, "server: out of memory", NULL);
            return;
        }
        atomic_init(&u->sv->refs, 2); /* the turn's and the job's */
        u->sv->a = a;
        pack_path(a, id, u->sv->dir, sizeof u->sv->dir);
        q.save = turn_save;
        q.save_user = u->sv;
        q.save_free = save_unref;
    }
    if (!api_job_start(r, &u->g, a, all, u->n_conv, &q, json_object_get(body, "stop"))) {
        if (u->sv) save_unref(u->sv); /* the job's share: it was never made */
        turn_release(u);
        return;
    }
    u->g.want_toks = u->logprobs;
    if (stream) mu_http_reply_stream(r, "text/event-stream", turn_produce, turn_release, u);
    else mu_http_reply_later(r, turn_poll, turn_release, u);
}

/* ---- save and restore ------------------------------------------------- */

/* POST /v1/sessions/{id}/save: every turn is saved as it ends; this says
 * whether the session's pack holds its last revision. */
static void sess_save(mu_http_req *r, mu_http_app *a, const char *id, const json_t *body) {
    if (!check(r, body, api_schema("/v1/sessions/{id}/save")) || store_refused(r, a, "saving")) return;
    api_sessions *t = a->sessions;
    sess *s = lock_session(r, t, id);
    if (!s) return;
    if (s->persisted && !s->busy && !pack_there(a, id)) s->persisted = false; /* evicted by the budget */
    if (busy_refused(r, t, s)) return;
    if (!s->persisted) {
        pthread_mutex_unlock(&t->mu);
        mu_http_reply_error(r, 409,
                            "sessions: the session's state is not saved (no turn yet, or the store's budget "
                            "evicted its pack): continue it first",
                            NULL);
        return;
    }
    char dir[sizeof a->pack_dir + 80];
    pack_path(a, id, dir, sizeof dir);
    json_t *o = json_pack("{s:s,s:s,s:I,s:i,s:s,s:I,s:b}", "id", s->id, "object", "session.saved", "revision",
                          (json_int_t)s->revision, "n_tokens", s->n_toks, "pack", strrchr(dir, '/') + 1, "pack_bytes",
                          (json_int_t)s->pack_bytes, "encrypted", 1);
    pthread_mutex_unlock(&t->mu);
    mu_http_reply_json(r, 200, o);
}

/* A restore's verification, on a thread of its own: it holds one
 * reference, the request the other (r is NULL once the request is gone). */
typedef struct {
    pthread_mutex_t mu;
    int refs;
    mu_http_req *r;
    mu_http_app *a;
    char id[SESS_ID_MAX + 1];
    bool done;
    int status;                   /* the answer: 200 with o, else the error msg */
    json_t *o;
    char msg[400];
} restore_job;

static void restore_unref(restore_job *j) {
    pthread_mutex_lock(&j->mu);
    bool last = --j->refs == 0;
    pthread_mutex_unlock(&j->mu);
    if (!last) return;
    json_decref(j->o);
    pthread_mutex_destroy(&j->mu);
    free(j);
}

/* Verifies the pack (identity, every chunk, the token sidecar) and makes
 * the session what it holds, or leaves it as it was. */
static void *restore_main(void *arg) {
    restore_job *j = arg;
    mu_http_app *a = j->a;
    api_sessions *t = a->sessions;
    char dir[sizeof a->pack_dir + 80];
    pack_path(a, j->id, dir, sizeof dir);
    mu_err err = {0};
    int32_t *ids = NULL;
    int n = 0, n_pos = 0;
    uint64_t bytes = 0;
    /* tests: the verification waits until this file exists (the server
     * meanwhile serves other requests; tests/e2e/test_serve_sessions.sh) */
    const char *gate = getenv("MUSER_TEST_RESTORE_GATE");
    while (gate && *gate && access(gate, F_OK)) usleep(10000);
    int rc = mu_kv_pack_verify(dir, a->kv_key, a->kv_id, a->n_ctx, &err);
    if (!rc) rc = mu_kv_pack_tokens_ex(dir, a->kv_key, &ids, &n, &n_pos, &err);
    if (!rc && n != n_pos + 1)
        rc = mu_fail(&err, MU_E_FORMAT, "sessions: the pack of %s is not a session's (no last token)", j->id);
    if (!rc) rc = mu_kv_pack_bytes(dir, &bytes, &err);
    pthread_mutex_lock(&t->mu);
    sess *s = find(t, j->id); /* busy: no route changed or removed it */
    if (rc) {
        s->busy = false;
        if (!s->n_toks && !s->revision) sess_clear(s); /* made for this restore */
        free(ids);
        const char *v = mu_kv_verdict(&err);
        snprintf(j->msg, sizeof j->msg, "sessions: cannot restore %s: %s%s%s", j->id, err.msg, v ? " (verdict: " : "",
                 v ? v : "");
        if (v) strncat(j->msg, ")", sizeof j->msg - strlen(j->msg) - 1);
        j->status = rc == MU_E_IO ? 404 : 400;
    } else {
        free(s->toks);
        s->toks = ids;
        s->n_toks = n;
        s->revision++; /* a change of the session, like a turn */
        s->persisted = true;
        s->pack_bytes = bytes;
        for (int i = 0; i < SESS_IDEM; i++) { /* the answers remembered were for turns this state may not hold */
            free(s->idem[i].resp);
            memset(&s->idem[i], 0, sizeof s->idem[i]);
        }
        s->busy = false;
        j->o = sess_json(s);
        if (j->o) json_object_set_new(j->o, "pack_bytes", json_integer((json_int_t)bytes));
        j->status = j->o ? 200 : 503;
        if (!j->o) snprintf(j->msg, sizeof j->msg, "server: out of memory");
    }
    pthread_mutex_unlock(&t->mu);
    pthread_mutex_lock(&j->mu);
    j->done = true;
    if (j->r) mu_http_req_wake(j->r);
    pthread_mutex_unlock(&j->mu);
    restore_unref(j);
    pthread_mutex_lock(&t->mu);
    if (--t->n_restoring == 0) pthread_cond_broadcast(&t->idle);
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

static bool restore_poll(void *state, mu_http_req *r) {
    restore_job *j = state;
    pthread_mutex_lock(&j->mu);
    bool done = j->done;
    pthread_mutex_unlock(&j->mu);
    if (!done) return false;
    if (j->status == 200) {
        mu_http_reply_json(r, 200, j->o);
        j->o = NULL;
    } else {
        mu_http_reply_error(r, j->status, j->msg, NULL);
    }
    return true;
}

static void restore_release(void *state) {
    restore_job *j = state;
    pthread_mutex_lock(&j->mu);
    j->r = NULL;
    pthread_mutex_unlock(&j->mu);
    restore_unref(j);
}

/* POST /v1/sessions/{id}/restore: the session as its pack holds it (after
 * a restart, or to go back to the last saved turn); created when absent. The
 * pack is verified against this server's model and engine now, off the
 * connection thread; its KV state is installed by the next turn (the
 * ladder's pack store). */
static void sess_restore(mu_http_req *r, mu_http_app *a, const char *id, const json_t *body) {
    if (!check(r, body, api_schema("/v1/sessions/{id}/save")) || store_refused(r, a, "restoring")) return;
    restore_job *j = calloc(1, sizeof *j);
    if (!j) {
        mu_http_reply_error(r, 503, "server: out of memory", NULL);
        return;
    }
    pthread_mutex_init(&j->mu, NULL);
    j->refs = 2;
    j->r = r;
    j->a = a;
    snprintf(j->id, sizeof j->id, "%s", id);
    api_sessions *t = a->sessions;
    pthread_mutex_lock(&t->mu);
    sess *s = find(t, id);
    if ((s && busy_refused(r, t, s)) || (!s && !(s = new_session(r, t, id)))) {
        j->refs = 1;
        restore_unref(j);
        return;
    }
    s->busy = true;
    t->n_restoring++;
    pthread_mutex_unlock(&t->mu);
    pthread_attr_t at;
    pthread_t th;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    int e = pthread_create(&th, &at, restore_main, j);
    pthread_attr_destroy(&at);
    if (e) { /* no thread: the session as it was */
        pthread_mutex_lock(&t->mu);
        s->busy = false;
        if (!s->n_toks && !s->revision) sess_clear(s);
        if (--t->n_restoring == 0) pthread_cond_broadcast(&t->idle);
        pthread_mutex_unlock(&t->mu);
        j->refs = 1;
        restore_unref(j);
        mu_http_reply_error(r, 503, "sessions: cannot start a restore thread", NULL);
        return;
    }
    mu_http_reply_later(r, restore_poll, restore_release, j);
}

/* ---- the routes under /v1/sessions/ ----------------------------------- */

/* /v1/sessions/{id}[/{action}]: id (and action, "" when none) into the buffers. */
static bool split_path(mu_http_req *r, char *id, size_t cap_id, char *act, size_t cap_act) {
    const char *p = mu_http_req_path(r) + strlen("/v1/sessions/");
    const char *sl = strchr(p, '/');
    size_t n = sl ? (size_t)(sl - p) : strlen(p);
    if (!id_ok(p, n) || n >= cap_id) return false;
    memcpy(id, p, n);
    id[n] = 0;
    snprintf(act, cap_act, "%s", sl ? sl + 1 : "");
    return strlen(sl ? sl + 1 : "") < cap_act;
}

void api_sessions_item(mu_http_req *r, const json_t *body) {
    mu_http_app *a = mu_http_req_app(r);
    char id[SESS_ID_MAX + 1], act[32];
    if (!split_path(r, id, sizeof id, act, sizeof act)) {
        mu_http_reply_error(r, 404, "sessions: no such session route", NULL);
        return;
    }
    const char *m = mu_http_req_method(r);
    if (!strcmp(m, "POST") && !strcmp(act, "continue")) sess_continue(r, a, id, body);
    else if (!strcmp(m, "POST") && !strcmp(act, "save")) sess_save(r, a, id, body);
    else if (!strcmp(m, "POST") && !strcmp(act, "restore")) sess_restore(r, a, id, body);
    else if (!strcmp(m, "DELETE") && !act[0]) sess_delete(r, a, id);
    else if (!strcmp(m, "GET") && !act[0]) {
        api_sessions *t = a->sessions;
        sess *s = lock_session(r, t, id);
        if (!s) return;
        json_t *o = sess_json(s);
        pthread_mutex_unlock(&t->mu);
        if (o) mu_http_reply_json(r, 200, o);
        else mu_http_reply_error(r, 503, "server: out of memory", NULL);
    } else {
        mu_http_reply_error(r, 404, "sessions: no such session route", NULL);
    }
}
