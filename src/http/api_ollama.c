/* api_ollama.c: Ollama's protocol: /api/generate, /api/chat (NDJSON
 * streaming, on by default as in Ollama), /api/tags, /api/show, /api/version.
 * Owns: Ollama's shapes (created_at, response/message, done records with
 * counts and durations in nanoseconds, done_reason), its options object.
 * Does not own: validation tables (api.c), reading a job's events (api_job.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"

static bool check(mu_http_req *r, const json_t *body, const char *model_key) {
    mu_err err = {0};
    int rc = mu_jc_check(body, api_schema(mu_http_req_path(r)), &err);
    if (rc) {
        mu_http_reply_status(r, rc, &err);
        return false;
    }
    return api_model_ok(r, body, model_key);
}

static char *tag_name(mu_http_app *a) {
    size_t n = strlen(a->model_id) + 8;
    char *s = malloc(n);
    if (s) snprintf(s, n, "%s:latest", a->model_id);
    return s;
}

typedef struct {
    api_job g;
    mu_http_app *a;
    bool chat, think, stream, done;
    bool logprobs;
    int n_top, lp_sent;      /* answer tokens whose logprobs were sent */
    double t0_ms;
    int32_t *prompt_ids;     /* /api/generate (not raw): the prompt, for the answer's context */
    int n_prompt_ids;
} ol_state;

/* Ollama's logprobs of the answer tokens not sent yet: [{token, logprob,
 * bytes, top_logprobs: [{token, logprob, bytes}]}]. */
static json_t *take_logprobs(ol_state *s) {
    api_job *g = &s->g;
    json_t *arr = json_array();
    for (; s->lp_sent < g->n_ctoks; s->lp_sent++) {
        const api_tok *t = &g->toks[g->ctoks[s->lp_sent]];
        json_t *top = json_array();
        for (int k = 0; k < t->n_top && k < s->n_top; k++)
            json_array_append_new(top, json_pack("{s:o,s:f,s:o}", "token", api_token_str(s->a, t->top_ids[k]),
                                                 "logprob", (double)t->top_logprobs[k], "bytes",
                                                 api_token_bytes(s->a, t->top_ids[k])));
        json_array_append_new(arr, json_pack("{s:o,s:f,s:o,s:o}", "token", api_token_str(s->a, t->id), "logprob",
                                             (double)t->logprob, "bytes", api_token_bytes(s->a, t->id),
                                             "top_logprobs", top));
    }
    return arr;
}

static json_t *head(ol_state *s) {
    char ts[48];
    api_iso_time(ts, sizeof ts);
    return json_pack("{s:s,s:s}", "model", s->a->model_id, "created_at", ts);
}

static json_t *delta_record(ol_state *s, const char *cs, size_t nc, const char *rs, size_t nr) {
    json_t *o = head(s);
    if (s->chat) {
        json_t *m = json_pack("{s:s,s:o}", "role", "assistant", "content", api_json_text(cs, nc));
        if (nr && s->think) json_object_set_new(m, "thinking", api_json_text(rs, nr));
        json_object_set_new(o, "message", m);
    } else {
        json_object_set_new(o, "response", api_json_text(cs, nc));
        if (nr && s->think) json_object_set_new(o, "thinking", api_json_text(rs, nr));
    }
    json_object_set_new(o, "done", json_false());
    if (s->logprobs) json_object_set_new(o, "logprobs", take_logprobs(s));
    return o;
}

static json_t *done_record(ol_state *s, const char *cs, size_t nc, const char *rs, size_t nr) {
    api_job *g = &s->g;
    json_t *o = delta_record(s, cs, nc, rs, nr);
    if (s->chat && json_array_size(g->tool_calls)) {
        json_t *arr = json_array();
        size_t i;
        json_t *c;
        json_array_foreach(g->tool_calls, i, c) json_array_append_new(arr, json_pack("{s:O}", "function", c));
        json_object_set_new(json_object_get(o, "message"), "tool_calls", arr);
    }
    const mu_gen_stats *st = &g->st;
    double total_ms = st->queue_ms + st->prompt_ms + st->gen_ms;
    json_object_set_new(o, "done", json_true());
    json_object_set_new(o, "done_reason", json_string(g->finish == MU_FINISH_LENGTH ? "length" : "stop"));
    json_object_set_new(o, "total_duration", json_integer((json_int_t)(total_ms * 1e6)));
    json_object_set_new(o, "load_duration", json_integer(0));
    json_object_set_new(o, "prompt_eval_count", json_integer(st->n_prompt));
    json_object_set_new(o, "prompt_eval_duration", json_integer((json_int_t)(st->prompt_ms * 1e6)));
    json_object_set_new(o, "eval_count", json_integer(g->n_ids));
    json_object_set_new(o, "eval_duration", json_integer((json_int_t)(st->gen_ms * 1e6)));
    if (s->prompt_ids) { /* Ollama's context: the prompt's and the answer's tokens (the end token left out) */
        json_t *c = json_array();
        for (int i = 0; i < s->n_prompt_ids; i++) json_array_append_new(c, json_integer(s->prompt_ids[i]));
        int n = g->n_ids;
        if (n > 0 && g->finish == MU_FINISH_STOP && mu_model_is_stop(s->a->model, g->ids[n - 1])) n--;
        for (int i = 0; i < n; i++) json_array_append_new(c, json_integer(g->ids[i]));
        json_object_set_new(o, "context", c);
    }
    if (st->n_draft > 0) { /* speculative decoding (muser's, in Ollama's *_count style) */
        json_object_set_new(o, "draft_count", json_integer(st->n_draft));
        json_object_set_new(o, "draft_accepted_count", json_integer(st->n_draft_accepted));
        json_object_set_new(o, "draft_step_count", json_integer(st->n_spec_steps));
    }
    return o;
}

static void line(mu_http_buf *out, json_t *j) {
    mu_http_buf_json(out, j);
    mu_http_buf_str(out, "\n");
    json_decref(j);
}

static int ol_produce(void *state, mu_http_buf *out, int fd) {
    ol_state *s = state;
    if (s->done) return 0;
    bool running = api_job_poll(&s->g, fd);
    if (s->g.finish == MU_FINISH_CANCEL) return -1;
    size_t nc = 0, nr = 0;
    const char *rs = api_job_take_reasoning(&s->g, &nr);
    const char *cs = api_job_take_content(&s->g, &nc);
    if (!running) {
        if (s->g.finish == MU_FINISH_ERROR) {
            if (nc || nr) line(out, delta_record(s, cs, nc, rs, nr));
            line(out, json_pack("{s:s}", "error", s->g.err));
        } else {
            line(out, done_record(s, cs, nc, rs, nr));
        }
        s->done = true;
        return 1;
    }
    if (nc || (nr && s->think) || (s->logprobs && s->lp_sent < s->g.n_ctoks)) line(out, delta_record(s, cs, nc, rs, nr));
    return 1; /* out may be empty: nothing ready yet */
}

static void ol_release(void *state) {
    ol_state *s = state;
    api_job_free(&s->g);
    free(s->prompt_ids);
    free(s);
}

/* Non-streaming: replies once the job ended. */
static bool ol_poll(void *state, mu_http_req *r) {
    ol_state *s = state;
    if (api_job_poll(&s->g, mu_http_req_fd(r))) return false;
    if (s->g.finish == MU_FINISH_ERROR || s->g.finish == MU_FINISH_CANCEL) {
        api_job_reply_failed(r, &s->g);
        return true;
    }
    size_t nc, nr;
    const char *rs = api_job_take_reasoning(&s->g, &nr);
    const char *cs = api_job_take_content(&s->g, &nc);
    mu_http_reply_json(r, 200, done_record(s, cs, nc, rs, nr));
    return true;
}

/* Ollama's think: a bool, or a level ("low", "medium", "high": Ollama's
 * for models with reasoning strengths), which becomes the template's
 * reasoning effort; NULL for a bool */
static const char *think_effort(const json_t *body) { return json_string_value(json_object_get(body, "think")); }

/* media: an image prompt (api_media_prompt) or NULL; taken */
static void run(mu_http_req *r, mu_http_app *a, const json_t *body, int32_t *ids, int n, const mu_mprompt *media,
                bool chat, bool use_tools, bool give_context) {
    json_t *opt = json_object_get(body, "options");
    /* num_ctx: the request's context, at most the server's (--ctx), as
     * Ollama caps it at what the model can hold; a smaller one bounds the
     * prompt and the generation */
    long long num_ctx = mu_jc_int(opt, "num_ctx", a->n_ctx);
    int n_ctx = num_ctx < a->n_ctx ? (int)num_ctx : a->n_ctx;
    if (n >= n_ctx && n_ctx < a->n_ctx) {
        free(ids);
        mu_mprompt_free((mu_mprompt *)media);
        api_reply_exceed(r, n, n_ctx);
        return;
    }
    mu_schema *schema = NULL;
    if (api_response_schema(r, body, "format", &schema)) {
        free(ids);
        mu_mprompt_free((mu_mprompt *)media);
        return;
    }
    mu_gen_req q = {0};
    q.media = media;
    q.schema = schema;
    q.schema_chat = true;
    q.chat = true;
    long long np = mu_jc_int(opt, "num_predict", -1);
    q.n_predict = np < 0 ? -1 : (int)np;
    if (n_ctx < a->n_ctx && (q.n_predict < 0 || q.n_predict > n_ctx - n)) q.n_predict = n_ctx - n;
    q.sp = api_sample_params(a, opt ? opt : json_null(), "seed");
    api_spec_params(opt, "speculative_type", "speculative_n_max", "speculative_n_min", &q);
    q.logprobs = mu_jc_bool(body, "logprobs", false);
    q.n_top = q.logprobs ? (int)mu_jc_int(body, "top_logprobs", 0) : 0;
    ol_state *s = calloc(1, sizeof *s);
    if (!s) {
        free(ids);
        mu_mprompt_free((mu_mprompt *)media);
        mu_schema_unref(schema);
        mu_http_reply_error(r, 503, "server: out of memory", NULL);
        return;
    }
    if (give_context && !media) { /* with images the prompt's rows are not tokens: no context */
        s->prompt_ids = malloc(((size_t)n + 1) * sizeof *s->prompt_ids);
        if (s->prompt_ids) memcpy(s->prompt_ids, ids, (size_t)n * sizeof *ids), s->n_prompt_ids = n;
    }
    bool ok = api_job_start(r, &s->g, a, ids, n, &q, json_object_get(opt, "stop"));
    mu_schema_unref(schema); /* the job holds its own reference */
    if (!ok) {
        free(s->prompt_ids);
        free(s);
        return;
    }
    s->a = a;
    s->chat = chat;
    s->logprobs = q.logprobs;
    s->n_top = q.n_top;
    s->g.want_toks = q.logprobs;
    s->think = mu_jc_bool(body, "think", true);
    if (mu_jc_bool(body, "stream", true)) {
        mu_http_reply_stream(r, "application/x-ndjson", ol_produce, ol_release, s);
        return;
    }
    mu_http_reply_later(r, ol_poll, ol_release, s);
}

static void reply_loaded(mu_http_req *r, mu_http_app *a, bool chat) {
    char ts[48];
    api_iso_time(ts, sizeof ts);
    json_t *o = json_pack("{s:s,s:s,s:b,s:s}", "model", a->model_id, "created_at", ts, "done", 1, "done_reason", "load");
    if (chat) json_object_set_new(o, "message", json_pack("{s:s,s:s}", "role", "assistant", "content", ""));
    else json_object_set_new(o, "response", json_string(""));
    mu_http_reply_json(r, 200, o);
}

/* *text becomes the context's tokens as text followed by *text (replaced,
 * less a leading BOS);
 * false after replying 400 (an id outside the vocabulary) or 503 */
static bool with_context(mu_http_req *r, mu_http_app *a, const json_t *ctx, char **text) {
    mu_http_buf b = {0};
    char piece[API_PIECE_MAX];
    size_t i;
    json_t *x;
    json_array_foreach(ctx, i, x) {
        json_int_t id = json_integer_value(x);
        if (id >= a->info->n_vocab) {
            char m[96];
            snprintf(m, sizeof m, "field 'context[%zu]': not a token id of this model", i);
            mu_http_buf_free(&b);
            mu_http_reply_error(r, 400, m, "context");
            return false;
        }
        int n = api_piece(a, (int32_t)id, piece, sizeof piece);
        if (n > 0) mu_http_buf_add(&b, piece, (size_t)n);
    }
    /* the rendered turn's own BOS stays at the front of the whole (where
     * Ollama's tokenizer adds it), not between the turns */
    const char *t = *text;
    int bn = a->info->bos >= 0 ? api_piece(a, a->info->bos, piece, sizeof piece) : 0;
    if (bn > 0 && !strncmp(t, piece, (size_t)bn)) t += bn;
    mu_http_buf_str(&b, t);
    if (b.oom) {
        mu_http_buf_free(&b);
        mu_http_reply_error(r, 503, "server: out of memory", NULL);
        return false;
    }
    free(*text);
    *text = b.p;
    return true;
}

void api_ollama_generate(mu_http_req *r, const json_t *body) {
    mu_http_app *a = mu_http_req_app(r);
    if (!check(r, body, "model")) return;
    const char *prompt = mu_jc_str(body, "prompt", "");
    api_images im = {0};
    if (!api_b64_images(r, json_object_get(body, "images"), "images", &im) || !api_images_gate(r, a, &im)) {
        api_images_free(&im);
        return;
    }
    if (!*prompt && !im.n) {
        reply_loaded(r, a, false);
        return;
    }
    /* images: a marker for each before the prompt's text */
    mu_http_buf pb = {0};
    for (int i = 0; i < im.n; i++) mu_http_buf_str(&pb, MU_MEDIA_MARKER);
    mu_http_buf_str(&pb, prompt);
    if (pb.oom) {
        api_images_free(&im);
        mu_http_buf_free(&pb);
        mu_http_reply_error(r, 503, "server: out of memory", NULL);
        return;
    }
    int32_t *ids = NULL;
    int n = 0;
    char *text = NULL;
    bool ok = true;
    if (mu_jc_bool(body, "raw", false)) {
        mu_err err = {0};
        int rc = im.n ? 0 : api_tokenize_prompt(a, pb.p, true, &ids, &n, &err);
        if (rc) {
            mu_http_reply_status(r, rc, &err);
            ok = false;
        }
        text = strdup(pb.p);
        ok = ok && text;
    } else {
        json_t *msgs = json_array();
        const char *sys = mu_jc_str(body, "system", NULL);
        if (sys) json_array_append_new(msgs, json_pack("{s:s,s:s}", "role", "system", "content", sys));
        json_array_append_new(msgs, json_pack("{s:s,s:s}", "role", "user", "content", pb.p));
        ok = api_chat_prompt_ex(r, a, msgs, NULL, think_effort(body), API_PROMPT_GEN, &ids, &n, &text);
        json_decref(msgs);
        /* Ollama's deprecated context: the earlier conversation's tokens as
         * text (special tokens written out) before this prompt's */
        const json_t *ctx = json_object_get(body, "context");
        if (ok && json_array_size(ctx) && !(ok = with_context(r, a, ctx, &text))) {
            free(ids);
            ids = NULL;
        }
        if (ok && json_array_size(ctx)) {
            mu_err err = {0};
            free(ids);
            ids = NULL;
            int rc = im.n ? 0 : api_tokenize_prompt(a, text, true, &ids, &n, &err);
            if (rc) {
                mu_http_reply_status(r, rc, &err);
                ok = false;
            }
        }
    }
    mu_http_buf_free(&pb);
    const mu_mprompt *media = NULL;
    if (ok && im.n) {
        free(ids);
        ids = NULL;
        ok = api_media_prompt(r, a, text, &im, &ids, &n, &media);
    }
    free(text);
    api_images_free(&im);
    if (!ok) {
        free(ids);
        return;
    }
    run(r, a, body, ids, n, media, false, false, !mu_jc_bool(body, "raw", false));
}

void api_ollama_chat(mu_http_req *r, const json_t *body) {
    mu_http_app *a = mu_http_req_app(r);
    if (!check(r, body, "model")) return;
    json_t *in = json_object_get(body, "messages");
    api_images im = {0};
    bool ok_im = true;
    for (size_t k = 0; ok_im && k < json_array_size(in); k++) {
        char f[64];
        snprintf(f, sizeof f, "messages[%zu].images", k);
        ok_im = api_b64_images(r, json_object_get(json_array_get(in, k), "images"), f, &im);
    }
    if (!ok_im || !api_images_gate(r, a, &im)) {
        api_images_free(&im);
        return;
    }
    if (!json_array_size(in)) {
        reply_loaded(r, a, true);
        return;
    }
    /* Ollama messages -> template shape */
    json_t *msgs = json_array();
    size_t i;
    json_t *m;
    json_array_foreach(in, i, m) {
        /* a message's images: a marker for each before its text */
        mu_http_buf cb = {0};
        for (size_t k = 0; k < json_array_size(json_object_get(m, "images")); k++) mu_http_buf_str(&cb, MU_MEDIA_MARKER);
        mu_http_buf_str(&cb, mu_jc_str(m, "content", ""));
        json_t *n = json_pack("{s:O,s:s%}", "role", json_object_get(m, "role"), "content", cb.p ? cb.p : "", cb.n);
        mu_http_buf_free(&cb);
        if (json_object_get(m, "thinking")) json_object_set(n, "reasoning_content", json_object_get(m, "thinking"));
        json_t *tc = json_object_get(m, "tool_calls");
        if (tc) {
            json_t *calls = json_array();
            size_t k;
            json_t *c;
            json_array_foreach(tc, k, c) json_array_append_new(
                calls, json_pack("{s:s,s:O}", "type", "function", "function", json_object_get(c, "function")));
            json_object_set_new(n, "tool_calls", calls);
        }
        if (json_object_get(m, "tool_name")) json_object_set(n, "name", json_object_get(m, "tool_name"));
        json_array_append_new(msgs, n);
    }
    json_t *tools = json_object_get(body, "tools");
    bool use_tools = json_array_size(tools) > 0;
    int32_t *ids = NULL;
    int n = 0;
    char *text = NULL;
    bool ok = api_chat_prompt_ex(r, a, msgs, use_tools ? tools : NULL, think_effort(body), API_PROMPT_GEN, &ids, &n,
                                 im.n ? &text : NULL);
    json_decref(msgs);
    const mu_mprompt *media = NULL;
    if (ok && im.n) {
        free(ids);
        ids = NULL;
        ok = api_media_prompt(r, a, text, &im, &ids, &n, &media);
    }
    free(text);
    api_images_free(&im);
    if (!ok) return;
    run(r, a, body, ids, n, media, true, use_tools, false);
}

static json_t *details(mu_http_app *a) {
    return json_pack("{s:s,s:s,s:s,s:[s],s:s,s:s}", "parent_model", "", "format", "gguf", "family", "muse-glimmer",
                     "families", "muse-glimmer", "parameter_size", "", "quantization_level", "");
}

void api_ollama_tags(mu_http_req *r, const json_t *body) {
    (void)body;
    mu_http_app *a = mu_http_req_app(r);
    char *name = tag_name(a);
    char ts[48];
    api_iso_time(ts, sizeof ts);
    json_t *m = json_pack("{s:s,s:s,s:s,s:I,s:s,s:o}", "name", name ? name : a->model_id, "model",
                          name ? name : a->model_id, "modified_at", ts, "size", (json_int_t)a->model_bytes, "digest", "",
                          "details", details(a));
    free(name);
    mu_http_reply_json(r, 200, json_pack("{s:[o]}", "models", m));
}

void api_ollama_show(mu_http_req *r, const json_t *body) {
    mu_http_app *a = mu_http_req_app(r);
    if (!check(r, body, "model") || !api_model_ok(r, body, "name")) return;
    const mu_model_info *in = a->info;
    json_t *info = json_pack("{s:s,s:s,s:i,s:i,s:i,s:i,s:i,s:i}", "general.architecture", "muse-glimmer", "general.name",
                             a->model_id, "muse-glimmer.context_length", in->n_ctx_train,
                             "muse-glimmer.embedding_length", in->n_embd, "muse-glimmer.block_count", in->n_layer,
                             "muse-glimmer.attention.head_count", in->n_head, "muse-glimmer.attention.head_count_kv",
                             in->n_head_kv, "muse-glimmer.vocab_size", in->n_vocab);
    json_t *o = json_pack("{s:s,s:s,s:s,s:o,s:o,s:[s,s,s]}", "modelfile", "", "parameters", "", "template",
                          a->chat_template ? a->chat_template : "", "details", details(a), "model_info", info,
                          "capabilities", "completion", "tools", "thinking");
    if (a->mmproj) json_array_append_new(json_object_get(o, "capabilities"), json_string("vision"));
    mu_http_reply_json(r, 200, o);
}

void api_ollama_version(mu_http_req *r, const json_t *body) {
    (void)body;
    mu_http_reply_json(r, 200, json_pack("{s:s}", "version", "0.9.0"));
}

/* GET /api/ps: the one model, always loaded. */
void api_ollama_ps(mu_http_req *r, const json_t *body) {
    (void)body;
    mu_http_app *a = mu_http_req_app(r);
    char *name = tag_name(a);
    json_t *m = json_pack("{s:s,s:s,s:I,s:s,s:o,s:s,s:I,s:i}", "name", name ? name : a->model_id, "model",
                          name ? name : a->model_id, "size", (json_int_t)a->model_bytes, "digest", "", "details",
                          details(a), "expires_at", "2318-01-01T00:00:00Z", "size_vram", (json_int_t)0,
                          "context_length", a->n_ctx);
    free(name);
    mu_http_reply_json(r, 200, json_pack("{s:[o]}", "models", m));
}
