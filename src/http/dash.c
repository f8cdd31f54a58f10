/* dash.c: the dashboard page and its data (dash.h).
 * Owns: GET / and /dashboard (the page src/http/dash.html, embedded in the
 * binary at build time: no CDN, works offline), GET /snapshot (JSON) and
 * GET /telemetry (the same object as server-sent events, once a second),
 * the login routes (POST /login, POST /logout, GET /session; the sessions
 * themselves are server.c's and session.c's).
 * Does not own: what is counted (the scheduler's metrics, the transport's
 * counters) or the Prometheus text of /metrics (api_llamacpp.c).
 * Design: each number in /snapshot is an object {"value": V, "tag": T} with
 * T "measured" (read from a counter or the OS now), "target" (a goal, not an
 * observation), or "unavailable" (value null and a "why"): the page shows the
 * tag beside the number, so nothing that was not measured looks like data. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "api.h"
#include "dash.h"

void api_dash_page(mu_http_req *r, const json_t *body) {
    (void)body;
    mu_http_reply_text(r, 200, "text/html; charset=utf-8", (const char *)mu_dash_html, mu_dash_html_len);
}

/* ---- login (docs/dashboard.md, "Login") ------------------------------- */

/* A JSON reply with a Set-Cookie header (j consumed). */
static void reply_json_cookie(mu_http_req *r, int status, json_t *j, const char *cookie) {
    mu_http_buf b = {0};
    if (j) mu_http_buf_json(&b, j);
    json_decref(j);
    if (!j || b.oom) {
        mu_http_buf_free(&b);
        mu_http_reply_error(r, 503, "server: out of memory", NULL);
        return;
    }
    mu_http_buf_add(&b, "\n", 1);
    mu_http_reply_text_hdr(r, status, "application/json; charset=utf-8", b.p, b.n, "Set-Cookie",
                           cookie);
    mu_http_buf_free(&b);
}

/* POST /login {"key": K}: public (the key is the credential); a session
 * cookie and the session's CSRF token for the page. */
void api_dash_login(mu_http_req *r, const json_t *body) {
    const json_t *k = json_is_object(body) ? json_object_get(body, "key") : NULL;
    if (!json_is_string(k)) {
        mu_http_reply_error(r, 400, "login: \"key\" must be a string", "key");
        return;
    }
    char csrf[MU_SESS_TOKEN_LEN + 1], cookie[256];
    mu_err err = {0};
    int rc = mu_http_req_login(r, json_string_value(k), json_string_length(k), csrf, cookie, sizeof cookie, &err);
    if (rc == MU_E_ARG) {
        mu_http_reply_error(r, 401, err.msg, "key");
        return;
    }
    if (rc == MU_E_STATE) {
        mu_http_reply_error(r, 400, err.msg, NULL);
        return;
    }
    if (rc) {
        mu_http_reply_error(r, 500, err.msg, NULL);
        return;
    }
    reply_json_cookie(r, 200, json_pack("{s:s,s:i}", "csrf", csrf, "expires_in_s", MU_SESS_TTL_S), cookie);
}

/* POST /logout: ends the session of the request's cookie and clears it
 * (behind the auth check: the cookie with the CSRF token, or the key). */
void api_dash_logout(mu_http_req *r, const json_t *body) {
    (void)body;
    char cookie[256];
    mu_http_req_logout(r, cookie, sizeof cookie);
    reply_json_cookie(r, 200, json_pack("{s:b}", "logged_in", 0), cookie);
}

/* GET /session: public; whether a key is needed and, when the request's
 * cookie names a live session, its CSRF token (a same-origin read only: no
 * CORS header ever allows credentials, so another site cannot read it). */
void api_dash_session(mu_http_req *r, const json_t *body) {
    (void)body;
    char csrf[MU_SESS_TOKEN_LEN + 1];
    bool in = mu_http_req_session(r, csrf);
    mu_http_reply_json(r, 200, json_pack("{s:b,s:b,s:o}", "key_required", mu_http_req_needs_key(r), "logged_in", in,
                                         "csrf", in ? json_string(csrf) : json_null()));
}

static json_t *measured(double v) { return json_pack("{s:f,s:s}", "value", v, "tag", "measured"); }
static json_t *measured_i(uint64_t v) { return json_pack("{s:I,s:s}", "value", (json_int_t)v, "tag", "measured"); }
static json_t *unavailable(const char *why) { return json_pack("{s:n,s:s,s:s}", "value", "tag", "unavailable", "why", why); }

static double mono_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Resident set size of this process from /proc/self/statm; 0 if unreadable. */
static uint64_t rss_bytes(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f) return 0;
    unsigned long long size = 0, res = 0;
    int n = fscanf(f, "%llu %llu", &size, &res);
    fclose(f);
    long page = sysconf(_SC_PAGESIZE);
    return n == 2 && page > 0 ? (uint64_t)res * (uint64_t)page : 0;
}

/* The snapshot object (NULL when out of memory). */
static json_t *snapshot_json(mu_http_app *a) {
    mu_sched_metrics m;
    mu_sched_get_metrics(a->sched, &m);
    mu_http_counters c = {0};
    if (a->server) mu_http_server_counters(a->server, &c);
    json_t *slots = json_array();
    for (int i = 0; i < a->n_slots; i++) {
        mu_sched_slot_info si;
        mu_sched_get_slot(a->sched, i, &si);
        json_array_append_new(slots, json_pack("{s:i,s:s,s:o,s:o,s:o}", "id", i, "state", si.busy ? "busy" : "idle",
                                               "n_past", measured_i((uint64_t)si.n_past), "n_prompt",
                                               measured_i((uint64_t)si.n_prompt), "n_gen",
                                               measured_i((uint64_t)si.n_gen)));
    }
    uint64_t rss = rss_bytes();
    /* averages over finished requests: the scheduler adds a job's tokens
     * and seconds together when it ends (n_*_timed, prompt_s, gen_s) */
    json_t *o = json_pack(
        "{s:i,s:o,s:{s:s,s:s,s:o,s:i,s:i},s:{s:s,s:s},"
        "s:{s:o,s:o,s:o,s:o,s:o},"
        "s:{s:o,s:o,s:o,s:o,s:o},"
        "s:{s:o,s:o,s:o},"
        "s:o,"
        "s:{s:o,s:o,s:o},"
        "s:{s:o,s:o,s:o,s:o,s:o},"
        "s:o}",
        "version", 1, "uptime_s", measured(mono_s() - a->t_start_mono),
        "model", "id", a->model_id, "path", a->model_path, "file_bytes", measured_i(a->model_bytes), "n_ctx", a->n_ctx,
        "n_slots", a->n_slots,
        "backend", "engine", a->backend[0] ? a->backend : "unknown", "kernels", a->kernels[0] ? a->kernels : "unknown",
        "requests", "total", measured_i(m.n_requests), "processing", measured_i((uint64_t)m.n_processing), "queued",
        measured_i((uint64_t)m.n_queued), "rejected_busy", measured_i(m.n_busy_rejects), "cancelled",
        measured_i(m.n_cancelled),
        "tokens", "prompt_total", measured_i(m.n_prompt_tokens), "gen_total", measured_i(m.n_gen_tokens),
        "prompt_seconds", measured(m.prompt_s), "gen_seconds", measured(m.gen_s), "forward_calls",
        measured_i(m.n_forward),
        "throughput", "prefill_tok_s",
        m.prompt_s > 0 ? measured(m.n_prompt_timed / m.prompt_s) : unavailable("no request has finished yet"),
        "decode_tok_s",
        m.gen_s > 0 ? measured(m.n_gen_timed / m.gen_s) : unavailable("no request has generated yet"),
        "ttft_s", unavailable("the scheduler does not record time to first token"),
        "slots", slots,
        "memory", "rss_bytes", rss ? measured_i(rss) : unavailable("/proc/self/statm is unreadable"), "kv_bytes",
        unavailable("the engine does not report KV cache use"), "prefix_cache_bytes",
        unavailable("there is no prefix cache yet"),
        "http", "requests", measured_i(c.requests), "errors_4xx", measured_i(c.errors_4xx), "errors_5xx",
        measured_i(c.errors_5xx), "connections_open", measured_i(c.conns_open), "connections_refused",
        measured_i(c.conns_refused),
        "remote_prefill", unavailable("no remote prefill lane is built"));
    return o;
}

void api_dash_snapshot(mu_http_req *r, const json_t *body) {
    (void)body;
    json_t *o = snapshot_json(mu_http_req_app(r));
    if (!o) {
        mu_http_reply_error(r, 503, "server: out of memory", NULL);
        return;
    }
    mu_http_reply_json(r, 200, o);
}

/* ---- /telemetry: the snapshot as server-sent events, once a second ----
 * A stream waits suspended like any reply that waits (server.h); one ticker
 * thread (started with the first stream, alive until the process ends)
 * wakes every open stream once a second, and each wake sends the snapshot
 * if the tick moved. The registry's lock is held while waking, and a stream
 * leaves the registry in its release, so no stream is woken after it ended. */

#define TELEMETRY_MAX 64

static pthread_mutex_t tel_mu = PTHREAD_MUTEX_INITIALIZER;
static mu_http_req *tel_reqs[TELEMETRY_MAX];
static int tel_n;
static bool tel_ticking;
static atomic_uint_fast64_t tel_tick = 1;

typedef struct {
    mu_http_app *a;
    mu_http_req *r;
    uint64_t sent;   /* the tick last sent (0: none yet) */
} tel_state;

static void *tel_main(void *arg) {
    (void)arg;
    for (;;) {
        struct timespec ts = {1, 0};
        while (nanosleep(&ts, &ts)) {}
        pthread_mutex_lock(&tel_mu);
        atomic_fetch_add(&tel_tick, 1);
        for (int i = 0; i < tel_n; i++) mu_http_req_wake(tel_reqs[i]);
        pthread_mutex_unlock(&tel_mu);
    }
    return NULL;
}

static int tel_produce(void *state, mu_http_buf *out, int fd) {
    (void)fd;
    tel_state *st = state;
    uint64_t t = atomic_load(&tel_tick);
    if (t == st->sent) return 1; /* nothing new: wait for the next tick */
    st->sent = t;
    json_t *o = snapshot_json(st->a);
    if (!o) return -1;
    mu_http_buf_str(out, "data: ");
    mu_http_buf_json(out, o);
    mu_http_buf_str(out, "\n\n");
    json_decref(o);
    return 1;
}

static void tel_release(void *state) {
    tel_state *st = state;
    pthread_mutex_lock(&tel_mu);
    for (int i = 0; i < tel_n; i++)
        if (tel_reqs[i] == st->r) {
            tel_reqs[i] = tel_reqs[--tel_n];
            break;
        }
    pthread_mutex_unlock(&tel_mu);
    free(st);
}

void api_dash_telemetry(mu_http_req *r, const json_t *body) {
    (void)body;
    tel_state *st = calloc(1, sizeof *st);
    if (!st) {
        mu_http_reply_error(r, 503, "server: out of memory", NULL);
        return;
    }
    st->a = mu_http_req_app(r);
    st->r = r;
    pthread_mutex_lock(&tel_mu);
    bool full = tel_n == TELEMETRY_MAX;
    if (!full && !tel_ticking) {
        pthread_t t;
        pthread_attr_t at;
        pthread_attr_init(&at);
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        tel_ticking = pthread_create(&t, &at, tel_main, NULL) == 0;
        pthread_attr_destroy(&at);
    }
    bool ok = !full && tel_ticking;
    if (ok) tel_reqs[tel_n++] = r;
    pthread_mutex_unlock(&tel_mu);
    if (!ok) {
        free(st);
        mu_http_reply_error(r, 503, full ? "server: too many telemetry streams (64)" : "server: cannot start the telemetry ticker", NULL);
        return;
    }
    mu_http_reply_stream(r, "text/event-stream", tel_produce, tel_release, st);
}
