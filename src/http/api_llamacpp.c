/* api_llamacpp.c: llama.cpp server's protocol: /completion (and its alias
 * /completions), /tokenize, /detokenize, /apply-template, /health, /props,
 * /slots, /metrics.
 * Owns: llama.cpp's field names and shapes (content/stop/stop_type/timings,
 * completion_probabilities, SSE chunks without a [DONE] line) and the
 * Prometheus text of /metrics.
 * Does not own: validation tables (api.c), reading a job's events (api_job.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "dash.h"

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

/* post: llama.cpp's post_sampling_probs shape (prob, top_probs) */
static json_t *prob_entry(mu_http_app *a, int32_t id, float v, bool post) {
    return json_pack("{s:i,s:o,s:o,s:f}", "id", id, "token", api_token_str(a, id), "bytes", api_token_bytes(a, id),
                     post ? "prob" : "logprob", (double)v);
}

static json_t *probs_range(api_job *g, int from, int to, bool post) {
    json_t *arr = json_array();
    for (int i = from; i < to; i++) {
        const api_tok *t = &g->toks[i];
        json_t *e = prob_entry(g->app, t->id, post ? t->prob : t->logprob, post);
        json_t *top = json_array();
        for (int k = 0; k < t->n_top; k++)
            json_array_append_new(top, prob_entry(g->app, t->top_ids[k], post ? t->top_probs[k] : t->top_logprobs[k],
                                                  post));
        json_object_set_new(e, post ? "top_probs" : "top_logprobs", top);
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

/* One /completion request: one job per prompt (llama.cpp's batch form
 * gives several; their results carry "index"). */
typedef struct {
    mu_http_app *a;
    int n;                   /* jobs: prompts * per */
    int per;                 /* choices per prompt (n_cmpl) */
    bool probs, return_tokens, many, timings_per_token;
    bool post;               /* post_sampling_probs */
    json_t *settings;
    json_t *fields;          /* response_fields (borrowed copy), or NULL */
    bool done[API_MAX_CHOICES];
    int sent_tokens[API_MAX_CHOICES];
    char *prompt_text[API_MAX_CHOICES];
    api_job g[API_MAX_CHOICES];
} lc_state;

json_t *api_llama_result(mu_http_app *a, api_job *g, int index, const char *content, size_t n, const char *prompt,
                         json_t *settings) {
    json_t *o = json_pack("{s:i,s:o,s:b,s:s,s:i,s:i,s:i,s:O,s:s,s:b,s:s,s:s,s:i,s:o}", "index", index, "content",
                          api_json_text(content, n), "stop", 1, "model", a->model_id, "id_slot", g->st.slot,
                          "tokens_predicted", g->n_ids, "tokens_evaluated", g->st.n_prompt, "generation_settings",
                          settings, "prompt", prompt ? prompt : "", "truncated", g->ctx_full,
                          "stop_type", stop_type(g->finish), "stopping_word", g->stop_word, "tokens_cached",
                          g->st.n_prompt + g->n_ids - g->st.n_discarded, "timings", api_timings(&g->st));
    if (!o) return NULL;
    /* muser's: where timings.cache_n's tokens came from (the reuse ladder);
     * beside timings, whose values clients read as numbers */
    json_object_set_new(o, "cache_source", json_string(mu_kv_src_name(g->st.reuse_src)));
    json_object_set_new(o, "has_new_line", json_boolean(g->content.p && memchr(g->content.p, '\n', g->content.n)));
    return o;
}

static json_t *final_object(lc_state *s, int k, const char *content, size_t n) {
    return api_llama_result(s->a, &s->g[k], k, content, n, s->prompt_text[k / s->per], s->settings);
}

static void sse_data(mu_http_buf *out, json_t *j) {
    mu_http_buf_str(out, "data: ");
    mu_http_buf_json(out, j);
    mu_http_buf_str(out, "\n\n");
    json_decref(j);
}

static int lc_produce(void *state, mu_http_buf *out, int fd) {
    lc_state *s = state;
    bool all_done = true;
    for (int k = 0; k < s->n; k++) {
        if (s->done[k]) continue;
        api_job *g = &s->g[k];
        bool running = api_job_poll(g, fd);
        if (g->finish == MU_FINISH_CANCEL) return -1;
        for (; g->prog_sent < g->n_prog; g->prog_sent++) { /* return_progress */
            const api_progress *p = &g->prog[g->prog_sent];
            json_t *c = json_pack("{s:i,s:s,s:[],s:b,s:i,s:i,s:i,s:o}", "index", k, "content", "", "tokens", "stop", 0,
                                  "id_slot", g->st.slot, "tokens_predicted", 0, "tokens_evaluated", p->total,
                                  "prompt_progress", api_progress_json(p));
            if (s->timings_per_token) json_object_set_new(c, "timings", api_progress_timings(p));
            sse_data(out, c);
        }
        /* one chunk per token, as llama.cpp streams, each with the text
         * that token released (a token's events come together: cend). Text
         * released only at the end (held for a stop string or an
         * unfinished character) goes with the last token when its chunk
         * was not sent yet, else in a chunk of its own. With n_probs the
         * newest token's chunk waits (for the next token or the end), so
         * that text still comes with a token and its probabilities: every
         * chunk then carries exactly one */
        int from = s->sent_tokens[k], to = g->n_ids;
        if (s->probs && running && to > from) to--;
        for (int i = from; i < to || (i == from && !running && g->content.n > g->content_sent); i++) {
            size_t nc = 0;
            const char *cs = i < to - 1 || (i < to && running) ? api_job_take_content_upto(g, i, &nc)
                                                                 : api_job_take_content(g, &nc);
            json_t *c = json_pack("{s:i,s:o,s:b,s:i,s:i,s:i}", "index", k, "content", api_json_text(cs, nc), "stop", 0,
                                  "id_slot", g->st.slot, "tokens_predicted", i < to ? i + 1 : to, "tokens_evaluated",
                                  g->st.n_prompt);
            json_t *toks = json_array();
            if (i < to) json_array_append_new(toks, json_integer(g->ids[i]));
            json_object_set_new(c, "tokens", toks);
            if (s->probs && i < to) json_object_set_new(c, "completion_probabilities", probs_range(g, i, i + 1, s->post));
            if (s->timings_per_token) json_object_set_new(c, "timings", api_job_timings(g));
            sse_data(out, c);
        }
        s->sent_tokens[k] = to;
        if (!running) {
            if (g->finish == MU_FINISH_ERROR)
                sse_data(out, json_pack("{s:{s:i,s:s,s:s}}", "error", "code", 500, "message", g->err, "type",
                                        "server_error"));
            else
                sse_data(out, final_object(s, k, "", 0));
            s->done[k] = true;
        } else {
            all_done = false;
        }
    }
    return all_done ? 0 : 1; /* out may be empty: nothing ready yet */
}

/* llama.cpp's response_fields: only the named fields ("a/b" for a nested
 * one), each under its full name. */
static json_t *pick_fields(json_t *o, const json_t *fields) {
    json_t *r = json_object();
    size_t i;
    json_t *f;
    json_array_foreach(fields, i, f) {
        const char *path = json_string_value(f);
        char key[260];
        snprintf(key, sizeof key, "%s", path);
        json_t *v = o;
        for (char *save = NULL, *part = strtok_r(key, "/", &save); part && v; part = strtok_r(NULL, "/", &save))
            v = json_is_object(v) ? json_object_get(v, part) : NULL;
        if (v) json_object_set(r, path, v);
    }
    json_decref(o);
    return r;
}

/* Non-streaming: replies once every job ended. */
static bool lc_poll(void *state, mu_http_req *r) {
    lc_state *s = state;
    bool running = false;
    for (int k = 0; k < s->n; k++) {
        api_job *g = &s->g[k];
        if (api_job_poll(g, mu_http_req_fd(r))) running = true;
        else if (g->finish == MU_FINISH_ERROR || g->finish == MU_FINISH_CANCEL) {
            api_job_reply_failed(r, g);
            return true;
        }
    }
    if (running) return false;
    json_t *all = json_array();
    for (int k = 0; k < s->n; k++) {
        api_job *g = &s->g[k];
        size_t nc;
        const char *cs = api_job_take_content(g, &nc);
        json_t *o = final_object(s, k, cs, nc);
        json_t *toks = json_array();
        if (s->return_tokens)
            for (int i = 0; i < g->n_ids; i++) json_array_append_new(toks, json_integer(g->ids[i]));
        json_object_set_new(o, "tokens", toks);
        if (s->probs) json_object_set_new(o, "completion_probabilities", probs_range(g, 0, g->n_ids, s->post));
        if (s->fields) o = pick_fields(o, s->fields);
        json_array_append_new(all, o);
    }
    if (s->many) {
        mu_http_reply_json(r, 200, all);
    } else {
        json_t *one = json_incref(json_array_get(all, 0));
        json_decref(all);
        mu_http_reply_json(r, 200, one);
    }
    return true;
}

static void lc_release(void *state) {
    lc_state *s = state;
    for (int k = 0; k < s->n; k++) api_job_free(&s->g[k]);
    for (int k = 0; k < API_MAX_CHOICES; k++) free(s->prompt_text[k]);
    json_decref(s->settings);
    json_decref(s->fields);
    free(s);
}

/* Token ids as text, special tokens written out (llama.cpp's detokenize
 * with special = true); malloc'ed, NULL when out of memory. */
static char *detokenize(mu_http_app *a, const int32_t *ids, int n) {
    mu_http_buf b = {0};
    for (int i = 0; i < n; i++) {
        char buf[API_PIECE_MAX];
        int pn = api_piece(a, ids[i], buf, sizeof buf);
        if (pn > 0) mu_http_buf_add(&b, buf, (size_t)pn);
    }
    json_t *t = api_json_text(b.p ? b.p : "", b.n);
    mu_http_buf_free(&b);
    char *o = strdup(json_string_value(t));
    json_decref(t);
    return o;
}

void api_llama_completion(mu_http_req *r, const json_t *body) {
    mu_http_app *a = mu_http_req_app(r);
    if (!check(r, body)) return;
    /* llama.cpp's n_cmpl (alias n): completions per prompt */
    int per = (int)mu_jc_int(body, "n_cmpl", mu_jc_int(body, "n", 1));
    const json_t *prompts[API_MAX_CHOICES];
    int n_prompts = api_prompt_list(r, json_object_get(body, "prompt"), prompts, API_MAX_CHOICES / per);
    if (!n_prompts) return;
    mu_schema *schema = NULL;
    if (api_response_schema(r, body, "json_schema", &schema)) return;
    mu_gen_req q = {0};
    q.schema = schema;
    q.n_predict = (int)mu_jc_int(body, "n_predict", mu_jc_int(body, "max_tokens", -1));
    q.sp = api_sample_params(a, body, "seed");
    q.n_top = (int)mu_jc_int(body, "n_probs", 0);
    q.logprobs = q.n_top > 0;
    q.ignore_eos = mu_jc_bool(body, "ignore_eos", false);
    if (q.ignore_eos) api_ban_eog(a, &q.sp); /* as llama.cpp's server: never sampled */
    lc_state *s = calloc(1, sizeof *s);
    if (!s || !api_extensions(r, body, &q)) {
        if (!s) mu_http_reply_error(r, 503, "server: out of memory", NULL);
        free(s);
        mu_schema_unref(schema);
        return;
    }
    s->a = a;
    s->per = per;
    json_t *stop = json_object_get(body, "stop");
    /* each prompt: n_cmpl jobs (choice k samples with seed + k), result
     * index p * n_cmpl + k */
    for (int p = 0; p < n_prompts; p++) {
        int32_t *ids = NULL;
        int n = 0;
        bool has_media = false;
        char field[32];
        snprintf(field, sizeof field, n_prompts > 1 ? "prompt[%d]" : "prompt", p);
        bool ok = api_prompt_media(r, a, prompts[p], field, &has_media, &ids, &n, &q.media) &&
                  (has_media || api_prompt_ids(r, a, prompts[p], &ids, &n, NULL));
        /* llama.cpp's "prompt": its tokens as text (an image prompt: its text, markers included) */
        if (ok) s->prompt_text[p] = has_media ? strdup(json_string_value(json_object_get(prompts[p], "prompt_string")))
                                              : detokenize(a, ids, n);
        ok = ok && api_job_start_n(r, &s->g[p * per], per, a, ids, n, &q, stop);
        q.media = NULL; /* taken by the job (or freed) */
        if (!ok) {
            s->n = p * per;
            mu_schema_unref(schema);
            mu_grammar_unref(q.grammar);
            lc_release(s);
            return;
        }
        s->n = (p + 1) * per;
        for (int k = 0; k < per; k++) s->g[p * per + k].want_toks = q.logprobs;
    }
    mu_schema_unref(schema); /* the jobs hold their own references */
    s->many = s->n > 1;
    s->post = q.post_sampling;
    s->probs = q.logprobs;
    s->return_tokens = mu_jc_bool(body, "return_tokens", false);
    s->settings = api_params_json(a, &q, stop, mu_jc_bool(body, "stream", false),
                                  mu_jc_bool(body, "timings_per_token", false));
    if (s->settings && q.grammar) json_object_set_new(s->settings, "grammar", json_string(mu_jc_str(body, "grammar", "")));
    if (s->settings) api_lazy_settings(a, body, s->settings);
    s->fields = json_incref(json_object_get(body, "response_fields"));
    if (!json_array_size(s->fields)) { /* llama.cpp: an empty list is every field */
        json_decref(s->fields);
        s->fields = NULL;
    }
    s->timings_per_token = mu_jc_bool(body, "timings_per_token", false);
    if (mu_jc_bool(body, "stream", false)) {
        mu_http_reply_stream(r, "text/event-stream", lc_produce, lc_release, s);
        return;
    }
    mu_http_reply_later(r, lc_poll, lc_release, s);
}

/* True when text is one special token of the vocabulary. */
static bool has_special(mu_http_app *a, const char *text) {
    int32_t *ids = NULL;
    int n = 0;
    mu_err err;
    if (mu_tok_encode(a->tok, text, strlen(text), true, &ids, &n, &err)) return false;
    bool one = n == 1 && (mu_tok_attr(a->tok, ids[0]) & (MU_TOK_ATTR_CONTROL | MU_TOK_ATTR_USER_DEFINED));
    free(ids);
    return one;
}

/* POST /infill: llama.cpp's fill-in-the-middle needs the vocabulary's FIM
 * prefix, suffix and middle tokens. The Muse Glimmer vocabulary has none:
 * then this answers what llama.cpp's server answers for such a model (501,
 * its message); muser does not build FIM prompts for vocabularies that
 * have them either (501 saying so). The body is checked first (api.c's
 * table: input_prefix and input_suffix required, input_extra chunks with a
 * string text and an optional string filename), so a malformed request is
 * a 400 naming the field whatever the model: llama.cpp checks the model
 * first, which makes the same mistake a 400 or a 501 by model. */
void api_llama_infill(mu_http_req *r, const json_t *body) {
    if (!check(r, body)) return;
    mu_http_app *a = mu_http_req_app(r);
    static const char *const pre[] = {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<PRE>", NULL};
    static const char *const suf[] = {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<SUF>", NULL};
    static const char *const mid[] = {"<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<MID>", NULL};
    const char *const *sets[3] = {pre, suf, mid};
    static const char *const what[3] = {"prefix", "suffix", "middle"};
    char m[300] = "Infill is not supported by this model: ";
    bool missing = false;
    for (int k = 0; k < 3; k++) {
        bool found = false;
        for (const char *const *t = sets[k]; *t && !found; t++) found = has_special(a, *t);
        if (!found) {
            size_t l = strlen(m);
            snprintf(m + l, sizeof m - l, "%s token is missing. ", what[k]);
            missing = true;
        }
    }
    if (!missing) snprintf(m, sizeof m, "infill: fill-in-the-middle prompts are not implemented in muser");
    mu_http_reply_error(r, 501, m, NULL);
}

/* POST /rerank (and /reranking, /v1/rerank, /v1/reranking): ranking needs
 * a model with a classification head (llama.cpp's rank pooling, started
 * with --reranking); the Muse Glimmer models have none, so this answers
 * what llama.cpp's server answers without --reranking: 501. The body is
 * checked first (api.c's table; documents or texts, a non-empty array of
 * strings, is required), so a malformed request is a 400 naming the field
 * whatever the model, as with /infill. */
void api_llama_rerank(mu_http_req *r, const json_t *body) {
    if (!check(r, body)) return;
    if (!json_object_get(body, "documents") && !json_object_get(body, "texts")) {
        mu_http_reply_error(r, 400, "rerank: \"documents\" (or TEI's \"texts\") must be a non-empty string array",
                            "documents");
        return;
    }
    mu_http_reply_error(r, 501,
                        "This server does not support reranking: the model has no classification head (rank "
                        "pooling); muser serves no reranking model",
                        NULL);
}

/* POST /props: llama.cpp changes global properties only when started with
 * --props (501 otherwise); muser has none to change. */
void api_llama_props_set(mu_http_req *r, const json_t *body) {
    (void)body;
    mu_http_reply_error(r, 501, "props: changing global properties is not supported", NULL);
}

/* GET /lora-adapters: the adapters loaded, [{id, path, scale}]; muser
 * loads none (no --lora), so the list is empty. */
void api_llama_lora_list(mu_http_req *r, const json_t *body) {
    (void)body;
    mu_http_reply_json(r, 200, json_array());
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
    int mode = api_chat_mode(r, body);
    if (mode < 0) return;
    json_t *tools = json_object_get(body, "tools");
    /* images: the prompt shows a marker where each one goes (as llama.cpp's) */
    json_t *flat = NULL;
    api_images im = {0};
    if (!api_chat_images(r, a, json_object_get(body, "messages"), &flat, &im)) return;
    api_images_free(&im);
    json_t *msgs = api_normalize_messages(flat ? flat : json_object_get(body, "messages"));
    json_decref(flat);
    if (!msgs) {
        mu_http_reply_error(r, 503, "server: out of memory", NULL);
        return;
    }
    const char *effort = mu_jc_str(body, "reasoning_effort", NULL);
    const json_t *kw = json_object_get(body, "chat_template_kwargs");
    if (!effort) effort = mu_jc_str(kw, "reasoning_effort", NULL);
    if (effort && strcmp(effort, "low") && strcmp(effort, "medium") && strcmp(effort, "high") && strcmp(effort, "xhigh")) {
        json_decref(msgs);
        mu_http_reply_error(r, 400,
                            "field 'chat_template_kwargs.reasoning_effort': must be one of 'low', 'medium', 'high', "
                            "'xhigh'",
                            "chat_template_kwargs.reasoning_effort");
        return;
    }
    int32_t *ids = NULL;
    int n = 0;
    char *text = NULL;
    bool ok = api_chat_prompt_ex(r, a, msgs, json_array_size(tools) ? tools : NULL, effort, mode, &ids, &n, &text);
    json_decref(msgs);
    free(ids);
    if (!ok) return;
    json_t *p = api_json_text(text, strlen(text));
    free(text);
    mu_http_reply_json(r, 200, json_pack("{s:o}", "prompt", p));
}

void api_llama_health(mu_http_req *r, const json_t *body) {
    (void)body;
    mu_http_reply_json(r, 200, json_pack("{s:s}", "status", "ok"));
}

/* A request's sampling and generation settings under llama.cpp's names
 * and in its order (its task params as its server echoes them in
 * generation_settings, /props and /slots). */
json_t *api_params_json(mu_http_app *a, const mu_gen_req *q, const json_t *stop, bool stream, bool timings_per_token) {
    const mu_sample_params *d = &q->sp;
    json_t *brk = json_array();
    if (d->dry_breakers) {
        for (int i = 0; i < d->n_dry_breakers; i++) json_array_append_new(brk, api_json_text(d->dry_breakers[i], strlen(d->dry_breakers[i])));
    } else {
        static const char *const def[] = {"\n", ":", "\"", "*"};
        for (int i = 0; i < 4; i++) json_array_append_new(brk, json_string(def[i]));
    }
    json_t *bias = json_array();
    for (int i = 0; i < d->n_logit_bias; i++) /* -inf is null in JSON, as llama.cpp writes it */
        json_array_append_new(bias, json_pack("{s:o,s:i}", "bias", isfinite(d->logit_bias[i].bias) ?
                                              json_real(d->logit_bias[i].bias) : json_null(), "token",
                                              d->logit_bias[i].id));
    json_t *stops = json_array();
    if (json_is_string(stop)) json_array_append(stops, (json_t *)stop);
    else if (json_is_array(stop)) json_array_extend(stops, (json_t *)stop);
    int n_predict = api_n_predict(a, q->n_predict);
    json_t *p = json_pack("{s:I,s:f,s:f,s:f,s:i,s:f,s:f,s:f,s:f,s:f,s:f}", "seed", (json_int_t)(d->seed & 0xFFFFFFFFu),
                          "temperature", (double)d->temp, "dynatemp_range", (double)d->dynatemp_range,
                          "dynatemp_exponent", (double)d->dynatemp_exponent, "top_k", d->top_k, "top_p", (double)d->top_p,
                          "min_p", (double)d->min_p, "top_n_sigma", d->top_n_sigma > 0 ? (double)d->top_n_sigma : -1.0,
                          "xtc_probability", (double)d->xtc_probability, "xtc_threshold", (double)d->xtc_threshold,
                          "typical_p", d->typical_p > 0 ? (double)d->typical_p : 1.0);
    json_object_update_new(p, json_pack("{s:i,s:f,s:f,s:f,s:f,s:f,s:i,s:i,s:o,s:i,s:f,s:f}", "repeat_last_n",
                                        d->penalty_last_n, "repeat_penalty",
                                        d->penalty_repeat > 0 ? (double)d->penalty_repeat : 1.0, "presence_penalty",
                                        (double)d->penalty_present, "frequency_penalty", (double)d->penalty_freq,
                                        "dry_multiplier", (double)d->dry_multiplier, "dry_base", (double)d->dry_base,
                                        "dry_allowed_length", d->dry_allowed_length, "dry_penalty_last_n",
                                        d->dry_penalty_last_n, "dry_sequence_breakers", brk, "mirostat", d->mirostat,
                                        "mirostat_tau", (double)d->mirostat_tau, "mirostat_eta",
                                        (double)d->mirostat_eta));
    json_object_update_new(p, json_pack("{s:o,s:i,s:i,s:i,s:i,s:b,s:b,s:o,s:i,s:i,s:s}", "stop", stops, "max_tokens",
                                        n_predict, "n_predict", n_predict, "n_keep", 0, "n_discard", 0, "ignore_eos",
                                        q->ignore_eos, "stream", stream, "logit_bias", bias, "n_probs", q->n_top,
                                        "min_keep", d->min_keep, "grammar", ""));
    /* a chat request's (and a default's): llama.cpp's template sets them */
    json_object_update_new(p, json_pack("{s:b,s:[],s:[]}", "grammar_lazy", 0, "grammar_triggers", "preserved_tokens"));
    json_object_update_new(p, json_pack("{s:[s,s,s,s,s,s,s,s,s],s:b,s:b,s:[]}", "samplers", "penalties", "dry",
                                        "top_n_sigma", "top_k", "typ_p", "top_p", "min_p", "xtc", "temperature",
                                        "timings_per_token", timings_per_token, "post_sampling_probs", q->post_sampling,
                                        "lora"));
    return p;
}

/* The settings of a request that sets nothing: the server's defaults. */
static json_t *default_params(mu_http_app *a) {
    mu_gen_req q = {0};
    q.n_predict = -1;
    q.sp = mu_sample_defaults();
    if (a->has_temp) q.sp.temp = a->temp;
    /* llama.cpp's default seed is 0xFFFFFFFF: a random one per request */
    q.sp.seed = a->has_seed ? a->seed : 0xFFFFFFFFu;
    return api_params_json(a, &q, NULL, true, false);
}

void api_llama_props(mu_http_req *r, const json_t *body) {
    (void)body;
    mu_http_app *a = mu_http_req_app(r);
    char bos[API_PIECE_MAX] = "", eos[API_PIECE_MAX] = "";
    if (a->info->bos >= 0) bos[api_piece(a, a->info->bos, bos, sizeof bos - 1)] = 0;
    if (a->info->eos >= 0) eos[api_piece(a, a->info->eos, eos, sizeof eos - 1)] = 0;
    json_t *o = json_pack("{s:{s:i,s:o},s:i,s:s,s:s,s:s,s:{s:b,s:b,s:b},s:o,s:o,s:s,s:b,s:b,s:b,s:b}",
                          "default_generation_settings", "n_ctx", a->n_ctx, "params", default_params(a), "total_slots",
                          a->n_slots, "model_path", a->model_path, "model_alias", a->model_id, "chat_template",
                          a->chat_template ? a->chat_template : "", "modalities", "vision", a->mmproj != NULL, "video", 0, "audio", 0,
                          "bos_token", api_json_text(bos, strlen(bos)), "eos_token", api_json_text(eos, strlen(eos)),
                          "build_info", "muser " MU_COMMIT, "is_sleeping", 0, "endpoint_slots", 1, "endpoint_props", 1,
                          "endpoint_metrics", 1);
    /* the text that stands for an image in a /completion prompt_string */
    json_object_set_new(o, "media_marker", json_string(MU_MEDIA_MARKER));
    mu_http_reply_json(r, 200, o);
}

void api_llama_slots(mu_http_req *r, const json_t *body) {
    (void)body;
    mu_http_app *a = mu_http_req_app(r);
    if (a->no_slots) { /* llama.cpp answers 501 not_supported_error */
        mu_http_reply_error(r, 501, "slots: the /slots endpoint is off (the server runs with --no-slots)", NULL);
        return;
    }
    json_t *arr = json_array();
    for (int i = 0; i < a->n_slots; i++) {
        mu_sched_slot_info si;
        mu_sched_get_slot(a->sched, i, &si);
        /* llama.cpp's slot object (next_token is an array of one), plus n_past */
        json_t *o = json_pack("{s:i,s:i,s:b,s:b,s:i}", "id", i, "n_ctx", a->n_ctx, "speculative", 0,
                              "is_processing", si.busy, "n_past", si.n_past);
        if (si.busy) /* llama.cpp adds these for a slot that has a task */
            json_object_update_new(
                o, json_pack("{s:i,s:i,s:i,s:o,s:[{s:b,s:b,s:i,s:i}]}", "n_prompt_tokens", si.n_prompt,
                             "n_prompt_tokens_processed", si.n_past < si.n_prompt ? si.n_past : si.n_prompt,
                             "n_prompt_tokens_cache", 0, "params", default_params(a), "next_token", "has_next_token", 1,
                             "has_new_line", 0, "n_remain", -1, "n_decoded", si.n_gen));
        json_array_append_new(arr, o);
    }
    mu_http_reply_json(r, 200, arr);
}

void api_llama_metrics(mu_http_req *r, const json_t *body) {
    (void)body;
    mu_http_app *a = mu_http_req_app(r);
    if (a->no_metrics) {
        mu_http_reply_error(r, 501, "metrics: the /metrics endpoint is off (the server runs with --no-metrics)", NULL);
        return;
    }
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
    COUNTER("prompt_tokens_total", "Number of prompt tokens processed, excluding cached tokens.", m.n_prompt_tokens);
    COUNTER("prompt_tokens_cached_total", "Number of prompt tokens reused from the cache.", m.n_prompt_cached);
    /* the reuse ladder (docs/kvpack.md "The server's prefix cache") */
    COUNTER("prompt_tokens_cached_slot_total", "Prompt tokens reused from the slot's live session.",
            m.n_reused_src[MU_KV_SRC_SLOT]);
    COUNTER("prompt_tokens_cached_prefix_total", "Prompt tokens restored from the resident prefix cache.",
            m.n_reused_src[MU_KV_SRC_CACHE]);
    COUNTER("prompt_tokens_cached_pack_total", "Prompt tokens restored from a pack of the pack store.",
            m.n_reused_src[MU_KV_SRC_PACK]);
    COUNTER("prompt_cache_requests_slot_total", "cache_prompt requests whose prefix came from the live slot.",
            m.n_reuse_jobs[MU_KV_SRC_SLOT]);
    COUNTER("prompt_cache_requests_prefix_total", "cache_prompt requests whose prefix came from the prefix cache.",
            m.n_reuse_jobs[MU_KV_SRC_CACHE]);
    COUNTER("prompt_cache_requests_pack_total", "cache_prompt requests whose prefix came from the pack store.",
            m.n_reuse_jobs[MU_KV_SRC_PACK]);
    COUNTER("prompt_cache_requests_miss_total", "cache_prompt requests that reused nothing.",
            m.n_reuse_jobs[MU_KV_SRC_NONE]);
    if (a->cache) {
        mu_kv_cache_stats cs;
        mu_kv_cache_get_stats(a->cache, &cs);
        GAUGE("prefix_cache_bytes", "Bytes of KV rows the prefix cache holds.", cs.bytes);
        GAUGE("prefix_cache_bytes_max", "The prefix cache's byte budget.", cs.max_bytes);
        GAUGE("prefix_cache_nodes", "Checkpoint blocks the prefix cache holds.", cs.n_nodes);
        GAUGE("prefix_cache_nodes_pinned", "Of which pinned (never evicted).", cs.n_pinned);
        COUNTER("prefix_cache_inserted_total", "Blocks added to the prefix cache.", cs.n_inserted);
        COUNTER("prefix_cache_evicted_total", "Blocks evicted from the prefix cache.", cs.n_evicted);
        COUNTER("prefix_cache_store_errors_total", "Store packs that failed to read or verify (misses).",
                cs.n_store_errors);
    }
    if (a->pack_dir[0] && a->pack_max_bytes) {
        uint64_t ev = 0, evb = 0, sb = 0;
        api_sessions_store_stats(a, &ev, &evb, &sb);
        GAUGE("pack_store_bytes_max", "The pack store's byte budget (--pack-max-bytes).", a->pack_max_bytes);
        GAUGE("pack_store_bytes", "Bytes of the pack store after its last budget pass.", sb);
        COUNTER("pack_store_evicted_total", "Packs the budget removed from the pack store.", ev);
        COUNTER("pack_store_evicted_bytes_total", "Bytes of those packs.", evb);
    }
    COUNTER("prompt_seconds_total", "Prompt process time.", m.prompt_s);
    COUNTER("tokens_predicted_total", "Number of generation tokens processed.", m.n_gen_tokens);
    COUNTER("tokens_predicted_seconds_total", "Predict process time.", m.gen_s);
    COUNTER("n_decode_total", "Total number of batched forward calls.", m.n_forward);
    COUNTER("n_tokens_max", "Largest observed sequence length (prompt + generation).", m.n_tokens_max);
    COUNTER("spec_decode_num_draft_tokens_total", "Speculative: Total draft tokens generated", m.n_draft_tokens);
    COUNTER("spec_decode_num_accepted_tokens_total", "Speculative: Total draft tokens accepted by the target model",
            m.n_draft_accepted);
    COUNTER("spec_decode_num_drafts_total", "Speculative: Total speculative decoding verification steps",
            m.n_spec_steps);
    GAUGE("spec_row_cost", "Speculative: what the drafting policy charges a verified draft, in decode steps.",
          m.spec_row_cost);
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
          m.prompt_s > 0 ? m.n_prompt_timed / m.prompt_s : 0);
    GAUGE("predicted_tokens_seconds", "Average generation throughput in tokens/s.",
          m.gen_s > 0 ? m.n_gen_timed / m.gen_s : 0);
    GAUGE("requests_processing", "Number of requests processing.", m.n_processing);
    GAUGE("requests_deferred", "Number of requests deferred.", m.n_queued);
    GAUGE("n_slots", "Number of slots.", m.n_slots);
    GAUGE("n_busy_slots_per_decode", "Average number of busy slots per forward call.",
          m.n_forward ? (double)m.n_busy_sum / (double)m.n_forward : 0);
#undef COUNTER
#undef GAUGE
    if (a->metrics) {
        char extra[4096];
        int n = a->metrics(a->metrics_user, extra, sizeof extra);
        if (n > 0) mu_http_buf_fmt(&b, "%.*s", n, extra);
    }
    api_dash_metrics(a, &b);
    if (b.oom) {
        mu_http_buf_free(&b);
        mu_http_reply_error(r, 503, "server: out of memory", NULL);
        return;
    }
    char t0[32];
    snprintf(t0, sizeof t0, "%lld", (long long)a->t_start);
    mu_http_reply_text_hdr(r, 200, "text/plain; version=0.0.4; charset=utf-8", b.p, b.n, "Process-Start-Time-Unix", t0);
    mu_http_buf_free(&b);
}
