/* api_llamacpp.c: llama.cpp server's protocol: /completion (and its alias
 * /completions), /tokenize, /detokenize, /apply-template, /health, /props,
 * /slots, /metrics.
 * Owns: llama.cpp's field names and shapes (content/stop/stop_type/timings,
 * completion_probabilities, SSE chunks without a [DONE] line) and the
 * Prometheus text of /metrics.
 * Does not own: validation tables (api.c), reading a job's events (api_job.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"

#ifndef MU_COMMIT
#define MU_COMMIT "unknown"
#endif

static bool check(mu_http_req *r, const json_t *body) {
    mu_err err = {0};
    int rc = mu_jc_check(body, api_schema(mu_http_req_path(r)), &err);
    if (rc) {
        mu_http_reply_status(r, rc, &err);
        return false;
    }
    return api_model_ok(r, body, "model");
}

static json_t *prob_entry(mu_http_app *a, int32_t id, float lp) {
    return json_pack("{s:i,s:o,s:o,s:f}", "id", id, "token", api_token_str(a, id), "bytes", api_token_bytes(a, id),
                     "logprob", (double)lp);
}

static json_t *probs_range(api_job *g, int from, int to) {
    json_t *arr = json_array();
    for (int i = from; i < to; i++) {
        const api_tok *t = &g->toks[i];
        json_t *e = prob_entry(g->app, t->id, t->logprob);
        json_t *top = json_array();
        for (int k = 0; k < t->n_top; k++) json_array_append_new(top, prob_entry(g->app, t->top_ids[k], t->top_logprobs[k]));
        json_object_set_new(e, "top_logprobs", top);
        json_array_append_new(arr, e);
    }
    return arr;
}

static const char *stop_type(int f) {
    switch (f) {
    case MU_FINISH_STOP: return "eos";
    case MU_FINISH_LENGTH: return "limit";
    case MU_FINISH_WORD: return "word";
    default: return "none";
    }
}

typedef struct {
    api_job g;
    mu_http_app *a;
    bool probs, return_tokens, done;
    int sent_tokens;
    json_t *settings;
    char *prompt_text;
} lc_state;

static json_t *settings_of(mu_http_app *a, const mu_gen_req *q, const json_t *stop) {
    return json_pack("{s:i,s:i,s:f,s:i,s:f,s:f,s:I,s:o,s:i,s:b,s:s}", "n_ctx", a->n_ctx, "n_predict", q->n_predict,
                     "temperature", (double)q->sp.temp, "top_k", q->sp.top_k, "top_p", (double)q->sp.top_p, "min_p",
                     (double)q->sp.min_p, "seed", (json_int_t)q->sp.seed, "stop", stop ? json_incref((json_t *)stop) : json_array(), "n_probs",
                     q->n_top, "ignore_eos", q->ignore_eos, "model", a->model_id);
}

static json_t *final_object(lc_state *s, const char *content, size_t n) {
    api_job *g = &s->g;
    json_t *o = json_pack("{s:i,s:o,s:b,s:s,s:i,s:i,s:i,s:O,s:s,s:b,s:s,s:s,s:i,s:o}", "index", 0, "content",
                          api_json_text(content, n), "stop", 1, "model", s->a->model_id, "id_slot", g->st.slot,
                          "tokens_predicted", g->n_ids, "tokens_evaluated", g->st.n_prompt, "generation_settings",
                          s->settings, "prompt", s->prompt_text ? s->prompt_text : "", "truncated", 0, "stop_type",
                          stop_type(g->finish), "stopping_word", g->stop_word, "tokens_cached",
                          g->st.n_prompt + g->n_ids, "timings", api_timings(&g->st));
    if (!o) return NULL;
    json_object_set_new(o, "has_new_line", json_boolean(g->content.p && memchr(g->content.p, '\n', g->content.n)));
    return o;
}

static int lc_produce(void *state, mu_http_buf *out, int fd) {
    lc_state *s = state;
    api_job *g = &s->g;
    if (s->done) return 0;
    bool running = api_job_poll(g, fd);
    if (g->finish == MU_FINISH_CANCEL) return -1;
    size_t nc = 0;
    const char *cs = api_job_take_content(g, &nc);
    if (nc || g->n_ids > s->sent_tokens) {
        json_t *c = json_pack("{s:i,s:o,s:b,s:i,s:i,s:i}", "index", 0, "content", api_json_text(cs, nc), "stop", 0,
                              "id_slot", g->st.slot, "tokens_predicted", g->n_ids, "tokens_evaluated", g->st.n_prompt);
        json_t *toks = json_array();
        for (int i = s->sent_tokens; i < g->n_ids; i++) json_array_append_new(toks, json_integer(g->ids[i]));
        json_object_set_new(c, "tokens", toks);
        if (s->probs) json_object_set_new(c, "completion_probabilities", probs_range(g, s->sent_tokens, g->n_ids));
        s->sent_tokens = g->n_ids;
        mu_http_buf_str(out, "data: ");
        mu_http_buf_json(out, c);
        mu_http_buf_str(out, "\n\n");
        json_decref(c);
    }
    if (!running) {
        json_t *f;
        if (g->finish == MU_FINISH_ERROR)
            f = json_pack("{s:{s:i,s:s,s:s}}", "error", "code", 500, "message", g->err, "type", "server_error");
        else
            f = final_object(s, "", 0);
        mu_http_buf_str(out, "data: ");
        mu_http_buf_json(out, f);
        mu_http_buf_str(out, "\n\n");
        json_decref(f);
        s->done = true;
    }
    return 1; /* out may be empty: nothing ready yet */
}

/* Non-streaming: replies once the job ended. */
static bool lc_poll(void *state, mu_http_req *r) {
    lc_state *s = state;
    if (api_job_poll(&s->g, mu_http_req_fd(r))) return false;
    if (s->g.finish == MU_FINISH_ERROR || s->g.finish == MU_FINISH_CANCEL) {
        api_job_reply_failed(r, &s->g);
        return true;
    }
    size_t nc;
    const char *cs = api_job_take_content(&s->g, &nc);
    json_t *o = final_object(s, cs, nc);
    json_t *toks = json_array();
    if (s->return_tokens)
        for (int i = 0; i < s->g.n_ids; i++) json_array_append_new(toks, json_integer(s->g.ids[i]));
    json_object_set_new(o, "tokens", toks);
    if (s->probs) json_object_set_new(o, "completion_probabilities", probs_range(&s->g, 0, s->g.n_ids));
    mu_http_reply_json(r, 200, o);
    return true;
}

static void lc_release(void *state) {
    lc_state *s = state;
    api_job_free(&s->g);
    json_decref(s->settings);
    free(s->prompt_text);
    free(s);
}

void api_llama_completion(mu_http_req *r, const json_t *body) {
    mu_http_app *a = mu_http_req_app(r);
    if (!check(r, body)) return;
    mu_schema *schema = NULL;
    if (api_response_schema(r, body, "json_schema", &schema)) return;
    int32_t *ids = NULL;
    int n = 0;
    char *text = NULL;
    if (!api_prompt_ids(r, a, json_object_get(body, "prompt"), &ids, &n, &text)) {
        mu_schema_unref(schema);
        return;
    }
    mu_gen_req q = {0};
    q.schema = schema;
    q.n_predict = (int)mu_jc_int(body, "n_predict", mu_jc_int(body, "max_tokens", -1));
    q.sp = api_sample_params(a, body, "seed");
    q.n_top = (int)mu_jc_int(body, "n_probs", 0);
    q.logprobs = q.n_top > 0;
    q.ignore_eos = mu_jc_bool(body, "ignore_eos", false);
    if (q.ignore_eos) api_ban_eog(a, &q.sp); /* as llama.cpp's server: never sampled */
    lc_state *s = calloc(1, sizeof *s);
    if (!s) {
        free(ids);
        free(text);
        mu_schema_unref(schema);
        mu_http_reply_error(r, 503, "server: out of memory", NULL);
        return;
    }
    json_t *stop = json_object_get(body, "stop");
    bool ok = api_job_start(r, &s->g, a, ids, n, &q, stop);
    mu_schema_unref(schema); /* the job holds its own reference */
    if (!ok) {
        free(text);
        free(s);
        return;
    }
    s->a = a;
    s->prompt_text = text;
    s->probs = q.logprobs;
    s->g.want_toks = q.logprobs;
    s->return_tokens = mu_jc_bool(body, "return_tokens", false);
    s->settings = settings_of(a, &q, stop);
    if (mu_jc_bool(body, "stream", false)) {
        mu_http_reply_stream(r, "text/event-stream", lc_produce, lc_release, s);
        return;
    }
    mu_http_reply_later(r, lc_poll, lc_release, s);
}

void api_llama_tokenize(mu_http_req *r, const json_t *body) {
    mu_http_app *a = mu_http_req_app(r);
    if (!check(r, body)) return;
    const char *content = mu_jc_str(body, "content", "");
    bool add_special = mu_jc_bool(body, "add_special", false);
    bool parse_special = mu_jc_bool(body, "parse_special", true);
    bool pieces = mu_jc_bool(body, "with_pieces", false);
    int32_t *ids = NULL;
    int n = 0;
    mu_err err = {0};
    int rc = add_special ? api_tokenize_prompt(a, content, parse_special, &ids, &n, &err)
                         : mu_tok_encode(a->tok, content, strlen(content), parse_special, &ids, &n, &err);
    if (rc) {
        mu_http_reply_status(r, rc, &err);
        return;
    }
    json_t *arr = json_array();
    for (int i = 0; i < n; i++) {
        if (!pieces) {
            json_array_append_new(arr, json_integer(ids[i]));
            continue;
        }
        char buf[API_PIECE_MAX];
        int pn = api_piece(a, ids[i], buf, sizeof buf);
        if (pn < 0) pn = 0;
        json_t *p = json_stringn(buf, (size_t)pn);
        if (!p) p = api_token_bytes(a, ids[i]);
        json_array_append_new(arr, json_pack("{s:i,s:o}", "id", ids[i], "piece", p));
    }
    free(ids);
    mu_http_reply_json(r, 200, json_pack("{s:o}", "tokens", arr));
}

void api_llama_detokenize(mu_http_req *r, const json_t *body) {
    mu_http_app *a = mu_http_req_app(r);
    if (!check(r, body)) return;
    json_t *toks = json_object_get(body, "tokens");
    mu_http_buf b = {0};
    size_t i;
    json_t *t;
    json_array_foreach(toks, i, t) {
        json_int_t id = (json_int_t)json_number_value(t);
        if (id >= a->info->n_vocab) {
            mu_http_buf_free(&b);
            char m[128];
            snprintf(m, sizeof m, "field 'tokens[%zu]': token id out of range: must be below %d", i, a->info->n_vocab);
            mu_http_reply_error(r, 400, m, "tokens");
            return;
        }
        char buf[API_PIECE_MAX];
        int pn = api_piece(a, (int32_t)id, buf, sizeof buf);
        if (pn > 0) mu_http_buf_add(&b, buf, (size_t)pn);
    }
    json_t *s = api_json_text(b.p ? b.p : "", b.n);
    mu_http_buf_free(&b);
    mu_http_reply_json(r, 200, json_pack("{s:o}", "content", s));
}

void api_llama_apply_template(mu_http_req *r, const json_t *body) {
    mu_http_app *a = mu_http_req_app(r);
    if (!check(r, body)) return;
    mu_err err = {0};
    char *text = NULL;
    json_t *tools = json_object_get(body, "tools");
    int rc = api_render(a, json_object_get(body, "messages"), json_array_size(tools) ? tools : NULL,
                            mu_jc_str(body, "reasoning_effort", NULL), true, &text, &err);
    if (rc) {
        mu_http_reply_status(r, rc, &err);
        return;
    }
    json_t *p = api_json_text(text, strlen(text));
    free(text);
    mu_http_reply_json(r, 200, json_pack("{s:o}", "prompt", p));
}

void api_llama_health(mu_http_req *r, const json_t *body) {
    (void)body;
    mu_http_reply_json(r, 200, json_pack("{s:s}", "status", "ok"));
}

void api_llama_props(mu_http_req *r, const json_t *body) {
    (void)body;
    mu_http_app *a = mu_http_req_app(r);
    mu_sample_params d = mu_sample_defaults();
    json_t *o = json_pack("{s:{s:i,s:{s:f,s:i,s:f,s:f,s:i}},s:i,s:s,s:s,s:s,s:{s:b},s:s}", "default_generation_settings",
                          "n_ctx", a->n_ctx, "params", "temperature", (double)d.temp, "top_k", d.top_k, "top_p",
                          (double)d.top_p, "min_p", (double)d.min_p, "n_predict", -1, "total_slots", a->n_slots,
                          "model_path", a->model_path, "model_alias", a->model_id, "chat_template",
                          a->chat_template ? a->chat_template : "", "modalities", "vision", 0, "build_info",
                          "muser " MU_COMMIT);
    mu_http_reply_json(r, 200, o);
}

void api_llama_slots(mu_http_req *r, const json_t *body) {
    (void)body;
    mu_http_app *a = mu_http_req_app(r);
    json_t *arr = json_array();
    for (int i = 0; i < a->n_slots; i++) {
        mu_sched_slot_info si;
        mu_sched_get_slot(a->sched, i, &si);
        json_array_append_new(arr, json_pack("{s:i,s:i,s:b,s:i,s:{s:i,s:i}}", "id", i, "n_ctx", a->n_ctx,
                                             "is_processing", si.busy, "n_past", si.n_past, "next_token", "n_decoded",
                                             si.n_gen, "n_prompt", si.n_prompt));
    }
    mu_http_reply_json(r, 200, arr);
}

void api_llama_metrics(mu_http_req *r, const json_t *body) {
    (void)body;
    mu_http_app *a = mu_http_req_app(r);
    mu_sched_metrics m;
    mu_sched_get_metrics(a->sched, &m);
    mu_http_counters c = {0};
    if (a->server) mu_http_server_counters(a->server, &c);
    mu_http_buf b = {0};
#define COUNTER(name, help, v)                                                                    \
    mu_http_buf_fmt(&b, "# HELP llamacpp:%s %s\n# TYPE llamacpp:%s counter\nllamacpp:%s %.17g\n", name, help, name, \
                    name, (double)(v))
#define GAUGE(name, help, v)                                                                      \
    mu_http_buf_fmt(&b, "# HELP llamacpp:%s %s\n# TYPE llamacpp:%s gauge\nllamacpp:%s %.17g\n", name, help, name, \
                    name, (double)(v))
    COUNTER("prompt_tokens_total", "Number of prompt tokens processed.", m.n_prompt_tokens);
    COUNTER("prompt_seconds_total", "Prompt process time.", m.prompt_s);
    COUNTER("tokens_predicted_total", "Number of generation tokens processed.", m.n_gen_tokens);
    COUNTER("tokens_predicted_seconds_total", "Predict process time.", m.gen_s);
    COUNTER("n_decode_total", "Total number of batched forward calls.", m.n_forward);
    COUNTER("requests_total", "Generation requests accepted.", m.n_requests);
    COUNTER("requests_rejected_busy_total", "Generation requests answered 429.", m.n_busy_rejects);
    COUNTER("requests_cancelled_total", "Generation requests ended by a cancel (client hang-up, shutdown).",
            m.n_cancelled);
    COUNTER("http_requests_total", "HTTP requests received.", c.requests);
    COUNTER("http_errors_4xx_total", "HTTP 4xx answers.", c.errors_4xx);
    COUNTER("http_errors_5xx_total", "HTTP 5xx answers.", c.errors_5xx);
    COUNTER("http_connections_refused_total", "Connections closed at once: over the connection limit.",
            c.conns_refused);
    COUNTER("http_head_timeouts_total", "Connections closed: request head not complete by its deadline.",
            c.closed_head_timeout);
    COUNTER("http_body_timeouts_total", "Connections closed: request body not complete by its deadline.",
            c.closed_body_timeout);
    GAUGE("http_connections_open", "Connections open now.", c.conns_open);
    GAUGE("prompt_tokens_seconds", "Average prompt throughput in tokens/s.",
          m.prompt_s > 0 ? m.n_prompt_tokens / m.prompt_s : 0);
    GAUGE("predicted_tokens_seconds", "Average generation throughput in tokens/s.",
          m.gen_s > 0 ? m.n_gen_tokens / m.gen_s : 0);
    GAUGE("requests_processing", "Number of requests processing.", m.n_processing);
    GAUGE("requests_deferred", "Number of requests deferred.", m.n_queued);
    GAUGE("n_slots", "Number of slots.", m.n_slots);
#undef COUNTER
#undef GAUGE
    if (b.oom) {
        mu_http_buf_free(&b);
        mu_http_reply_error(r, 503, "server: out of memory", NULL);
        return;
    }
    mu_http_reply_text(r, 200, "text/plain; version=0.0.4; charset=utf-8", b.p, b.n);
    mu_http_buf_free(&b);
}
