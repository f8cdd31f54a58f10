/* api_job.c: the generation driver and helpers the three adapters share.
 * Owns: prompt tokenization (BOS rule), submitting a job and answering
 * 400/429 when that fails, turning token ids into text (UTF-8 assembly,
 * special tokens hidden; for chat, the text with its markers goes through
 * chat/chat.h's streaming parser into reasoning, content and tool calls),
 * stop strings (the text after a match is
 * cut and the job cancelled; bytes that may start a stop string are held
 * back), sampling defaults, model-id checks, timings.
 * Does not own: protocol shapes (api_openai.c, api_llamacpp.c, api_ollama.c).
 * Design: the driver is pull-based and never waits: api_job_poll takes what
 * is ready (then checks the client socket for a hang-up), and the job's
 * notify wakes the request's suspended connection when more is ready
 * (server.h), so a streaming reader and a waiting handler use the same
 * code. */
#include "api.h"


#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

/* ---- small helpers ---------------------------------------------------- */

int64_t api_unix_now(void) { return (int64_t)time(NULL); }

static double mono_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

void api_new_id(char *buf, size_t cap, const char *prefix) {
    static unsigned long long ctr;
    unsigned long long c = __atomic_add_fetch(&ctr, 1, __ATOMIC_RELAXED);
    snprintf(buf, cap, "%s%llx%08llx", prefix, (unsigned long long)api_unix_now(), c);
}

void api_content_text(const json_t *c, mu_http_buf *b) {
    if (json_is_string(c)) {
        mu_http_buf_add(b, json_string_value(c), json_string_length(c));
        return;
    }
    size_t i;
    json_t *x;
    json_array_foreach(c, i, x) {
        json_t *t = json_object_get(x, "text");
        if (json_is_string(t)) mu_http_buf_add(b, json_string_value(t), json_string_length(t));
    }
}

void api_sse_event(mu_http_buf *out, const char *name, json_t *data) {
    json_t *o = json_pack("{s:s}", "type", name);
    json_object_update(o, data);
    json_decref(data);
    mu_http_buf_fmt(out, "event: %s\ndata: ", name);
    mu_http_buf_json(out, o);
    mu_http_buf_str(out, "\n\n");
    json_decref(o);
}

int api_forced_names(const json_t *tools, const char *want, const char **names) {
    int n = 0;
    size_t i;
    const json_t *t;
    json_array_foreach(tools, i, t) {
        const char *nm = mu_jc_str(t, "name", "");
        if ((!want || !strcmp(want, nm)) && n < MU_GEN_MAX_CALLS) names[n++] = nm;
    }
    return n;
}

void api_iso_time(char *buf, size_t cap) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    struct tm tm;
    gmtime_r(&tv.tv_sec, &tm);
    char d[32];
    strftime(d, sizeof d, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf, cap, "%s.%06ldZ", d, (long)tv.tv_usec);
}

size_t api_utf8_complete(const char *s, size_t n) {
    /* look back at most 3 bytes for an unfinished lead byte */
    for (size_t back = 1; back <= 4 && back <= n; back++) {
        unsigned char c = (unsigned char)s[n - back];
        if ((c & 0xC0) == 0x80) continue;  /* continuation */
        size_t need = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 1;
        return need > back ? n - back : n;
    }
    return n;
}

json_t *api_json_text(const char *s, size_t n) {
    json_t *j = json_stringn(s, n);
    if (j) return j;
    /* invalid UTF-8 (a token that splits a character): replace bad bytes */
    char *o = malloc(n * 3 + 1);
    if (!o) return json_string("");
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        size_t len = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
        json_t *t = len && i + len <= n ? json_stringn(s + i, len) : NULL;
        if (t) {
            json_decref(t);
            memcpy(o + k, s + i, len);
            k += len;
            i += len;
        } else {
            memcpy(o + k, "\xEF\xBF\xBD", 3);
            k += 3;
            i++;
        }
    }
    j = json_stringn(o, k);
    free(o);
    return j ? j : json_string("");
}

int api_piece(mu_http_app *a, int32_t id, char *buf, size_t cap) {
    int n = mu_tok_piece(a->tok, id, true, buf, cap);
    return n < 0 ? 0 : n;
}

bool api_is_special(mu_http_app *a, int32_t id) {
    return (mu_tok_attr(a->tok, id) & (MU_TOK_ATTR_CONTROL | MU_TOK_ATTR_UNKNOWN)) != 0;
}

int api_render(mu_http_app *a, const json_t *msgs, const json_t *tools, const char *reasoning, bool add_gen,
               char **out, mu_err *err) {
    char *m = json_dumps(msgs, JSON_COMPACT);
    char *t = tools ? json_dumps(tools, JSON_COMPACT) : NULL;
    int rc = !m || (tools && !t) ? mu_fail(err, MU_E_NOMEM, "server: out of memory")
                                 : mu_chat_apply(a->model, m, t, reasoning, add_gen, out, err);
    free(m);
    free(t);
    return rc;
}

json_t *api_token_str(mu_http_app *a, int32_t id) {
    char buf[API_PIECE_MAX];
    int n = api_piece(a, id, buf, sizeof buf);
    return api_json_text(buf, (size_t)n);
}

json_t *api_token_bytes(mu_http_app *a, int32_t id) {
    char buf[API_PIECE_MAX];
    int n = api_piece(a, id, buf, sizeof buf);
    json_t *arr = json_array();
    for (int i = 0; i < n; i++) json_array_append_new(arr, json_integer((unsigned char)buf[i]));
    return arr;
}

json_t *api_timings(const mu_gen_stats *st) {
    /* llama.cpp's: prompt_n counts the evaluated prompt tokens, cache_n the
     * ones whose KV state was kept */
    double pn = st->n_prompt - st->n_reused, gn = st->n_gen;
    json_t *t = json_pack("{s:i,s:i,s:f,s:f,s:f,s:i,s:f,s:f,s:f,s:f}", "cache_n", st->n_reused, "prompt_n",
                     st->n_prompt - st->n_reused, "prompt_ms", st->prompt_ms,
                     "prompt_per_token_ms", pn > 0 ? st->prompt_ms / pn : 0.0, "prompt_per_second",
                     st->prompt_ms > 0 ? pn * 1e3 / st->prompt_ms : 0.0, "predicted_n", st->n_gen, "predicted_ms",
                     st->gen_ms, "predicted_per_token_ms", gn > 1 ? st->gen_ms / (gn - 1) : 0.0,
                     "predicted_per_second", st->gen_ms > 0 && gn > 1 ? (gn - 1) * 1e3 / st->gen_ms : 0.0,
                     "queue_ms", st->queue_ms);
    if (t && st->constrain_ms > 0) json_object_set_new(t, "constrained_ms", json_real(st->constrain_ms));
    if (t && st->prompt_shared) json_object_set_new(t, "prompt_shared", json_true());
    if (t && st->n_draft > 0) { /* speculative decoding, llama.cpp's names; spec_steps is muser's
                                   (accepted drafts per step = draft_n_accepted / spec_steps) */
        json_object_set_new(t, "draft_n", json_integer(st->n_draft));
        json_object_set_new(t, "draft_n_accepted", json_integer(st->n_draft_accepted));
        json_object_set_new(t, "spec_steps", json_integer(st->n_spec_steps));
        json_object_set_new(t, "spec_accepted_per_step",
                            json_real(st->n_spec_steps ? (double)st->n_draft_accepted / st->n_spec_steps : 0.0));
        if (st->n_draft_ngram > 0) { /* a dflash job's drafts from n-gram lookups (muser's) */
            json_object_set_new(t, "draft_n_ngram", json_integer(st->n_draft_ngram));
            json_object_set_new(t, "draft_n_ngram_accepted", json_integer(st->n_draft_ngram_accepted));
        }
    }
    if (t && st->n_spec_busy > 0) json_object_set_new(t, "spec_busy_steps", json_integer(st->n_spec_busy));
    return t;
}

json_t *api_spec_timings(const mu_gen_stats *st) {
    if (st->n_draft <= 0) return NULL;
    return json_pack("{s:i,s:i,s:i,s:f}", "draft_n", st->n_draft, "draft_n_accepted", st->n_draft_accepted, "spec_steps",
                     st->n_spec_steps, "spec_accepted_per_step",
                     st->n_spec_steps ? (double)st->n_draft_accepted / st->n_spec_steps : 0.0);
}

int api_response_schema(mu_http_req *r, const json_t *body, const char *proto_key, mu_schema **out) {
    *out = NULL;
    const json_t *v = json_object_get(body, proto_key);
    const json_t *schema = NULL;
    bool object_only = false;
    char where[96];
    snprintf(where, sizeof where, "%s", proto_key);
    if (!v || json_is_null(v)) return 0;
    if (!strcmp(proto_key, "response_format")) { /* OpenAI */
        const char *type = mu_jc_str(v, "type", "text");
        if (!strcmp(type, "text")) return 0;
        if (!strcmp(type, "json_object") && json_object_get(v, "schema")) {
            schema = json_object_get(v, "schema"); /* llama.cpp's json_object with a schema */
            snprintf(where, sizeof where, "response_format.schema");
        } else if (!strcmp(type, "json_object")) {
            object_only = true;
        } else {
            const json_t *js = json_object_get(v, "json_schema");
            if (!json_is_object(js)) {
                mu_http_reply_error(r, 400, "field 'response_format.json_schema' is required for type 'json_schema'",
                                    "response_format.json_schema");
                return -1;
            }
            schema = json_object_get(js, "schema");
            snprintf(where, sizeof where, "response_format.json_schema.schema");
        }
    } else if (json_is_string(v)) { /* Ollama format: "" or "json" */
        if (!json_string_length(v)) return 0;
        object_only = true;
    } else { /* llama.cpp json_schema, Ollama format: a schema object */
        schema = v;
    }
    mu_err err = {0};
    char *text = schema ? json_dumps(schema, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
    int rc = schema && !text ? mu_fail(&err, MU_E_NOMEM, "out of memory")
                             : mu_schema_new(text, object_only, where, out, &err);
    free(text);
    if (rc) {
        char m[300];
        snprintf(m, sizeof m, "structured output: %s", err.msg);
        mu_http_reply_error(r, rc == MU_E_NOMEM ? 503 : 400, m, where);
        return -1;
    }
    return 0;
}

static bool name_is(const char *id, const char *name, bool ollama) {
    if (!strcmp(id, name)) return true;
    size_t n = strlen(name);
    return ollama && !strncmp(id, name, n) && !strcmp(id + n, ":latest");
}

bool api_model_name_ok(mu_http_app *a, const char *id, bool ollama) {
    if (a->any_model || name_is(id, a->model_id, ollama)) return true;
    if (a->gguf_name && name_is(id, a->gguf_name, ollama)) return true;
    for (int i = 0; i < a->n_aliases; i++)
        if (name_is(id, a->aliases[i], ollama)) return true;
    return false;
}

bool api_model_ok(mu_http_req *r, const json_t *body, const char *key) {
    mu_http_app *a = mu_http_req_app(r);
    const char *id = body ? mu_jc_str(body, key, NULL) : NULL;
    if (!id || !*id || api_model_name_ok(a, id, mu_http_req_proto(r) == MU_PROTO_OLLAMA)) return true;
    char m[400];
    snprintf(m, sizeof m, "model '%.150s' not found; this server serves '%.150s'", id, a->model_id);
    mu_http_reply_error(r, 404, m, "model");
    return false;
}

int api_tokenize_prompt(mu_http_app *a, const char *text, bool parse_special, int32_t **ids, int *n, mu_err *err) {
    int32_t *t = NULL;
    int k = 0;
    int rc = mu_tok_encode(a->tok, text, strlen(text), parse_special, &t, &k, err);
    if (rc) return rc;
    bool bos = a->info->add_bos && a->info->bos >= 0 && !(k > 0 && t[0] == a->info->bos);
    int32_t *o = malloc(((size_t)k + 1) * sizeof *o);
    if (!o) {
        free(t);
        return mu_fail(err, MU_E_NOMEM, "server: out of memory");
    }
    int m = 0;
    if (bos) o[m++] = a->info->bos;
    if (k) memcpy(o + m, t, (size_t)k * sizeof *o);
    free(t);
    *ids = o;
    *n = m + k;
    return 0;
}

/* The lists a request's sampling parameters point at. They must live
 * until the job is submitted, which happens on the handler's thread before
 * it returns (mu_sched_submit copies them into the job's sampler). */
#define API_MAX_BIAS 1024
#define API_MAX_BREAKERS 64
static _Thread_local mu_logit_bias tl_bias[API_MAX_BIAS];
static _Thread_local const char *tl_breakers[API_MAX_BREAKERS];

/* A logit_bias value: a number, or false (the token is banned). */
static bool bias_value(const json_t *v, float *out) {
    if (json_is_number(v)) {
        double d = json_number_value(v);
        if (!isfinite(d)) return false;
        *out = (float)d;
        return true;
    }
    if (json_is_false(v)) {
        *out = -INFINITY;
        return true;
    }
    return false;
}

/* One logit_bias key: a token id (ids outside the vocabulary are dropped),
 * or text whose every token gets the bias (llama.cpp's server). */
static void bias_add(mu_http_app *a, mu_sample_params *p, const char *text, long long id, bool is_id, float b) {
    if (is_id) {
        if (id >= 0 && id < a->info->n_vocab && p->n_logit_bias < API_MAX_BIAS)
            tl_bias[p->n_logit_bias++] = (mu_logit_bias){(int32_t)id, b};
        return;
    }
    int32_t *t = NULL;
    int k = 0;
    mu_err err = {0};
    if (!a->tok || mu_tok_encode(a->tok, text, strlen(text), false, &t, &k, &err)) return;
    for (int i = 0; i < k && p->n_logit_bias < API_MAX_BIAS; i++) tl_bias[p->n_logit_bias++] = (mu_logit_bias){t[i], b};
    free(t);
}

/* logit_bias as llama.cpp's server reads it: [[token, bias], ...] or
 * {"token": bias, ...}, token an id or text, bias a number or false;
 * entries of another shape are skipped, as there. */
static void parse_logit_bias(mu_http_app *a, const json_t *lb, mu_sample_params *p) {
    p->logit_bias = tl_bias;
    p->n_logit_bias = 0;
    size_t i;
    const char *key;
    json_t *el;
    float b;
    if (json_is_array(lb)) {
        json_array_foreach(lb, i, el) {
            if (!json_is_array(el) || json_array_size(el) != 2 || !bias_value(json_array_get(el, 1), &b)) continue;
            const json_t *t = json_array_get(el, 0);
            if (json_is_integer(t)) bias_add(a, p, NULL, json_integer_value(t), true, b);
            else if (json_is_string(t)) bias_add(a, p, json_string_value(t), 0, false, b);
        }
    } else if (json_is_object(lb)) {
        json_object_foreach((json_t *)lb, key, el) {
            if (!bias_value(el, &b)) continue;
            char *end;
            long long id = strtoll(key, &end, 10);
            bool is_id = *key && !*end;
            bias_add(a, p, key, id, is_id, b);
        }
    }
}

void api_ban_eog(mu_http_app *a, mu_sample_params *p) {
    if (p->logit_bias != tl_bias) {
        p->logit_bias = tl_bias;
        p->n_logit_bias = 0;
    }
    const int32_t eog[] = {a->info->eos, a->info->eot, a->info->eom};
    for (size_t i = 0; i < sizeof eog / sizeof eog[0]; i++)
        if (eog[i] >= 0 && eog[i] < a->info->n_vocab && p->n_logit_bias < API_MAX_BIAS)
            tl_bias[p->n_logit_bias++] = (mu_logit_bias){eog[i], -INFINITY};
}

int api_n_predict(const mu_http_app *a, int n) { return n < 0 && a->n_predict > 0 ? a->n_predict : n; }

mu_sample_params api_sample_params(mu_http_app *a, const json_t *o, const char *seed_key) {
    mu_sample_params p = mu_sample_defaults();
    if (a->has_temp) p.temp = a->temp; /* the server's --temp */
    p.temp = (float)mu_jc_num(o, "temperature", p.temp);
    p.top_k = (int)mu_jc_int(o, "top_k", p.top_k);
    p.top_p = (float)mu_jc_num(o, "top_p", p.top_p);
    p.min_p = (float)mu_jc_num(o, "min_p", p.min_p);
    const json_t *sv = seed_key ? json_object_get(o, seed_key) : NULL;
    long long seed = seed_key ? mu_jc_int(o, seed_key, -1) : -1;
    if ((!sv || json_is_null(sv)) && a->has_seed) seed = a->seed; /* the server's --seed; -1 stays random */
    if (seed < 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        p.seed = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20);
    } else {
        p.seed = (uint64_t)seed;
    }
    /* the rest of llama.cpp's chain, under its server's names (a protocol's
     * schema admits the ones it defines; absent ones keep the defaults) */
    p.min_keep = (int)mu_jc_int(o, "min_keep", p.min_keep);
    p.typical_p = (float)mu_jc_num(o, "typical_p", p.typical_p);
    p.top_n_sigma = (float)mu_jc_num(o, "top_n_sigma", p.top_n_sigma);
    p.xtc_probability = (float)mu_jc_num(o, "xtc_probability", p.xtc_probability);
    p.xtc_threshold = (float)mu_jc_num(o, "xtc_threshold", p.xtc_threshold);
    p.dynatemp_range = (float)mu_jc_num(o, "dynatemp_range", p.dynatemp_range);
    p.dynatemp_exponent = (float)mu_jc_num(o, "dynatemp_exponent", p.dynatemp_exponent);
    p.penalty_last_n = (int)mu_jc_int(o, "repeat_last_n", p.penalty_last_n);
    p.penalty_repeat = (float)mu_jc_num(o, "repeat_penalty", p.penalty_repeat);
    p.penalty_freq = (float)mu_jc_num(o, "frequency_penalty", p.penalty_freq);
    p.penalty_present = (float)mu_jc_num(o, "presence_penalty", p.penalty_present);
    p.dry_multiplier = (float)mu_jc_num(o, "dry_multiplier", p.dry_multiplier);
    double base = mu_jc_num(o, "dry_base", p.dry_base);
    if (base >= 1) p.dry_base = (float)base; /* llama.cpp: a base below 1 keeps the default */
    p.dry_allowed_length = (int)mu_jc_int(o, "dry_allowed_length", p.dry_allowed_length);
    p.dry_penalty_last_n = (int)mu_jc_int(o, "dry_penalty_last_n", p.dry_penalty_last_n);
    p.mirostat = (int)mu_jc_int(o, "mirostat", p.mirostat);
    p.mirostat_tau = (float)mu_jc_num(o, "mirostat_tau", p.mirostat_tau);
    p.mirostat_eta = (float)mu_jc_num(o, "mirostat_eta", p.mirostat_eta);
    const json_t *brk = json_object_get(o, "dry_sequence_breakers");
    if (json_is_array(brk)) {
        p.dry_breakers = tl_breakers;
        p.n_dry_breakers = 0;
        size_t i;
        json_t *x;
        json_array_foreach(brk, i, x) {
            if (json_is_string(x) && p.n_dry_breakers < API_MAX_BREAKERS) tl_breakers[p.n_dry_breakers++] = json_string_value(x);
        }
    }
    const json_t *lb = json_object_get(o, "logit_bias");
    if (lb && !json_is_null(lb)) parse_logit_bias(a, lb, &p);
    return p;
}

int api_prompt_list(mu_http_req *r, const json_t *prompt, const json_t **out, int max) {
    if (!json_is_array(prompt)) {
        out[0] = prompt;
        return 1;
    }
    size_t n = json_array_size(prompt), n_num = 0, i;
    json_t *x;
    json_array_foreach(prompt, i, x) n_num += json_is_number(x);
    if (n == 0 || n_num) { /* ids, or ids mixed with strings: one prompt */
        out[0] = prompt;
        return 1;
    }
    char m[160];
    if (n > (size_t)max) {
        snprintf(m, sizeof m, "field 'prompt': at most %d prompts per request (with n choices each: prompts * n <= %d)",
                 max, API_MAX_CHOICES);
        mu_http_reply_error(r, 400, m, "prompt");
        return 0;
    }
    json_array_foreach(prompt, i, x) out[i] = x;
    return (int)n;
}

void api_spec_params(const json_t *o, const char *k_type, const char *k_max, const char *k_min, mu_gen_req *q) {
    if (!o || !json_is_object(o)) return;
    const char *t = mu_jc_str(o, k_type, NULL);
    if (t) { /* the schema admitted only spec_types (api.c) */
        q->spec = !strcmp(t, "ngram") || !strcmp(t, "ngram-cache")   ? MU_SPEC_NGRAM
                  : !strcmp(t, "dflash") || !strcmp(t, "draft-dflash") ? MU_SPEC_DFLASH
                                                                      : MU_SPEC_NONE;
        q->spec_off = q->spec == MU_SPEC_NONE;
    }
    q->draft_max = (int)mu_jc_int(o, k_max, 0);
    q->draft_min = (int)mu_jc_int(o, k_min, 0);
}

/* llama.cpp's preserved_tokens and grammar_triggers (server-schema.cpp):
 * a preserved token is a string that tokenizes (special tokens parsed) to
 * one token; a WORD trigger that is one token must be preserved and
 * becomes a TOKEN trigger; a lazy grammar given an empty trigger list is
 * refused. *out (malloc'ed, NULL when none) borrows strings from body. */
static _Thread_local int32_t tl_keep[1024]; /* the schema admits 1024 entries (api.c) */

static bool api_triggers(mu_http_req *r, const json_t *body, mu_gen_req *q, mu_grammar_trigger **out, int *n_out) {
    mu_http_app *a = mu_http_req_app(r);
    const json_t *pre = json_object_get(body, "preserved_tokens");
    const json_t *tr = json_object_get(body, "grammar_triggers");
    int32_t *keep = tl_keep;
    int n_keep = 0;
    char m[320];
    size_t i;
    json_t *x;
    *out = NULL;
    *n_out = 0;
    if (json_is_array(pre)) {
        json_array_foreach(pre, i, x) {
            if (!json_is_string(x)) {
                mu_http_reply_error(r, 400, "field 'preserved_tokens': must be an array of strings",
                                    "preserved_tokens");
                return false;
            }
            int32_t *ids = NULL;
            int n = 0;
            mu_err e;
            if (a->tok && !mu_tok_encode(a->tok, json_string_value(x), json_string_length(x), true, &ids, &n, &e) &&
                n == 1 && n_keep < (int)(sizeof tl_keep / sizeof tl_keep[0]))
                keep[n_keep++] = ids[0];
            free(ids);
        }
    }
    /* their text appears in the output (llama.cpp renders preserved
     * tokens as special); tl_keep lives until the job is submitted, on
     * this thread (mu_gen_new copies it) */
    q->preserved = n_keep ? keep : NULL;
    q->n_preserved = n_keep;
    if (!tr || json_is_null(tr)) return true;
    size_t n = json_array_size(tr);
    if (mu_jc_bool(body, "grammar_lazy", false) && n == 0) {
        mu_http_reply_error(r, 400, "field 'grammar_triggers': no triggers set for a lazy grammar", "grammar_triggers");
        return false;
    }
    mu_grammar_trigger *t = calloc(n + 1, sizeof *t);
    if (!t) {
        mu_http_reply_error(r, 503, "out of memory", NULL);
        return false;
    }
    int n_vocab = a->tok ? mu_tok_n_vocab(a->tok) : 0;
    json_array_foreach(tr, i, x) {
        const json_t *ty = json_object_get(x, "type"), *v = json_object_get(x, "value");
        const json_t *tk = json_object_get(x, "token");
        json_int_t type = json_is_integer(ty) ? json_integer_value(ty) : -1;
        const char *bad = NULL;
        if (!json_is_object(x)) bad = "must be an object";
        else if (type < 0 || type > 3) bad = "'type' must be 0 (token), 1 (word), 2 (pattern) or 3 (full pattern)";
        else if (!json_is_string(v)) bad = "'value' must be a string";
        else if (type == 0 && !json_is_integer(tk)) bad = "'token' (an integer) is needed with type 0";
        else if (type == 0 && (json_integer_value(tk) < 0 || json_integer_value(tk) >= n_vocab))
            bad = "'token' is not a token id of this model";
        if (bad) {
            snprintf(m, sizeof m, "field 'grammar_triggers[%zu]': %s", i, bad);
            free(t);
            mu_http_reply_error(r, 400, m, "grammar_triggers");
            return false;
        }
        t[i] = (mu_grammar_trigger){.kind = (mu_trigger_kind)type,
                                    .value = json_string_value(v),
                                    .len = json_string_length(v),
                                    .token = type == 0 ? (int32_t)json_integer_value(tk) : -1};
        if (type != 1 || !a->tok) continue;
        int32_t *ids = NULL;
        int nt = 0;
        mu_err e;
        if (mu_tok_encode(a->tok, t[i].value, t[i].len, true, &ids, &nt, &e) == 0 && nt == 1) {
            bool kept = false;
            for (int k = 0; k < n_keep && !kept; k++) kept = keep[k] == ids[0];
            if (!kept) {
                snprintf(m, sizeof m, "field 'grammar_triggers[%zu]': a trigger word that is one token must be in "
                                      "'preserved_tokens'", i);
                free(ids);
                free(t);
                mu_http_reply_error(r, 400, m, "grammar_triggers");
                return false;
            }
            t[i].kind = MU_TRIGGER_TOKEN;
            t[i].token = ids[0];
        }
        free(ids);
    }
    *out = t;
    *n_out = (int)n;
    return true;
}

static int32_t one_token(mu_http_app *a, const char *s, size_t n) {
    int32_t *ids = NULL, id = -1;
    int k = 0;
    mu_err e;
    if (a->tok && !mu_tok_encode(a->tok, s, n, true, &ids, &k, &e) && k == 1) id = ids[0];
    free(ids);
    return id;
}

static int cmp_id(const void *x, const void *y) {
    int32_t a = *(const int32_t *)x, b = *(const int32_t *)y;
    return (a > b) - (a < b);
}

void api_lazy_settings(mu_http_app *a, const json_t *body, json_t *settings) {
    json_object_set_new(settings, "grammar_lazy", json_boolean(mu_jc_bool(body, "grammar_lazy", false)));
    json_t *tr = json_array(), *pre = json_array();
    size_t i;
    json_t *x;
    json_array_foreach(json_object_get(body, "grammar_triggers"), i, x) {
        json_int_t type = json_integer_value(json_object_get(x, "type"));
        const json_t *v = json_object_get(x, "value");
        int32_t id = type == 1 ? one_token(a, json_string_value(v), json_string_length(v)) : -1;
        json_int_t tok = id >= 0 ? (json_int_t)id : json_integer_value(json_object_get(x, "token"));
        if (type == 0 || id >= 0)
            json_array_append_new(tr, json_pack("{s:i,s:O,s:I}", "type", 0, "value", v, "token", tok));
        else json_array_append_new(tr, json_pack("{s:I,s:O}", "type", type, "value", v));
    }
    int32_t ids[1024]; /* the schema admits 1024 entries (api.c) */
    int n = 0;
    json_array_foreach(json_object_get(body, "preserved_tokens"), i, x) {
        int32_t id = n < 1024 ? one_token(a, json_string_value(x), json_string_length(x)) : -1;
        if (id >= 0) ids[n++] = id;
    }
    qsort(ids, (size_t)n, sizeof ids[0], cmp_id); /* llama.cpp's std::set: ascending, once each */
    for (int k = 0; k < n; k++)
        if (k == 0 || ids[k] != ids[k - 1]) json_array_append_new(pre, json_integer(ids[k]));
    json_object_set_new(settings, "grammar_triggers", tr);
    json_object_set_new(settings, "preserved_tokens", pre);
}

bool api_extensions(mu_http_req *r, const json_t *body, mu_gen_req *q) {
    /* llama.cpp's post_sampling_probs: n_probs / logprobs report the
     * sampler chain's final candidates */
    q->post_sampling = mu_jc_bool(body, "post_sampling_probs", false);
    /* llama.cpp's lazy grammars (a grammar that waits for a trigger: its
     * templates' tool-call machinery): the triggers are read first, as
     * llama.cpp reads them, and set on the grammar below. On the chat
     * routes llama.cpp's server replaces a client's grammar_lazy,
     * grammar_triggers and preserved_tokens with its template's (off and
     * empty without tools): there they have no effect, here too. */
    bool chat = json_object_get(body, "messages") != NULL;
    mu_grammar_trigger *trig = NULL;
    int n_trig = 0;
    bool lazy = !chat && mu_jc_bool(body, "grammar_lazy", false);
    if (!chat && !api_triggers(r, body, q, &trig, &n_trig)) return false;
    /* llama.cpp's GBNF grammar; it wins over json_schema / response_format
     * (llama.cpp reads json_schema only when there is no grammar), except
     * that a chat request naming both is refused, as llama.cpp does */
    const char *gbnf = mu_jc_str(body, "grammar", "");
    if (*gbnf) {
        const json_t *js = json_object_get(body, "json_schema");
        if (chat && js && !json_is_null(js)) {
            mu_http_reply_error(r, 400, "fields 'grammar' and 'json_schema': cannot use both", "grammar");
            return false;
        }
        const json_t *tools = json_object_get(body, "tools");
        const json_t *tc = json_object_get(body, "tool_choice");
        if (chat && json_array_size(tools) > 0 && !(json_is_string(tc) && !strcmp(json_string_value(tc), "none"))) {
            mu_http_reply_error(r, 400, "field 'grammar': cannot constrain with a grammar when tools are offered",
                                "grammar");
            return false;
        }
        mu_err err = {0};
        mu_http_app *a = mu_http_req_app(r);
        int rc = mu_grammar_new(gbnf, a->tok, &q->grammar, &err);
        if (!rc && lazy && (rc = mu_grammar_set_lazy(q->grammar, trig, n_trig, &err))) {
            mu_grammar_unref(q->grammar);
            q->grammar = NULL;
        }
        free(trig);
        if (rc) {
            mu_http_reply_error(r, rc == MU_E_NOMEM ? 503 : 400, err.msg, lazy ? "grammar_triggers" : "grammar");
            return false;
        }
        q->schema = NULL;
    } else {
        free(trig);
        const json_t *js = json_object_get(body, "json_schema");
        if (lazy && ((js && !json_is_null(js)) || q->schema)) { /* the schema path has no lazy form here */
            mu_http_reply_error(r, 400, "field 'grammar_lazy': applies to a 'grammar' only (not to a JSON schema)",
                                "grammar_lazy");
            return false;
        }
    }
    /* llama.cpp's prompt cache: keep the KV state of the longest common
     * prefix with the slot's previous request (off unless asked or the
     * server runs with --cache-prompt, so answers equal `muser run`'s;
     * llama.cpp's default is on) */
    q->keep_prefix = mu_jc_bool(body, "cache_prompt", ((mu_http_app *)mu_http_req_app(r))->cache_prompt);
    q->n_keep = (int)mu_jc_int(body, "n_keep", 0);
    q->n_discard = (int)mu_jc_int(body, "n_discard", 0);
    /* llama.cpp's return_progress: prompt-progress chunks, in streams only */
    q->progress = mu_jc_bool(body, "return_progress", false) && mu_jc_bool(body, "stream", false);
    /* llama.cpp's id_slot: the request runs in that slot (waiting for it) */
    int id_slot = (int)mu_jc_int(body, "id_slot", -1);
    q->pin_slot = id_slot >= 0;
    q->id_slot = id_slot;
    api_spec_params(body, "speculative.type", "speculative.n_max", "speculative.n_min", q);
    return true;
}

/* ---- the reader ------------------------------------------------------- */

void api_reply_exceed(mu_http_req *r, int n_prompt, int n_ctx) {
    char m[200];
    snprintf(m, sizeof m, "request (%d tokens) exceeds the available context size (%d tokens), try increasing it",
             n_prompt, n_ctx);
    if (mu_http_req_proto(r) == MU_PROTO_OLLAMA) {
        mu_http_reply_error(r, 400, m, NULL);
        return;
    }
    mu_http_reply_json(r, 400, json_pack("{s:{s:i,s:s,s:s,s:i,s:i}}", "error", "code", 400, "message", m, "type",
                                         "exceed_context_size_error", "n_prompt_tokens", n_prompt, "n_ctx", n_ctx));
}

bool api_job_start_n(mu_http_req *r, api_job *g, int n, mu_http_app *a, int32_t *prompt, int n_prompt,
                     const mu_gen_req *req, const json_t *stop) {
    mu_mprompt *media = (mu_mprompt *)req->media;
    if (media && n != 1) {
        free(prompt);
        mu_mprompt_free(media);
        mu_http_reply_error(r, 400, "field 'n': a request with images has one choice", "n");
        return false;
    }
    if (n_prompt >= a->n_ctx) {
        free(prompt);
        mu_mprompt_free(media);
        api_reply_exceed(r, n_prompt, a->n_ctx);
        return false;
    }
    mu_gen_req q[API_MAX_CHOICES];
    mu_job *jobs[API_MAX_CHOICES];
    const char *stops[MU_GEN_MAX_STOPS];
    int n_stops = 0;
    if (json_is_string(stop)) {
        if (json_string_length(stop)) stops[n_stops++] = json_string_value(stop);
    } else if (json_is_array(stop)) {
        size_t i;
        json_t *x;
        json_array_foreach(stop, i, x) {
            if (n_stops == MU_GEN_MAX_STOPS) break;
            if (json_is_string(x) && json_string_length(x)) stops[n_stops++] = json_string_value(x);
        }
    }
    if (n < 1 || n > API_MAX_CHOICES) {
        free(prompt);
        mu_mprompt_free(media);
        mu_http_reply_error(r, 400, "field 'n': out of range", "n");
        return false;
    }
    for (int k = 0; k < n; k++) {
        memset(&g[k], 0, sizeof g[k]);
        g[k].app = a;
        g[k].st.n_prompt = n_prompt; /* until the job's own stats arrive with its end */
        g[k].t_start = mono_ms();
        q[k] = *req;
        q[k].prompt = prompt;
        q[k].n_prompt = n_prompt;
        q[k].stops = stops;
        q[k].n_stops = n_stops;
        q[k].n_predict = api_n_predict(a, req->n_predict);
        q[k].sp.seed = req->sp.seed + (uint64_t)k; /* choice k: seed + k */
        q[k].media_take = media != NULL; /* the job frees the image prompt (n == 1 here) */
    }
    mu_err err = {0};
    int rc = 0;
    if (a->prefill && n == 1 && !q[0].embd) rc = a->prefill(a->prefill_user, &q[0], &err);
    if (!rc) {
        rc = mu_sched_submit(a->sched, q, n, jobs, &err);
        if (rc && q[0].install_free) q[0].install_free(q[0].install_user); /* not the job's */
    }
    free(prompt);
    if (rc) {
        mu_mprompt_free(media);
        mu_http_reply_status(r, rc, &err);
        return false;
    }
    for (int k = 0; k < n; k++) {
        g[k].job = jobs[k];
        mu_job_set_notify(jobs[k], mu_http_req_wake, r);
    }
    return true;
}

bool api_job_start(mu_http_req *r, api_job *g, mu_http_app *a, int32_t *prompt, int n_prompt, const mu_gen_req *req,
                   const json_t *stop) {
    return api_job_start_n(r, g, 1, a, prompt, n_prompt, req, stop);
}

json_t *api_progress_json(const api_progress *p) {
    return json_pack("{s:i,s:i,s:i,s:I}", "total", p->total, "cache", p->cache, "processed", p->processed, "time_ms",
                     (json_int_t)p->ms);
}

json_t *api_progress_timings(const api_progress *p) {
    mu_gen_stats st = {0};
    st.n_prompt = p->processed; /* prompt_n: evaluated so far, without the kept ones */
    st.n_reused = p->cache;
    st.prompt_ms = p->ms;
    return api_timings(&st);
}

json_t *api_job_timings(const api_job *g) {
    if (g->finish || !g->t_first) return api_timings(&g->st);
    /* running: measured here (the prompt time includes the queue wait) */
    mu_gen_stats st = g->st;
    st.n_gen = g->n_ids;
    st.prompt_ms = g->t_first - g->t_start;
    st.gen_ms = mono_ms() - g->t_first;
    return api_timings(&st);
}

static bool add_id(api_job *g, const mu_gen_token *t) {
    if (!g->t_first) g->t_first = mono_ms();
    if (g->n_ids == g->cap_ids) {
        int cap = g->cap_ids ? g->cap_ids * 2 : 64;
        int32_t *ids = realloc(g->ids, (size_t)cap * sizeof *ids);
        if (ids) g->ids = ids;
        size_t *ce = realloc(g->cend, (size_t)cap * sizeof *ce);
        if (ce) g->cend = ce;
        api_tok *tk = g->want_toks ? realloc(g->toks, (size_t)cap * sizeof *tk) : NULL;
        if (tk) g->toks = tk;
        if (!ids || !ce || (g->want_toks && !tk)) return false;
        g->cap_ids = cap;
    }
    if (g->want_toks) {
        api_tok *o = &g->toks[g->n_ids];
        o->id = t->id;
        o->logprob = t->logprob;
        o->prob = t->prob;
        o->n_top = t->n_top < API_MAX_TOP ? t->n_top : API_MAX_TOP;
        for (int k = 0; k < o->n_top; k++) {
            o->top_ids[k] = t->top_ids[k];
            o->top_logprobs[k] = t->top_logprobs[k];
            o->top_probs[k] = t->top_probs[k];
        }
    }
    g->cend[g->n_ids] = g->content.n;
    g->ids[g->n_ids++] = t->id;
    return true;
}

/* One event into the collected state; false when out of memory. */
static bool collect(api_job *g, const mu_gen_event *ev) {
    switch (ev->kind) {
    case MU_EV_TOKEN: return add_id(g, &ev->tok);
    case MU_EV_TEXT:
        mu_http_buf_add(ev->channel == MU_CH_REASONING ? &g->reasoning : &g->content, ev->text, ev->len);
        if (g->n_ids && ev->channel != MU_CH_REASONING) g->cend[g->n_ids - 1] = g->content.n;
        return true;
    case MU_EV_TOOL_CALL: {
        if (!g->tool_calls) g->tool_calls = json_array();
        json_t *args = json_loads(ev->text, 0, NULL);
        json_t *c = json_pack("{s:s,s:o}", "name", ev->name, "arguments", args ? args : json_object());
        if (c) json_array_append_new(g->tool_calls, c);
        return c != NULL;
    }
    case MU_EV_PROGRESS:
        if (g->n_prog == g->cap_prog) {
            int cap = g->cap_prog ? g->cap_prog * 2 : 16;
            api_progress *p = realloc(g->prog, (size_t)cap * sizeof *p);
            if (!p) return false;
            g->prog = p;
            g->cap_prog = cap;
        }
        g->prog[g->n_prog++] = (api_progress){ev->stats.n_prompt, ev->stats.n_reused, ev->n_done + ev->stats.n_reused,
                                              ev->stats.prompt_ms};
        return true;
    case MU_EV_CONTENT_TOKEN:
        if (ev->tok_index < 0 || ev->tok_index >= g->n_ids) return true;
        if (g->n_ctoks == g->cap_ctoks) {
            int cap = g->cap_ctoks ? g->cap_ctoks * 2 : 64;
            int *c = realloc(g->ctoks, (size_t)cap * sizeof *c);
            if (!c) return false;
            g->ctoks = c;
            g->cap_ctoks = cap;
        }
        g->ctoks[g->n_ctoks++] = ev->tok_index;
        return true;
    case MU_EV_FINISH:
        g->finish = ev->finish == MU_FINISH_CTX ? MU_FINISH_LENGTH : ev->finish;
        g->ctx_full = ev->finish == MU_FINISH_CTX || ev->stats.n_shift > 0; /* llama.cpp's "truncated" */
        g->st = ev->stats;
        g->st.n_gen = g->n_ids;
        if (ev->stop_word) snprintf(g->stop_word, sizeof g->stop_word, "%s", ev->stop_word);
        if (g->finish == MU_FINISH_ERROR && !g->err[0])
            snprintf(g->err, sizeof g->err, "%s", ev->err && ev->err[0] ? ev->err : "engine: generation failed");
        if (g->finish == MU_FINISH_CANCEL && ev->err && ev->err[0]) snprintf(g->err, sizeof g->err, "%s", ev->err);
        return true;
    }
    return true;
}

void api_job_reply_failed(mu_http_req *r, const api_job *g) {
    if (g->finish == MU_FINISH_ERROR) mu_http_reply_error(r, 500, g->err, NULL);
    else mu_http_reply_error(r, 499, "client closed the request", NULL);
}

bool api_job_poll(api_job *g, int fd) {
    if (g->finish) return false;
    mu_gen_event ev;
    while (!g->finish && mu_job_next(g->job, &ev, 0) == 1) {
        if (!collect(g, &ev)) {
            mu_job_cancel(g->job);
            g->finish = MU_FINISH_ERROR;
            snprintf(g->err, sizeof g->err, "server: out of memory");
            return false;
        }
    }
    if (!g->finish && !mu_http_fd_alive(fd)) {
        mu_job_cancel(g->job);
        g->finish = MU_FINISH_CANCEL;
    }
    return !g->finish;
}

/* Bytes of buf after *sent not yet taken: the generation side releases
 * whole UTF-8 characters and nothing that may become a stop string. */
static const char *take(mu_http_buf *b, size_t *sent, size_t *n) {
    *n = b->n - *sent;
    const char *p = b->p ? b->p + *sent : "";
    *sent = b->n;
    return p;
}

const char *api_job_take_content(api_job *g, size_t *n) { return take(&g->content, &g->content_sent, n); }

const char *api_job_take_content_upto(api_job *g, int i, size_t *n) {
    size_t end = g->cend[i] < g->content.n ? g->cend[i] : g->content.n;
    if (end < g->content_sent) end = g->content_sent;
    *n = end - g->content_sent;
    const char *p = g->content.p ? g->content.p + g->content_sent : "";
    g->content_sent = end;
    return p;
}

const char *api_job_take_reasoning(api_job *g, size_t *n) { return take(&g->reasoning, &g->reasoning_sent, n); }

void api_job_free(api_job *g) {
    mu_job_free(g->job);
    g->job = NULL;
    json_decref(g->tool_calls);
    g->tool_calls = NULL;
    mu_http_buf_free(&g->content);
    mu_http_buf_free(&g->reasoning);
    free(g->ids);
    free(g->cend);
    g->cend = NULL;
    free(g->toks);
    free(g->ctoks);
    g->ctoks = NULL;
    free(g->prog);
    g->prog = NULL;
    g->ids = NULL;
    g->toks = NULL;
}
