/* api_embed.c: embeddings in three protocols' shapes: OpenAI
 * /v1/embeddings, llama.cpp /embedding and /embeddings, Ollama /api/embed
 * and the older /api/embeddings.
 * Owns: input forms (a string, token ids, a mix, or a list of those), which
 * pooling and normalization each route applies, and the response shapes
 * (floats or OpenAI's base64 of little-endian float32).
 * Does not own: computing the rows and pooling them (src/gen: an embedding
 * job, mu_gen_req.embd) or validation tables (api.c).
 * Design: each input is one scheduler job; a request keeps at most one job
 * per slot in flight and submits the next input when one ends, so a long
 * list takes one queue place per slot, never the whole queue. A job refused
 * busy on the way fails the whole request with 429. */
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"

enum { EM_OAI, EM_LLAMA, EM_OLLAMA, EM_OLLAMA_OLD };

#define EM_MAX_INPUTS 2048  /* OpenAI's limit on inputs per request */

typedef struct {
    mu_http_app *a;
    int kind;
    mu_embd_pooling pool;
    int norm;
    bool base64, truncate;
    int limit;               /* most tokens per input */
    int n_in, next, n_done, n_tokens;
    int32_t **ids;           /* [n_in] prompts (freed once submitted) */
    int *n_ids;
    json_t **res;            /* [n_in] embedding of each input (array of rows or one row) */
    mu_job *jobs[MU_SCHED_MAX_SLOTS];
    int job_in[MU_SCHED_MAX_SLOTS];
    int width;               /* jobs in flight at most */
    double prompt_ms;
    char model[264];
} em_state;

static void em_release(void *state) {
    em_state *s = state;
    for (int k = 0; k < s->width; k++) mu_job_free(s->jobs[k]);
    for (int i = 0; i < s->n_in; i++) {
        free(s->ids[i]);
        json_decref(s->res[i]);
    }
    free(s->ids);
    free(s->n_ids);
    free(s->res);
    free(s);
}

static json_t *row_json(const em_state *s, const float *v, int n) {
    if (s->base64) {
        size_t bytes = (size_t)n * sizeof(float);
        unsigned char *b = malloc(4 * ((bytes + 2) / 3) + 1);
        if (!b) return NULL;
        /* float32 little-endian, as OpenAI's base64 encoding (x86 and arm64 hosts are little-endian) */
        EVP_EncodeBlock(b, (const unsigned char *)v, (int)bytes);
        json_t *j = json_string((const char *)b);
        free(b);
        return j;
    }
    json_t *arr = json_array();
    for (int i = 0; i < n && arr; i++)
        if (json_array_append_new(arr, json_real((double)v[i]))) {
            json_decref(arr);
            return NULL;
        }
    return arr;
}

/* The result of input k, from its finished job. */
static bool em_take(em_state *s, int k, mu_job *j) {
    int rows = 0, dim = 0;
    const float *e = mu_job_embedding(j, &rows, &dim);
    if (!e) return false;
    json_t *o;
    if (s->kind == EM_LLAMA) { /* an array of rows (one when pooled) */
        o = json_array();
        for (int r = 0; r < rows && o; r++) {
            json_t *row = row_json(s, e + (size_t)r * dim, dim);
            if (!row || json_array_append_new(o, row)) {
                json_decref(o);
                o = NULL;
            }
        }
    } else {
        o = row_json(s, e, dim);
    }
    s->res[k] = o;
    return o != NULL;
}

/* Submits input k into in-flight place p; replies and returns false on failure. */
static bool em_submit(mu_http_req *r, em_state *s, int p, int k) {
    mu_gen_req q = {0};
    q.prompt = s->ids[k];
    q.n_prompt = s->n_ids[k];
    q.n_predict = 1;
    q.sp = mu_sample_defaults();
    q.embd = s->pool;
    q.embd_normalize = s->norm;
    q.no_text = true;
    mu_err err = {0};
    mu_job *j = NULL;
    int rc = mu_sched_submit(s->a->sched, &q, 1, &j, &err);
    free(s->ids[k]);
    s->ids[k] = NULL;
    if (rc) {
        mu_http_reply_status(r, rc, &err);
        return false;
    }
    s->jobs[p] = j;
    s->job_in[p] = k;
    mu_job_set_notify(j, mu_http_req_wake, r);
    return true;
}

static void em_reply(mu_http_req *r, em_state *s) {
    mu_http_app *a = s->a;
    json_t *o = NULL;
    if (s->kind == EM_OAI) {
        json_t *data = json_array();
        for (int i = 0; i < s->n_in; i++)
            json_array_append_new(data, json_pack("{s:s,s:i,s:O}", "object", "embedding", "index", i, "embedding",
                                                  s->res[i]));
        o = json_pack("{s:s,s:s,s:o,s:{s:i,s:i}}", "object", "list", "model", s->model[0] ? s->model : a->model_id,
                      "data", data, "usage", "prompt_tokens", s->n_tokens, "total_tokens", s->n_tokens);
    } else if (s->kind == EM_LLAMA) {
        o = json_array();
        for (int i = 0; i < s->n_in; i++)
            json_array_append_new(o, json_pack("{s:i,s:O}", "index", i, "embedding", s->res[i]));
    } else if (s->kind == EM_OLLAMA) {
        json_t *embs = json_array();
        for (int i = 0; i < s->n_in; i++) json_array_append(embs, s->res[i]);
        o = json_pack("{s:s,s:o,s:I,s:i,s:i}", "model", s->model[0] ? s->model : a->model_id, "embeddings", embs,
                      "total_duration", (json_int_t)(s->prompt_ms * 1e6), "load_duration", 0, "prompt_eval_count",
                      s->n_tokens);
    } else {
        o = json_pack("{s:O}", "embedding", s->res[0]);
    }
    mu_http_reply_json(r, 200, o);
}

static bool em_poll(void *state, mu_http_req *r) {
    em_state *s = state;
    bool progress = true;
    while (progress) {
        progress = false;
        for (int p = 0; p < s->width; p++) {
            mu_job *j = s->jobs[p];
            if (!j) continue;
            mu_gen_event ev;
            bool fin = false;
            while (mu_job_next(j, &ev, 0) == 1)
                if (ev.kind == MU_EV_FINISH) {
                    fin = true;
                    break;
                }
            if (!fin) continue;
            if (ev.finish != MU_FINISH_STOP) {
                if (ev.finish == MU_FINISH_ERROR) mu_http_reply_error(r, 500, ev.err && *ev.err ? ev.err : "engine: embedding failed", NULL);
                else mu_http_reply_error(r, 499, "client closed the request", NULL);
                return true;
            }
            s->n_tokens += ev.stats.n_prompt;
            s->prompt_ms += ev.stats.queue_ms + ev.stats.prompt_ms;
            if (!em_take(s, s->job_in[p], j)) {
                mu_http_reply_error(r, 503, "server: out of memory", NULL);
                return true;
            }
            mu_job_free(j);
            s->jobs[p] = NULL;
            s->n_done++;
            progress = true;
            if (s->next < s->n_in && !em_submit(r, s, p, s->next++)) return true;
        }
    }
    if (s->n_done == s->n_in) {
        em_reply(r, s);
        return true;
    }
    if (!mu_http_req_alive(r)) {
        mu_http_reply_error(r, 499, "client closed the request", NULL);
        return true;
    }
    return false;
}

/* Tokens of one input: a string (BOS by the model's rule + its tokens with
 * special texts parsed, as llama.cpp's server), token ids (as given), or a
 * mix (api_prompt_tokens); then the length rule. */
static bool em_tokens(mu_http_req *r, em_state *s, int k, const json_t *in, const char *field) {
    char m[200];
    if (!api_prompt_tokens(r, s->a, in, field, &s->ids[k], &s->n_ids[k], NULL)) return false;
    if (s->n_ids[k] == 0) {
        snprintf(m, sizeof m, "field '%s': input content cannot be empty", field);
        mu_http_reply_error(r, 400, m, field);
        return false;
    }
    if (s->n_ids[k] > s->limit) {
        if (!s->truncate) {
            snprintf(m, sizeof m, "field '%s': input (%d tokens) is too large to process: at most %d tokens%s",
                     field, s->n_ids[k], s->limit,
                     s->pool == MU_EMBD_LAST ? "" : " (pooling needs the input in one batch)");
            mu_http_reply_error(r, 400, m, field);
            return false;
        }
        s->n_ids[k] = s->limit;
    }
    return true;
}

/* Any token id in the array (then it is one prompt, as llama.cpp splits). */
static bool has_number(const json_t *arr) {
    size_t i;
    json_t *x;
    json_array_foreach(arr, i, x) if (json_is_number(x)) return true;
    return false;
}

void api_embeddings(mu_http_req *r, const json_t *body) {
    mu_http_app *a = mu_http_req_app(r);
    const char *path = mu_http_req_path(r);
    mu_err err = {0};
    int rc = mu_jc_check(body, api_schema(path), &err);
    if (rc) {
        mu_http_reply_status(r, rc, &err);
        return;
    }
    if (!api_model_ok(r, body, "model")) return;
    int kind = !strcmp(path, "/v1/embeddings")   ? EM_OAI
               : !strcmp(path, "/api/embed")      ? EM_OLLAMA
               : !strcmp(path, "/api/embeddings") ? EM_OLLAMA_OLD
                                                  : EM_LLAMA;
    const char *field = kind == EM_OLLAMA_OLD ? "prompt" : json_object_get(body, "input") ? "input" : "content";
    const json_t *in = json_object_get(body, field);
    if (!in || json_is_null(in)) {
        mu_http_reply_error(r, 400, "field 'input': is required (or 'content')", "input");
        return;
    }
    /* "content" is llama.cpp's non-OpenAI form, answered in its shape */
    if (kind == EM_OAI && !strcmp(field, "content")) kind = EM_LLAMA;
    long long dims = mu_jc_int(body, "dimensions", a->info->n_embd);
    if (dims != a->info->n_embd) {
        char m[160];
        snprintf(m, sizeof m, "field 'dimensions': this model's embeddings have %d dimensions (shortening is not supported)",
                 a->info->n_embd);
        mu_http_reply_error(r, 400, m, "dimensions");
        return;
    }
    em_state *s = calloc(1, sizeof *s);
    if (!s) {
        mu_http_reply_error(r, 503, "server: out of memory", NULL);
        return;
    }
    s->a = a;
    s->kind = kind;
    s->pool = a->pooling;
    s->norm = (int)mu_jc_int(body, "embd_normalize", 2);
    if (kind == EM_OLLAMA || kind == EM_OLLAMA_OLD) {
        /* Ollama answers one vector per input: the last token's row when the
         * model has no pooling (as its llama.cpp runner), L2-normalized by
         * /api/embed, raw from the older /api/embeddings */
        if (s->pool == MU_EMBD_NONE) s->pool = MU_EMBD_LAST;
        s->norm = kind == EM_OLLAMA ? 2 : -1;
    }
    if (kind == EM_OAI && s->pool == MU_EMBD_NONE) {
        free(s);
        mu_http_reply_error(r, 400,
                            "pooling type 'none' is not OpenAI-compatible: start muser serve with --pooling mean, cls "
                            "or last (or use /embedding)",
                            NULL);
        return;
    }
    s->base64 = !strcmp(mu_jc_str(body, "encoding_format", "float"), "base64");
    s->truncate = kind == EM_OLLAMA ? mu_jc_bool(body, "truncate", true) : false;
    int chunk = 512; /* the scheduler's prompt tokens per step */
    s->limit = s->pool == MU_EMBD_LAST ? a->n_ctx - 1 : (chunk < a->n_ctx - 1 ? chunk : a->n_ctx - 1);
    snprintf(s->model, sizeof s->model, "%s", mu_jc_str(body, "model", ""));
    /* one input, or a list of inputs */
    bool many = json_is_array(in) && json_array_size(in) > 0 && !has_number(in);
    s->n_in = many ? (int)json_array_size(in) : 1;
    if (s->n_in > EM_MAX_INPUTS) {
        free(s);
        char m[128];
        snprintf(m, sizeof m, "field '%s': too many inputs (at most %d)", field, EM_MAX_INPUTS);
        mu_http_reply_error(r, 400, m, field);
        return;
    }
    s->ids = calloc((size_t)s->n_in, sizeof *s->ids);
    s->n_ids = calloc((size_t)s->n_in, sizeof *s->n_ids);
    s->res = calloc((size_t)s->n_in, sizeof *s->res);
    if (!s->ids || !s->n_ids || !s->res) {
        em_release(s);
        mu_http_reply_error(r, 503, "server: out of memory", NULL);
        return;
    }
    for (int k = 0; k < s->n_in; k++) {
        char f[64];
        if (many) snprintf(f, sizeof f, "%s[%d]", field, k);
        else snprintf(f, sizeof f, "%s", field);
        if (!em_tokens(r, s, k, many ? json_array_get(in, (size_t)k) : in, f)) {
            em_release(s);
            return;
        }
    }
    s->width = s->n_in < a->n_slots ? s->n_in : a->n_slots;
    for (int p = 0; p < s->width; p++)
        if (!em_submit(r, s, p, s->next++)) {
            em_release(s);
            return;
        }
    mu_http_reply_later(r, em_poll, em_release, s);
}
