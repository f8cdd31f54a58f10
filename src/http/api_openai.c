/* api_openai.c: the OpenAI protocol: /v1/chat/completions, /v1/completions,
 * /v1/models.
 * Owns: request -> prompt (message normalization, template, tokenization),
 * the response and SSE chunk shapes, usage and logprobs objects.
 * Does not own: validation tables (api.c), generation (src/gen) or reading
 * a job's events (api_job.c).
 * Design: a streaming response is a state machine pulled by the transport:
 * each pull takes the events that are ready and writes the SSE chunks they
 * produce (never waiting); the non-streaming variant polls the same api_job
 * each time the request is woken and replies once every choice ended. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"

/* ---- tool calls --------------------------------------------------------- */

/* [{name, arguments (object)}] from the chat parser -> OpenAI tool_calls. */
static json_t *openai_tool_calls(const json_t *calls) {
    json_t *out = json_array();
    size_t i;
    json_t *c;
    json_array_foreach(calls, i, c) {
        char id[48];
        api_new_id(id, sizeof id, "call_");
        char *args = json_dumps(json_object_get(c, "arguments"), JSON_COMPACT);
        json_array_append_new(out, json_pack("{s:i,s:s,s:s,s:{s:O,s:s}}", "index", (int)i, "id", id, "type",
                                             "function", "function", "name", json_object_get(c, "name"),
                                             "arguments", args ? args : "{}"));
        free(args);
    }
    return out;
}

/* The deprecated functions API's answer: the first call as {name,
 * arguments (JSON text)} (that API has one call per answer). */
static json_t *legacy_call(const json_t *calls) {
    const json_t *c = json_array_get(calls, 0);
    char *args = json_dumps(json_object_get(c, "arguments"), JSON_COMPACT);
    json_t *o = json_pack("{s:O,s:s}", "name", json_object_get(c, "name"), "arguments", args ? args : "{}");
    free(args);
    return o;
}

/* ---- prompt ------------------------------------------------------------- */

/* OpenAI messages -> the plain shape the template expects. */
json_t *api_normalize_messages(const json_t *msgs) {
    json_t *out = json_array();
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m) {
        json_t *n = json_deep_copy(m);
        json_t *c = json_object_get(m, "content");
        if (json_is_array(c)) {
            size_t len = 0, k;
            json_t *part;
            json_array_foreach(c, k, part) len += json_string_length(json_object_get(part, "text"));
            char *buf = malloc(len + 1);
            size_t off = 0;
            if (buf) {
                json_array_foreach(c, k, part) {
                    json_t *t = json_object_get(part, "text");
                    memcpy(buf + off, json_string_value(t), json_string_length(t));
                    off += json_string_length(t);
                }
                json_object_set_new(n, "content", json_stringn(buf, off));
                free(buf);
            }
        } else if (!c || json_is_null(c)) {
            json_object_set_new(n, "content", json_string(""));
        }
        const char *role = json_string_value(json_object_get(m, "role"));
        if (!strcmp(role, "developer")) json_object_set_new(n, "role", json_string("system"));
        /* the deprecated functions API: a function's result is a tool
         * message, an assistant's function_call its one tool call */
        if (!strcmp(role, "function")) json_object_set_new(n, "role", json_string("tool"));
        json_t *fc = json_object_get(n, "function_call");
        if (json_is_object(fc) && !json_array_size(json_object_get(n, "tool_calls")))
            json_object_set_new(n, "tool_calls", json_pack("[{s:s,s:s,s:O}]", "id", "", "type", "function", "function", fc));
        json_object_del(n, "function_call");
        json_t *tc = json_object_get(n, "tool_calls");
        if (json_is_array(tc)) {
            /* templates want arguments as objects */
            size_t k;
            json_t *call;
            json_array_foreach(tc, k, call) {
                json_t *fn = json_object_get(call, "function");
                json_t *args = json_loads(json_string_value(json_object_get(fn, "arguments")), 0, NULL);
                if (args) json_object_set_new(fn, "arguments", args);
            }
        }
        json_array_append_new(out, n);
    }
    return out;
}

/* Renders and tokenizes a chat request; replies on failure. */
bool api_chat_prompt(mu_http_req *r, mu_http_app *a, const json_t *msgs, const json_t *tools, const char *effort,
                     int32_t **ids, int *n) {
    return api_chat_prompt_ex(r, a, msgs, tools, effort, API_PROMPT_GEN, ids, n, NULL);
}

bool api_chat_prompt_ex(mu_http_req *r, mu_http_app *a, const json_t *msgs, const json_t *tools, const char *effort,
                        int mode, int32_t **ids, int *n, char **text_out) {
    mu_err err = {0};
    char *text = NULL;
    int rc = api_render(a, msgs, tools, effort, mode == API_PROMPT_GEN, &text, &err);
    if (!rc && mode == API_PROMPT_PREFILL) {
        /* continue the last (assistant) message: the prompt ends with its
         * text, without what the template writes after it (end of turn) */
        const json_t *last = json_array_get(msgs, json_array_size(msgs) - 1);
        const char *c = mu_jc_str(last, "content", "");
        size_t cl = strlen(c);
        char *at = NULL;
        for (char *p = cl ? strstr(text, c) : NULL; p; p = strstr(p + 1, c)) at = p;
        if (!at) {
            free(text);
            mu_http_reply_error(r, 400,
                                "field 'messages': the last assistant message cannot be continued (its text is "
                                "empty or the chat template changes it)",
                                "messages");
            return false;
        }
        at[cl] = 0;
    }
    if (!rc) rc = api_tokenize_prompt(a, text, true, ids, n, &err);
    if (!rc && text_out) {
        *text_out = text;
        text = NULL;
    }
    free(text);
    if (rc) {
        mu_http_reply_status(r, rc, &err);
        return false;
    }
    return true;
}

/* ---- logprobs ------------------------------------------------------------ */

static json_t *logprob_entry(mu_http_app *a, const api_tok *t) {
    json_t *top = json_array();
    for (int k = 0; k < t->n_top; k++)
        json_array_append_new(top, json_pack("{s:o,s:f,s:o}", "token", api_token_str(a, t->top_ids[k]), "logprob",
                                             (double)t->top_logprobs[k], "bytes", api_token_bytes(a, t->top_ids[k])));
    return json_pack("{s:o,s:f,s:o,s:o}", "token", api_token_str(a, t->id), "logprob", (double)t->logprob, "bytes",
                     api_token_bytes(a, t->id), "top_logprobs", top);
}

/* Chat logprobs over answer tokens [from, to) (g->ctoks): the tokens whose
 * texts join to message.content, never channel headers, reasoning or tool
 * calls. */
json_t *api_answer_logprobs(api_job *g, int from, int to) {
    json_t *arr = json_array();
    for (int i = from; i < to; i++) json_array_append_new(arr, logprob_entry(g->app, &g->toks[g->ctoks[i]]));
    return arr;
}

static json_t *logprobs_range(api_job *g, int from, int to) {
    return json_pack("{s:o}", "content", api_answer_logprobs(g, from, to));
}

static const char *finish_name(int f, bool tools) {
    if (tools) return "tool_calls";
    return f == MU_FINISH_LENGTH ? "length" : "stop";
}

/* usage over all choices: the prompt once, every choice's tokens */
static json_t *usage(const api_job *g, int n, int per) {
    int gen = 0, prompt = 0, cached = 0;
    for (int k = 0; k < n; k++) {
        gen += g[k].n_ids;
        if (k % per == 0) { /* each prompt once */
            prompt += g[k].st.n_prompt;
            cached += g[k].st.n_reused;
        }
    }
    return json_pack("{s:i,s:i,s:i,s:{s:i}}", "prompt_tokens", prompt, "completion_tokens", gen, "total_tokens",
                     prompt + gen, "prompt_tokens_details", "cached_tokens", cached);
}

/* ---- chat ----------------------------------------------------------------- */

typedef struct {
    mu_http_app *a;
    char id[64];
    int64_t created;
    bool chat, include_usage, logprobs, tools;
    bool legacy_fn;     /* the deprecated functions API: the call as function_call */
    int phase;          /* 0 first chunk, 1 running, 2 done */
    char *echo[API_MAX_CHOICES]; /* completions: prompt text to echo first, per prompt */
    int n;              /* choices in all */
    int per;            /* choices per prompt (completions with several prompts) */
    int lp_sent[API_MAX_CHOICES];
    bool done[API_MAX_CHOICES];
    bool timings_per_token;      /* llama.cpp's: timings in every chunk */
    char *verbose_prompt;        /* llama.cpp's verbose: the prompt text for __verbose, else NULL */
    json_t *verbose_settings;
    api_job g[API_MAX_CHOICES];
} oa_stream;

static void sse(mu_http_buf *out, json_t *j) {
    mu_http_buf_str(out, "data: ");
    mu_http_buf_json(out, j);
    mu_http_buf_str(out, "\n\n");
    json_decref(j);
}

static json_t *chunk(oa_stream *s, int index, json_t *delta, json_t *finish, json_t *logprobs) {
    json_t *choice;
    if (s->chat)
        choice = json_pack("{s:i,s:o,s:o,s:o}", "index", index, "delta", delta, "logprobs",
                           logprobs ? logprobs : json_null(), "finish_reason", finish ? finish : json_null());
    else
        choice = json_pack("{s:i,s:o,s:o,s:o}", "index", index, "text", delta, "logprobs",
                           logprobs ? logprobs : json_null(), "finish_reason", finish ? finish : json_null());
    json_t *c = json_pack("{s:s,s:s,s:I,s:s,s:s,s:[o]}", "id", s->id, "object",
                          s->chat ? "chat.completion.chunk" : "text_completion", "created", (json_int_t)s->created,
                          "model", s->a->model_id, "system_fingerprint", "muser", "choices", choice);
    if (c && s->timings_per_token && !finish && s->phase) /* llama.cpp's timings_per_token: the timings so far */
        json_object_set_new(c, "timings", api_job_timings(&s->g[index]));
    return c;
}

static json_t *completion_logprobs(api_job *g, int from, int to);

/* New chunks of choice k; returns false when it ended with an error. */
static bool oa_choice(oa_stream *s, int k, mu_http_buf *out, bool running) {
    api_job *g = &s->g[k];
    for (; g->prog_sent < g->n_prog; g->prog_sent++) { /* llama.cpp's return_progress */
        const api_progress *p = &g->prog[g->prog_sent];
        json_t *c = chunk(s, k, s->chat ? json_object() : json_string(""), NULL, NULL);
        json_object_set_new(c, "prompt_progress", api_progress_json(p));
        json_object_set_new(c, "timings", api_progress_timings(p));
        sse(out, c);
    }
    size_t nr = 0, nc = 0;
    const char *rs = s->chat ? api_job_take_reasoning(g, &nr) : NULL;
    const char *cs = api_job_take_content(g, &nc);
    json_t *lp = NULL;
    int n_lp = s->chat ? g->n_ctoks : g->n_ids;
    if (s->logprobs && n_lp > s->lp_sent[k]) {
        lp = s->chat ? logprobs_range(g, s->lp_sent[k], n_lp) : completion_logprobs(g, s->lp_sent[k], n_lp);
        s->lp_sent[k] = n_lp;
    }
    if (nr) sse(out, chunk(s, k, json_pack("{s:o}", "reasoning_content", api_json_text(rs, nr)), NULL, NULL));
    if (nc || lp) {
        json_t *d = s->chat ? json_pack("{s:o}", "content", api_json_text(cs, nc)) : api_json_text(cs, nc);
        sse(out, chunk(s, k, d, NULL, lp));
    }
    if (running) return true;
    s->done[k] = true;
    if (g->finish == MU_FINISH_ERROR) return false;
    bool has_tools = false;
    if (s->chat && json_array_size(g->tool_calls)) {
        has_tools = true;
        json_t *d = s->legacy_fn ? json_pack("{s:o}", "function_call", legacy_call(g->tool_calls))
                                 : json_pack("{s:o}", "tool_calls", openai_tool_calls(g->tool_calls));
        sse(out, chunk(s, k, d, NULL, NULL));
    }
    json_t *fin = chunk(s, k, s->chat ? json_object() : json_string(""),
                        json_string(has_tools && s->legacy_fn ? "function_call" : finish_name(g->finish, has_tools)),
                        NULL);
    json_object_set_new(fin, "timings", api_timings(&g->st));
    sse(out, fin);
    return true;
}

static int oa_produce(void *state, mu_http_buf *out, int fd) {
    oa_stream *s = state;
    if (s->phase == 2) return 0;
    if (s->phase == 0) {
        /* the opening chunks (role; echoed prompt): no timings yet */
        if (s->chat) {
            for (int k = 0; k < s->n; k++)
                sse(out, chunk(s, k, json_pack("{s:s,s:n}", "role", "assistant", "content"), NULL, NULL));
            s->phase = 1;
            return 1;
        }
        if (s->echo[0]) {
            for (int k = 0; k < s->n; k++) sse(out, chunk(s, k, json_string(s->echo[k / s->per]), NULL, NULL));
            s->phase = 1;
            return 1;
        }
        s->phase = 1;
    }
    /* every running choice, taking what is ready; nothing ready: return
     * with out empty (the transport waits for the next wake) */
    bool all_done = true, failed = false;
    for (int k = 0; k < s->n; k++) {
        if (s->done[k]) continue;
        bool running = api_job_poll(&s->g[k], fd);
        if (s->g[k].finish == MU_FINISH_CANCEL) return -1;
        if (!oa_choice(s, k, out, running)) failed = true;
        if (!s->done[k]) all_done = false;
    }
    if (failed) {
        for (int k = 0; k < s->n; k++)
            if (s->g[k].finish == MU_FINISH_ERROR) {
                sse(out, json_pack("{s:{s:s,s:s}}", "error", "message", s->g[k].err, "type", "server_error"));
                break;
            }
        mu_http_buf_str(out, "data: [DONE]\n\n");
        s->phase = 2;
        return 1;
    }
    if (all_done) {
        if (s->include_usage) {
            json_t *u = json_pack("{s:s,s:s,s:I,s:s,s:[],s:o}", "id", s->id, "object",
                                  s->chat ? "chat.completion.chunk" : "text_completion", "created",
                                  (json_int_t)s->created, "model", s->a->model_id, "choices", "usage",
                                  usage(s->g, s->n, s->per));
            if (u) json_object_set_new(u, "timings", api_timings(&s->g[0].st)); /* as llama.cpp's */
            sse(out, u);
        }
        mu_http_buf_str(out, "data: [DONE]\n\n");
        s->phase = 2;
    }
    return 1;
}

static void oa_release(void *state) {
    oa_stream *s = state;
    free(s->verbose_prompt);
    json_decref(s->verbose_settings);
    for (int k = 0; k < s->n; k++) api_job_free(&s->g[k]);
    for (int k = 0; k < API_MAX_CHOICES; k++) free(s->echo[k]);
    free(s);
}

static bool check(mu_http_req *r, const json_t *body) {
    mu_err err = {0};
    int rc = mu_jc_check(body, api_schema(mu_http_req_path(r)), &err);
    if (rc) {
        mu_http_reply_status(r, rc, &err);
        return false;
    }
    return api_model_ok(r, body, "model");
}

/* Non-streaming: takes what is ready of every choice; false while one
 * still runs; true once every choice ended (or one failed: replied). */
static bool poll_all(mu_http_req *r, oa_stream *s, bool *failed) {
    bool running = false;
    *failed = false;
    for (int k = 0; k < s->n; k++) {
        api_job *g = &s->g[k];
        if (api_job_poll(g, mu_http_req_fd(r))) running = true;
        else if (g->finish == MU_FINISH_CANCEL || g->finish == MU_FINISH_ERROR) {
            api_job_reply_failed(r, g);
            *failed = true;
            return true;
        }
    }
    return !running;
}

/* llama.cpp's verbose: the first choice as its /completion object, with
 * the prompt as rendered (content as the model wrote it for the answer) */
static void add_verbose(oa_stream *s, json_t *resp) {
    if (!s->verbose_settings) return;
    api_job *g = &s->g[0];
    json_t *v = api_llama_result(s->a, g, 0, g->content.p ? g->content.p : "", g->content.n, s->verbose_prompt,
                                 s->verbose_settings);
    if (v) json_object_set_new(resp, "__verbose", v);
}

static bool oa_chat_poll(void *state, mu_http_req *r) {
    oa_stream *s = state;
    bool failed;
    if (!poll_all(r, s, &failed)) return false;
    if (failed) return true;
    mu_http_app *a = s->a;
    json_t *choices = json_array();
    for (int k = 0; k < s->n; k++) {
        api_job *g = &s->g[k];
        size_t nr, nc;
        const char *rs = api_job_take_reasoning(g, &nr);
        const char *cs = api_job_take_content(g, &nc);
        json_t *msg = json_pack("{s:s}", "role", "assistant");
        json_t *calls = g->tool_calls;
        bool has_calls = json_array_size(calls) > 0;
        json_object_set_new(msg, "content", has_calls && nc == 0 ? json_null() : api_json_text(cs, nc));
        if (nr) json_object_set_new(msg, "reasoning_content", api_json_text(rs, nr));
        if (has_calls)
            json_object_set_new(msg, s->legacy_fn ? "function_call" : "tool_calls",
                                s->legacy_fn ? legacy_call(calls) : openai_tool_calls(calls));
        json_array_append_new(choices, json_pack("{s:i,s:o,s:o,s:s}", "index", k, "message", msg, "logprobs",
                                                 s->logprobs ? logprobs_range(g, 0, g->n_ctoks) : json_null(),
                                                 "finish_reason",
                                                 has_calls && s->legacy_fn ? "function_call"
                                                                           : finish_name(g->finish, has_calls)));
    }
    json_t *resp = json_pack("{s:s,s:s,s:I,s:s,s:s,s:o,s:o,s:o}", "id", s->id, "object", "chat.completion",
                             "created", (json_int_t)s->created, "model", a->model_id, "system_fingerprint", "muser",
                             "choices", choices, "usage", usage(s->g, s->n, s->per), "timings",
                             api_timings(&s->g[0].st));
    add_verbose(s, resp);
    mu_http_reply_json(r, 200, resp);
    return true;
}

/* How the messages become the prompt, by llama.cpp's rules: a last
 * assistant message is continued (prefill), as vLLM's
 * continue_final_message asks; add_generation_prompt false renders no
 * generation prompt; two assistant messages at the end, or both flags
 * true, are refused. -1 after replying 400. */
int api_chat_mode(mu_http_req *r, const json_t *body) {
    const json_t *raw = json_object_get(body, "messages");
    size_t n_msgs = json_array_size(raw);
    bool last_assistant = !strcmp(mu_jc_str(json_array_get(raw, n_msgs - 1), "role", ""), "assistant");
    bool cont = mu_jc_bool(body, "continue_final_message", false), add_gen = mu_jc_bool(body, "add_generation_prompt", true);
    const char *why = NULL;
    if (cont && json_is_true(json_object_get(body, "add_generation_prompt")))
        why = "fields 'add_generation_prompt' and 'continue_final_message' cannot both be true";
    else if (cont && !last_assistant)
        why = "field 'continue_final_message': the last message must be an assistant message";
    else if (last_assistant && n_msgs >= 2 && !strcmp(mu_jc_str(json_array_get(raw, n_msgs - 2), "role", ""), "assistant"))
        why = "field 'messages': at most one assistant message may end the conversation (it is continued)";
    if (why) {
        mu_http_reply_error(r, 400, why, "messages");
        return -1;
    }
    return last_assistant && (cont || add_gen) ? API_PROMPT_PREFILL : add_gen ? API_PROMPT_GEN : API_PROMPT_NOGEN;
}

/* POST /chat/completions/input_tokens (llama.cpp): the prompt's token count. */
void api_openai_chat_tokens(mu_http_req *r, const json_t *body) {
    mu_http_app *a = mu_http_req_app(r);
    if (!check(r, body)) return;
    int mode = api_chat_mode(r, body);
    if (mode < 0) return;
    json_t *tc = json_object_get(body, "tool_choice");
    json_t *tools = json_object_get(body, "tools");
    bool use_tools = json_array_size(tools) > 0 && !(json_is_string(tc) && !strcmp(json_string_value(tc), "none"));
    json_t *flat = NULL;
    api_images im = {0};
    if (!api_chat_images(r, a, json_object_get(body, "messages"), &flat, &im)) return;
    json_t *msgs = api_normalize_messages(flat ? flat : json_object_get(body, "messages"));
    json_decref(flat);
    int32_t *ids = NULL;
    int n = 0;
    char *text = NULL;
    if (!msgs) {
        api_images_free(&im);
        mu_http_reply_error(r, 503, "server: out of memory", NULL);
        return;
    }
    bool ok = api_chat_prompt_ex(r, a, msgs, use_tools ? tools : NULL, mu_jc_str(body, "reasoning_effort", NULL), mode,
                                 &ids, &n, im.n ? &text : NULL);
    json_decref(msgs);
    free(ids);
    if (ok && im.n) { /* the images' rows count: the prompt as the model would take it */
        const mu_mprompt *mp = NULL;
        ok = api_media_prompt(r, a, text, &im, &ids, &n, &mp);
        if (ok) free(ids);
        mu_mprompt_free((mu_mprompt *)mp);
    }
    free(text);
    api_images_free(&im);
    if (ok) mu_http_reply_json(r, 200, json_pack("{s:i}", "input_tokens", n));
}

static void chat(mu_http_req *r, const json_t *body, bool legacy_fn);

/* The deprecated functions API: functions become tools and function_call
 * tool_choice (a shallow copy of the body), and the answer carries the
 * call as message.function_call. */
void api_openai_chat(mu_http_req *r, const json_t *body) {
    const json_t *fns = json_object_get(body, "functions");
    const json_t *fc = json_object_get(body, "function_call");
    bool legacy = (fns && !json_is_null(fns)) || (fc && !json_is_null(fc));
    if (!legacy) {
        chat(r, body, false);
        return;
    }
    const json_t *tools = json_object_get(body, "tools"), *tc = json_object_get(body, "tool_choice");
    if ((tools && !json_is_null(tools)) || (tc && !json_is_null(tc))) {
        mu_http_reply_error(r, 400, "fields 'functions' and 'tools': send one of them ('functions' is deprecated)",
                            "functions");
        return;
    }
    json_t *nb = json_copy((json_t *)body);
    json_t *nt = json_array();
    size_t i;
    json_t *f;
    json_array_foreach(fns, i, f) json_array_append_new(nt, json_pack("{s:s,s:O}", "type", "function", "function", f));
    json_object_del(nb, "functions");
    json_object_del(nb, "function_call");
    if (json_array_size(nt)) json_object_set_new(nb, "tools", nt);
    else json_decref(nt);
    if (json_is_string(fc)) json_object_set(nb, "tool_choice", (json_t *)fc);
    else if (json_is_object(fc))
        json_object_set_new(nb, "tool_choice", json_pack("{s:s,s:O}", "type", "function", "function", fc));
    chat(r, nb, true);
    json_decref(nb);
}

static void chat(mu_http_req *r, const json_t *body, bool legacy_fn) {
    mu_http_app *a = mu_http_req_app(r);
    if (!check(r, body)) return;
    json_t *tc = json_object_get(body, "tool_choice");
    json_t *tools = json_object_get(body, "tools");
    /* tool_choice "required" or a named function: the answer is a call of
     * one of those functions (mu_gen_req.call_one_of) */
    const char *call_names[MU_GEN_MAX_CALLS];
    int n_call = 0;
    if (json_is_object(tc) || (json_is_string(tc) && !strcmp(json_string_value(tc), "required"))) {
        const char *want = json_is_object(tc) ? mu_jc_str(json_object_get(tc, "function"), "name", "") : NULL;
        size_t i;
        json_t *t;
        json_array_foreach(tools, i, t) {
            const char *nm = mu_jc_str(json_object_get(t, "function"), "name", "");
            if ((!want || !strcmp(want, nm)) && n_call < MU_GEN_MAX_CALLS) call_names[n_call++] = nm;
        }
        if (!n_call) {
            mu_http_reply_error(r, 400,
                                want ? "field 'tool_choice.function.name': no tool of that name in 'tools'"
                                     : "field 'tool_choice': 'required' needs at least one tool in 'tools'",
                                want ? "tool_choice.function.name" : "tool_choice");
            return;
        }
        if (json_object_get(body, "response_format") && strcmp(mu_jc_str(json_object_get(body, "response_format"), "type", "text"), "text")) {
            mu_http_reply_error(r, 400, "field 'tool_choice': a forced tool call cannot be combined with a JSON response_format",
                                "tool_choice");
            return;
        }
    }
    mu_schema *schema = NULL;
    /* llama.cpp's json_schema when there is no response_format */
    if (api_response_schema(r, body, json_object_get(body, "response_format") ? "response_format" : "json_schema",
                            &schema))
        return;
    /* chat_template_kwargs: muser's renderer takes reasoning_effort (the
     * field of that name wins); other keys have no effect */
    const char *effort = mu_jc_str(body, "reasoning_effort", NULL);
    const json_t *kw = json_object_get(body, "chat_template_kwargs");
    if (!effort && json_is_string(json_object_get(kw, "reasoning_effort"))) {
        static const char *const ok[] = {"low", "medium", "high", "xhigh"};
        effort = json_string_value(json_object_get(kw, "reasoning_effort"));
        bool known = false;
        for (int i = 0; i < 4; i++) known |= !strcmp(effort, ok[i]);
        if (!known) {
            mu_schema_unref(schema);
            mu_http_reply_error(r, 400,
                                "field 'chat_template_kwargs.reasoning_effort': must be one of 'low', 'medium', "
                                "'high', 'xhigh'",
                                "chat_template_kwargs.reasoning_effort");
            return;
        }
    }
    bool use_tools = json_array_size(tools) > 0 && !(json_is_string(tc) && !strcmp(json_string_value(tc), "none"));
    const json_t *raw = json_object_get(body, "messages");
    int mode = api_chat_mode(r, body);
    json_t *flat = NULL;
    api_images im = {0};
    if (mode < 0 || !api_chat_images(r, a, raw, &flat, &im)) {
        mu_schema_unref(schema);
        return;
    }
    json_t *msgs = api_normalize_messages(flat ? flat : raw);
    json_decref(flat);
    int32_t *ids = NULL;
    int n = 0;
    char *ptext = NULL;
    bool verbose = mu_jc_bool(body, "verbose", false);
    bool ok = msgs && api_chat_prompt_ex(r, a, msgs, use_tools ? tools : NULL, effort, mode, &ids, &n,
                                         verbose || im.n ? &ptext : NULL);
    json_decref(msgs);
    const mu_mprompt *media = NULL;
    if (ok && im.n) { /* the rendered text holds a marker per image: it becomes the image prompt */
        free(ids);
        ids = NULL;
        ok = api_media_prompt(r, a, ptext, &im, &ids, &n, &media);
    }
    api_images_free(&im);
    if (!ok) {
        if (!msgs) mu_http_reply_error(r, 503, "server: out of memory", NULL);
        free(ptext);
        mu_schema_unref(schema);
        return;
    }
    mu_gen_req q = {0};
    q.media = media;
    q.n_predict = (int)mu_jc_int(body, "max_completion_tokens",
                                 mu_jc_int(body, "max_tokens", mu_jc_int(body, "n_predict", -1)));
    if (!api_extensions(r, body, &q)) {
        free(ids);
        free(ptext);
        mu_mprompt_free((mu_mprompt *)media);
        mu_schema_unref(schema);
        return;
    }
    q.sp = api_sample_params(a, body, "seed");
    q.logprobs = mu_jc_bool(body, "logprobs", false);
    q.n_top = q.logprobs ? (int)mu_jc_int(body, "top_logprobs", 0) : 0;
    q.schema = q.grammar ? NULL : schema; /* a grammar wins over response_format (llama.cpp) */
    q.schema_chat = true;
    q.chat = true;
    q.call_one_of = n_call ? call_names : NULL;
    q.n_call_one_of = n_call;
    bool stream = mu_jc_bool(body, "stream", false);
    oa_stream *s = calloc(1, sizeof *s);
    if (!s) {
        free(ids);
        free(ptext);
        mu_mprompt_free((mu_mprompt *)media);
        mu_schema_unref(schema);
        mu_grammar_unref(q.grammar);
        mu_http_reply_error(r, 503, "server: out of memory", NULL);
        return;
    }
    s->n = (int)mu_jc_int(body, "n", 1);
    s->per = s->n;
    ok = api_job_start_n(r, s->g, s->n, a, ids, n, &q, json_object_get(body, "stop"));
    mu_schema_unref(schema); /* the jobs hold their own references */
    mu_grammar_unref(q.grammar);
    if (!ok) {
        free(ptext);
        free(s);
        return;
    }
    s->a = a;
    s->chat = true;
    s->timings_per_token = mu_jc_bool(body, "timings_per_token", false);
    if (verbose) {
        s->verbose_prompt = ptext;
        ptext = NULL;
        s->verbose_settings = api_params_json(a, &q, json_object_get(body, "stop"), stream, s->timings_per_token);
    }
    free(ptext); /* an image prompt's text, when not kept for verbose */
    for (int k = 0; k < s->n; k++) s->g[k].want_toks = q.logprobs;
    s->logprobs = q.logprobs;
    s->tools = use_tools;
    s->legacy_fn = legacy_fn;
    s->created = api_unix_now();
    api_new_id(s->id, sizeof s->id, "chatcmpl-");
    if (stream) {
        s->include_usage = mu_jc_bool(json_object_get(body, "stream_options"), "include_usage", false);
        mu_http_reply_stream(r, "text/event-stream", oa_produce, oa_release, s);
        return;
    }
    mu_http_reply_later(r, oa_chat_poll, oa_release, s);
}

/* ---- completions ------------------------------------------------------------ */

static json_t *completion_logprobs(api_job *g, int from, int to) {
    json_t *toks = json_array(), *lps = json_array(), *tops = json_array(), *offs = json_array();
    size_t off = 0;
    for (int i = from; i < to; i++) {
        const api_tok *t = &g->toks[i];
        json_t *ts = api_token_str(g->app, t->id);
        json_array_append_new(offs, json_integer((json_int_t)off));
        off += json_string_length(ts);
        json_array_append_new(toks, ts);
        json_array_append_new(lps, json_real(t->logprob));
        json_t *top = json_object();
        for (int k = 0; k < t->n_top; k++) {
            json_t *s = api_token_str(g->app, t->top_ids[k]);
            json_object_set_new(top, json_string_value(s), json_real(t->top_logprobs[k]));
            json_decref(s);
        }
        json_array_append_new(tops, top);
    }
    return json_pack("{s:o,s:o,s:o,s:o}", "tokens", toks, "token_logprobs", lps, "top_logprobs", tops, "text_offset",
                     offs);
}

/* Prompt from a string, token ids, or a mix of both (llama.cpp's
 * tokenize_mixed: strings are tokenized with special texts parsed, BOS by
 * the model's rule only before a string that comes first; ids are used as
 * given); replies on failure. field names the JSON field in messages. */
bool api_prompt_tokens(mu_http_req *r, mu_http_app *a, const json_t *prompt, const char *field, int32_t **ids,
                       int *n, char **text) {
    mu_err err = {0};
    char m[200];
    if (json_is_object(prompt)) { /* llama.cpp's {prompt_string, multimodal_data} */
        const json_t *md = json_object_get(prompt, "multimodal_data");
        prompt = json_object_get(prompt, "prompt_string");
        if (json_array_size(md)) { /* routes that take images read them first (api_prompt_media) */
            snprintf(m, sizeof m, "field '%s.multimodal_data': this route takes no images", field);
            mu_http_reply_error(r, 400, m, field);
            return false;
        }
    }
    if (json_is_string(prompt)) {
        int rc = api_tokenize_prompt(a, json_string_value(prompt), true, ids, n, &err);
        if (rc) {
            mu_http_reply_status(r, rc, &err);
            return false;
        }
        if (text) *text = strdup(json_string_value(prompt));
        return true;
    }
    size_t k = json_array_size(prompt);
    if (k == 0) {
        snprintf(m, sizeof m, "field '%s': must not be empty", field);
        mu_http_reply_error(r, 400, m, field);
        return false;
    }
    int32_t *o = NULL;
    size_t no = 0, cap = 0;
    mu_http_buf tb = {0};
    for (size_t i = 0; i < k; i++) {
        const json_t *x = json_array_get(prompt, i);
        int32_t *t = NULL, one;
        int nt = 0;
        if (json_is_string(x)) {
            int rc = i == 0 ? api_tokenize_prompt(a, json_string_value(x), true, &t, &nt, &err)
                            : mu_tok_encode(a->tok, json_string_value(x), json_string_length(x), true, &t, &nt, &err);
            if (rc) {
                free(o);
                mu_http_buf_free(&tb);
                mu_http_reply_status(r, rc, &err);
                return false;
            }
        } else {
            json_int_t v = (json_int_t)json_number_value(x);
            if (v < 0 || v >= a->info->n_vocab) {
                free(o);
                mu_http_buf_free(&tb);
                snprintf(m, sizeof m, "field '%s[%zu]': token id out of range: must be below %d", field, i,
                         a->info->n_vocab);
                mu_http_reply_error(r, 400, m, field);
                return false;
            }
            one = (int32_t)v;
            nt = 1;
        }
        const int32_t *src = t ? t : &one;
        if (no + (size_t)nt > cap) {
            size_t nc = (no + (size_t)nt) * 2 + 16;
            int32_t *p = realloc(o, nc * sizeof *p);
            if (!p) {
                free(t);
                free(o);
                mu_http_buf_free(&tb);
                mu_http_reply_error(r, 503, "server: out of memory", NULL);
                return false;
            }
            o = p;
            cap = nc;
        }
        memcpy(o + no, src, (size_t)nt * sizeof *o);
        no += (size_t)nt;
        free(t);
    }
    if (text)
        for (size_t i = 0; i < no; i++) {
            if (api_is_special(a, o[i])) continue;
            char buf[API_PIECE_MAX];
            int pn = api_piece(a, o[i], buf, sizeof buf);
            if (pn > 0) mu_http_buf_add(&tb, buf, (size_t)pn);
        }
    *ids = o;
    *n = (int)no;
    if (text) {
        json_t *s = api_json_text(tb.p ? tb.p : "", tb.n);
        *text = strdup(json_string_value(s));
        json_decref(s);
    }
    mu_http_buf_free(&tb);
    return true;
}

bool api_prompt_ids(mu_http_req *r, mu_http_app *a, const json_t *prompt, int32_t **ids, int *n, char **text) {
    return api_prompt_tokens(r, a, prompt, "prompt", ids, n, text);
}

static bool oa_completions_poll(void *state, mu_http_req *r) {
    oa_stream *s = state;
    bool failed;
    if (!poll_all(r, s, &failed)) return false;
    if (failed) return true;
    json_t *choices = json_array();
    for (int k = 0; k < s->n; k++) {
        api_job *g = &s->g[k];
        size_t nc;
        const char *cs = api_job_take_content(g, &nc);
        mu_http_buf all = {0};
        if (s->echo[k / s->per]) mu_http_buf_str(&all, s->echo[k / s->per]);
        mu_http_buf_add(&all, cs, nc);
        json_array_append_new(choices,
                              json_pack("{s:o,s:i,s:o,s:s}", "text", api_json_text(all.p ? all.p : "", all.n), "index",
                                        k, "logprobs", s->logprobs ? completion_logprobs(g, 0, g->n_ids) : json_null(),
                                        "finish_reason", finish_name(g->finish, false)));
        mu_http_buf_free(&all);
    }
    json_t *resp = json_pack("{s:s,s:s,s:I,s:s,s:s,s:o,s:o,s:o}", "id", s->id, "object", "text_completion",
                             "created", (json_int_t)s->created, "model", s->a->model_id, "system_fingerprint", "muser",
                             "choices", choices, "usage", usage(s->g, s->n, s->per), "timings",
                             api_timings(&s->g[0].st));
    add_verbose(s, resp);
    mu_http_reply_json(r, 200, resp);
    return true;
}

void api_openai_completions(mu_http_req *r, const json_t *body) {
    mu_http_app *a = mu_http_req_app(r);
    if (!check(r, body)) return;
    bool echo = mu_jc_bool(body, "echo", false);
    int per = (int)mu_jc_int(body, "n", 1);
    const json_t *prompts[API_MAX_CHOICES];
    int n_prompts = api_prompt_list(r, json_object_get(body, "prompt"), prompts, API_MAX_CHOICES / per);
    if (!n_prompts) return;
    mu_schema *schema = NULL;
    if (api_response_schema(r, body, "json_schema", &schema)) return;
    mu_gen_req q = {0};
    q.schema = schema;
    q.n_predict = (int)mu_jc_int(body, "max_tokens", mu_jc_int(body, "n_predict", 16));
    q.sp = api_sample_params(a, body, "seed");
    json_t *lpv = json_object_get(body, "logprobs");
    q.logprobs = json_is_integer(lpv) || json_is_real(lpv);
    q.n_top = q.logprobs ? (int)json_number_value(lpv) : 0;
    oa_stream *s = calloc(1, sizeof *s);
    if (!s || !api_extensions(r, body, &q)) {
        if (!s) mu_http_reply_error(r, 503, "server: out of memory", NULL);
        free(s);
        mu_schema_unref(schema);
        return;
    }
    s->per = per;
    /* each prompt: its own jobs (n choices), choice index p * n + k */
    for (int p = 0; p < n_prompts; p++) {
        int32_t *ids = NULL;
        int n = 0;
        bool ok = api_prompt_ids(r, a, prompts[p], &ids, &n, echo ? &s->echo[p] : NULL) &&
                  api_job_start_n(r, &s->g[p * per], per, a, ids, n, &q, json_object_get(body, "stop"));
        if (!ok) {
            s->n = p * per;
            mu_schema_unref(schema);
            mu_grammar_unref(q.grammar);
            oa_release(s);
            return;
        }
    }
    mu_schema_unref(schema); /* the jobs hold their own references */
    mu_grammar_unref(q.grammar);
    s->n = n_prompts * per;
    s->a = a;
    for (int k = 0; k < s->n; k++) s->g[k].want_toks = q.logprobs;
    s->logprobs = q.logprobs;
    s->created = api_unix_now();
    api_new_id(s->id, sizeof s->id, "cmpl-");
    if (mu_jc_bool(body, "stream", false)) {
        s->include_usage = mu_jc_bool(json_object_get(body, "stream_options"), "include_usage", false);
        mu_http_reply_stream(r, "text/event-stream", oa_produce, oa_release, s);
        return;
    }
    mu_http_reply_later(r, oa_completions_poll, oa_release, s);
}

/* The model object (llama.cpp's shape: OpenAI's id, object, created,
 * owned_by, plus aliases and meta). */
static json_t *model_object(mu_http_app *a, const char *id) {
    json_t *aliases = json_array();
    for (int i = 0; i < a->n_aliases; i++) json_array_append_new(aliases, json_string(a->aliases[i]));
    json_t *tags = json_array();
    for (const char *t = a->tags; t && *t;) { /* --tags a,b,c */
        size_t n = strcspn(t, ",");
        if (n) json_array_append_new(tags, api_json_text(t, n));
        t += n + (t[n] == ',');
    }
    return json_pack("{s:s,s:o,s:o,s:s,s:I,s:s,s:{s:i,s:i,s:i,s:i,s:I}}", "id", id, "aliases", aliases, "tags", tags, "object", "model",
                     "created", (json_int_t)a->model_mtime, "owned_by", "muser", "meta", "n_vocab", a->info->n_vocab,
                     "n_ctx", a->n_ctx, "n_ctx_train", a->info->n_ctx_train, "n_embd", a->info->n_embd, "size",
                     (json_int_t)a->model_bytes);
}

void api_openai_models(mu_http_req *r, const json_t *body) {
    (void)body;
    mu_http_app *a = mu_http_req_app(r);
    /* llama.cpp's list also carries "models", an Ollama-shaped entry with
     * the model's capabilities ("multimodal" with a projector) */
    json_t *m = json_pack("{s:s,s:s,s:I,s:s,s:[s,s]}", "name", a->model_id, "model", a->model_id, "size",
                          (json_int_t)a->model_bytes, "type", "model", "capabilities", "completion", "embedding");
    if (a->mmproj) json_array_append_new(json_object_get(m, "capabilities"), json_string("multimodal"));
    json_object_set_new(m, "details", json_pack("{s:s}", "format", "gguf"));
    mu_http_reply_json(r, 200, json_pack("{s:[o],s:s,s:[o]}", "models", m, "object", "list", "data",
                                         model_object(a, a->model_id)));
}

/* Percent-decodes s[0..n) into out (cap bytes); false on a bad escape, a
 * NUL, or no room. */
static bool pct_decode(const char *s, size_t n, char *out, size_t cap) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        int c = (unsigned char)s[i];
        if (c == '%') {
            if (i + 2 >= n || !isxdigit((unsigned char)s[i + 1]) || !isxdigit((unsigned char)s[i + 2])) return false;
            char hex[3] = {s[i + 1], s[i + 2], 0};
            c = (int)strtol(hex, NULL, 16);
            i += 2;
        }
        if (c == 0 || k + 1 >= cap) return false;
        out[k++] = (char)c;
    }
    out[k] = 0;
    return true;
}

void api_openai_model(mu_http_req *r, const json_t *body) {
    (void)body;
    mu_http_app *a = mu_http_req_app(r);
    const char *p = mu_http_req_path(r) + strlen("/v1/models/");
    char id[256];
    json_t *probe = NULL;
    if (!pct_decode(p, strlen(p), id, sizeof id) || !(probe = json_string(id))) {
        mu_http_reply_error(r, 400, "model id in the path: bad percent-encoding or not UTF-8", "model");
        return;
    }
    json_decref(probe);
    if (!api_model_name_ok(a, id, false)) {
        char m[400];
        snprintf(m, sizeof m, "model '%.150s' not found; this server serves '%.150s'", id, a->model_id);
        mu_http_reply_error(r, 404, m, "model");
        return;
    }
    mu_http_reply_json(r, 200, model_object(a, id));
}
