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

/* The page's policy: its own inline script and style only, requests to its
 * own origin only, never inside a frame (another site cannot overlay the
 * login form), forms go nowhere by themselves. */
#define DASH_CSP                                                                                          \
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:; "         \
    "connect-src 'self'; form-action 'none'; frame-ancestors 'none'; base-uri 'none'"

void api_dash_page(mu_http_req *r, const json_t *body) {
    (void)body;
    if (((mu_http_app *)mu_http_req_app(r))->no_ui) {
        char m[300];
        snprintf(m, sizeof m, "http: no such route: %.200s (the dashboard is off: --no-ui)", mu_http_req_path(r));
        mu_http_reply_error(r, 404, m, NULL);
        return;
    }
    mu_http_reply_text_hdr(r, 200, "text/html; charset=utf-8", (const char *)mu_dash_html, mu_dash_html_len,
                           "Content-Security-Policy", DASH_CSP);
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
    int wait_s = 0;
    int rc = mu_http_req_login(r, json_string_value(k), json_string_length(k), csrf, cookie, sizeof cookie, &wait_s,
                               &err);
    if (rc == MU_E_ARG) {
        mu_http_reply_error(r, 401, err.msg, "key");
        return;
    }
    if (rc == MU_E_STATE) {
        mu_http_reply_busy(r, err.msg, wait_s);
        return;
    }
    if (rc == MU_E_UNSUPPORTED) {
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

static json_t *cs_bytes(mu_http_app *a) {
    if (!a->cache) return unavailable("the prefix cache is off (--cache-bytes 0)");
    mu_kv_cache_stats cs;
    mu_kv_cache_get_stats(a->cache, &cs);
    return measured_i(cs.bytes);
}

/* The prefix cache's numbers (--cache-bytes), measured; unavailable when
 * the server runs without one. */
static json_t *prefix_cache_json(mu_http_app *a, const mu_sched_metrics *m) {
    if (!a->cache) {
        const char *no = "the prefix cache is off (--cache-bytes 0)";
        return json_pack("{s:b,s:o,s:o,s:o,s:o,s:o}", "present", 0, "bytes", unavailable(no), "entries",
                         unavailable(no), "lookups", unavailable(no), "hits", unavailable(no), "tokens_reused",
                         unavailable(no));
    }
    mu_kv_cache_stats cs;
    mu_kv_cache_get_stats(a->cache, &cs);
    return json_pack("{s:b,s:o,s:o,s:o,s:o,s:o}", "present", 1, "bytes", measured_i(cs.bytes), "entries",
                     measured_i(cs.n_nodes), "lookups", measured_i(cs.n_lookups), "hits",
                     measured_i(cs.n_hits[MU_KV_SRC_CACHE] + cs.n_hits[MU_KV_SRC_PACK]), "tokens_reused",
                     measured_i(m->n_reused_src[MU_KV_SRC_CACHE] + m->n_reused_src[MU_KV_SRC_PACK]));
}

/* The remote prefill lane (docs/lane.md): handoffs and the breaker, or
 * each unavailable when this server prefills locally. */
static json_t *lane_json(mu_http_app *a) {
    if (!a->prefill_stats) {
        const char *no = "this server prefills locally (--prefill local)";
        return json_pack("{s:o,s:o,s:o,s:o,s:o}", "handoffs", unavailable(no), "failed", unavailable(no), "fallbacks",
                         unavailable(no), "bytes", unavailable(no), "breaker_open", unavailable(no));
    }
    mu_lane_stats st;
    a->prefill_stats(a->prefill_user, &st);
    return json_pack("{s:o,s:o,s:o,s:o,s:o}", "handoffs", measured_i(st.n_remote), "failed", measured_i(st.n_failed),
                     "fallbacks", measured_i(st.n_fallback), "bytes", measured_i(st.n_bytes), "breaker_open",
                     measured_i(st.open ? 1 : 0));
}

/* The scheduler's last finished jobs, newest first (the request log). */
static json_t *recent_json(mu_http_app *a) {
    static const char *const fin[] = {"none", "stop", "word", "length", "ctx", "cancel", "error"};
    mu_sched_job_record rec[MU_SCHED_RECENT];
    int n = mu_sched_recent(a->sched, rec, MU_SCHED_RECENT);
    json_t *arr = json_array();
    for (int i = 0; arr && i < n; i++) {
        const mu_sched_job_record *q = &rec[i];
        json_t *ttft = q->embedding ? unavailable("an embedding job generates no token")
                       : q->ttft_ms >= 0 ? measured(q->ttft_ms / 1e3)
                                         : unavailable("the job ended before its first token");
        json_t *dec = q->n_gen > 1 && q->gen_ms > 0 ? measured((q->n_gen - 1) / (q->gen_ms / 1e3))
                                                    : unavailable("fewer than two tokens generated");
        json_array_append_new(
            arr, json_pack("{s:I,s:o,s:s,s:i,s:b,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o}", "seq", (json_int_t)q->seq,
                           "ended_s", measured(q->t_end_s - a->t_start_mono), "finish",
                           (unsigned)q->finish < sizeof fin / sizeof fin[0] ? fin[q->finish] : "?", "slot", q->slot,
                           "embedding", q->embedding, "n_prompt", measured_i((uint64_t)q->n_prompt), "n_reused",
                           measured_i((uint64_t)q->n_reused), "n_gen", measured_i((uint64_t)q->n_gen), "queue_s",
                           measured(q->queue_ms / 1e3), "ttft_s", ttft, "prompt_s", measured(q->prompt_ms / 1e3),
                           "gen_s", measured(q->gen_ms / 1e3), "decode_tok_s", dec));
    }
    return arr;
}

/* The snapshot object (NULL when out of memory). */
static json_t *snapshot_json(mu_http_app *a) {
    mu_sched_metrics m;
    mu_sched_get_metrics(a->sched, &m);
    mu_http_counters c = {0};
    if (a->server) mu_http_server_counters(a->server, &c);
    json_t *slots = json_array();
    uint64_t kv_reserved = 0, kv_used = 0;
    for (int i = 0; i < a->n_slots; i++) {
        mu_sched_slot_info si;
        mu_sched_get_slot(a->sched, i, &si);
        kv_reserved += si.kv_reserved_bytes;
        kv_used += si.kv_used_bytes;
        json_array_append_new(slots, json_pack("{s:i,s:s,s:o,s:o,s:o,s:o}", "id", i, "state", si.busy ? "busy" : "idle",
                                               "n_past", measured_i((uint64_t)si.n_past), "n_prompt",
                                               measured_i((uint64_t)si.n_prompt), "n_gen",
                                               measured_i((uint64_t)si.n_gen), "kv_used_bytes",
                                               measured_i(si.kv_used_bytes)));
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
        "ttft_s",
        m.n_ttft ? measured(m.ttft_s_sum / (double)m.n_ttft) : unavailable("no request has generated a token yet"),
        "slots", slots,
        "memory", "rss_bytes", rss ? measured_i(rss) : unavailable("/proc/self/statm is unreadable"), "kv_bytes",
        measured_i(kv_reserved), "prefix_cache_bytes",
        cs_bytes(a),
        "http", "requests", measured_i(c.requests), "errors_4xx", measured_i(c.errors_4xx), "errors_5xx",
        measured_i(c.errors_5xx), "connections_open", measured_i(c.conns_open), "connections_refused",
        measured_i(c.conns_refused),
        "remote_prefill", lane_json(a));
    /* the reuse ladder: prompt tokens reused per source, requests per source */
    json_t *reuse = json_object();
    for (int k = 0; reuse && k < MU_KV_SRC_COUNT; k++)
        json_object_set_new(reuse, mu_kv_src_name(k),
                            json_pack("{s:o,s:o}", "tokens", measured_i(m.n_reused_src[k]), "requests",
                                      measured_i(m.n_reuse_jobs[k])));
    if (o && reuse) json_object_set_new(o, "prompt_reuse", reuse);
    else json_decref(reuse);
    if (!o) return NULL;
    json_t *mem = json_object_get(o, "memory"), *thr = json_object_get(o, "throughput"),
           *tok = json_object_get(o, "tokens");
    json_object_set_new(mem, "kv_used_bytes", measured_i(kv_used));
    json_object_set_new(thr, "ttft_last_s",
                        m.n_ttft ? measured(m.ttft_s_last) : unavailable("no request has generated a token yet"));
    json_object_set_new(tok, "prompt_reused", measured_i(m.n_prompt_cached));
    json_object_set_new(o, "prefix_cache", prefix_cache_json(a, &m));
    json_object_set_new(o, "recent", recent_json(a));
    return o;
}

/* /metrics' lines for what the dashboard added: time to first token (sum,
 * count and cumulative counts per bound), KV cache use, the prefix cache (only when there is one: an
 * absent series is Prometheus' "unavailable"). Names follow /metrics'
 * llamacpp: prefix; units in the names (seconds, bytes). */
void api_dash_metrics(mu_http_app *a, mu_http_buf *b) {
    mu_sched_metrics m;
    mu_sched_get_metrics(a->sched, &m);
    const double *le = mu_sched_ttft_bounds();
    /* counters, each sample its own family: llama.cpp's clients parse
     * /metrics expecting a # TYPE line per sample name, which a Prometheus
     * histogram's _bucket/_sum/_count lines do not have */
    mu_http_buf_fmt(b,
                    "# HELP llamacpp:time_to_first_token_seconds_total Sum of the times from a request's submit to its "
                    "first generated token (queue wait and prefill included).\n"
                    "# TYPE llamacpp:time_to_first_token_seconds_total counter\n"
                    "llamacpp:time_to_first_token_seconds_total %.17g\n"
                    "# HELP llamacpp:time_to_first_token_requests_total Requests that generated a first token.\n"
                    "# TYPE llamacpp:time_to_first_token_requests_total counter\n"
                    "llamacpp:time_to_first_token_requests_total %llu\n"
                    "# HELP llamacpp:time_to_first_token_requests_within Requests whose first token came within le "
                    "seconds (cumulative; le=\"+Inf\" counts them all).\n"
                    "# TYPE llamacpp:time_to_first_token_requests_within counter\n",
                    m.ttft_s_sum, (unsigned long long)m.n_ttft);
    uint64_t cum = 0;
    for (int k = 0; k < MU_SCHED_TTFT_BUCKETS; k++) {
        cum += m.ttft_hist[k];
        if (k == MU_SCHED_TTFT_BUCKETS - 1)
            mu_http_buf_fmt(b, "llamacpp:time_to_first_token_requests_within{le=\"+Inf\"} %llu\n", (unsigned long long)cum);
        else
            mu_http_buf_fmt(b, "llamacpp:time_to_first_token_requests_within{le=\"%g\"} %llu\n", le[k],
                            (unsigned long long)cum);
    }
    uint64_t kv_r = 0, kv_u = 0;
    for (int i = 0; i < a->n_slots; i++) {
        mu_sched_slot_info si;
        mu_sched_get_slot(a->sched, i, &si);
        kv_r += si.kv_reserved_bytes;
        kv_u += si.kv_used_bytes;
    }
#define GAUGE(name, help, fmt, v) \
    mu_http_buf_fmt(b, "# HELP llamacpp:" name " " help "\n# TYPE llamacpp:" name " gauge\nllamacpp:" name " " fmt "\n", v)
#define COUNTER(name, help, v) \
    mu_http_buf_fmt(b, "# HELP llamacpp:" name " " help "\n# TYPE llamacpp:" name " counter\nllamacpp:" name " %llu\n", \
                    (unsigned long long)(v))
    GAUGE("kv_cache_reserved_bytes", "KV cache bytes of all slots' cells.", "%llu", (unsigned long long)kv_r);
    GAUGE("kv_cache_used_bytes", "KV cache bytes of the cells that hold positions now.", "%llu",
          (unsigned long long)kv_u);
    GAUGE("kv_cache_usage_ratio", "KV cache used bytes over reserved bytes.", "%.17g",
          kv_r ? (double)kv_u / (double)kv_r : 0.0);
#undef GAUGE
#undef COUNTER
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
