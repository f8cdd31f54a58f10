/* api_anthropic.c: Anthropic's Messages API: POST /v1/messages (streaming
 * and not) and POST /v1/messages/count_tokens, on the same generation
 * pipeline as the other protocols.
 * Owns: Anthropic's request shapes (system, content blocks: text, image
 * (base64 sources, with --mmproj), tool_use, tool_result (text and
 * images), thinking; tools with input_schema; tool_choice
 * auto/any/tool/none; thinking on/off) turned into the chat template's
 * messages, and its response shapes: content blocks, stop_reason, usage,
 * and the SSE event sequence (message_start, content_block_start/delta/
 * stop, message_delta, message_stop).
 * Does not own: validation tables (api.c), generation (src/gen), reading a
 * job's events (api_job.c).
 * Design: reasoning is a "thinking" block, the answer a "text" block, each
 * tool call a "tool_use" block (sent whole at the end of the turn, as the
 * other protocols do); a stream opens a block when its kind of text first
 * arrives and closes it when another kind starts. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"

/* An image block (a user message's, or inside a tool_result) at where:
 * its base64 source joins im and its marker text; a url source is refused
 * as remote image URLs are (api_image_add). False after replying. */
static bool image_block(mu_http_req *r, const json_t *bl, const char *where, api_images *im, mu_http_buf *text) {
    const json_t *src = json_object_get(bl, "source");
    const char *st = mu_jc_str(src, "type", "");
    bool url = !strcmp(st, "url");
    char field[200];
    snprintf(field, sizeof field, "%s.source.%s", where, url ? "url" : "data");
    const json_t *d = json_object_get(src, url ? "url" : "data");
    if ((!url && strcmp(st, "base64")) || !json_is_string(d)) {
        char msg[320];
        if (!url && strcmp(st, "base64"))
            snprintf(msg, sizeof msg, "field '%s.source.type': must be 'base64' or 'url' for an image block", where);
        else
            snprintf(msg, sizeof msg, "field '%s': is required for a %s image source", field, st);
        mu_http_reply_error(r, 400, msg, where);
        return false;
    }
    return api_image_part(r, im, json_string_value(d), json_string_length(d), url, field, text);
}

/* Anthropic messages -> the template's (OpenAI-shaped) messages, one
 * MU_MEDIA_MARKER in the text per image (the images join im). NULL after
 * replying 400 (unsupported block) or 503. */
static json_t *to_template(mu_http_req *r, const json_t *body, api_images *im) {
    json_t *out = json_array();
    if (!out) goto oom;
    const json_t *sys = json_object_get(body, "system");
    if (sys && !json_is_null(sys)) {
        mu_http_buf b = {0};
        api_content_text(sys, &b);
        json_array_append_new(out, json_pack("{s:s,s:s%}", "role", "system", "content", b.p ? b.p : "", b.n));
        mu_http_buf_free(&b);
    }
    size_t i;
    json_t *m;
    json_array_foreach(json_object_get(body, "messages"), i, m) {
        const char *role = mu_jc_str(m, "role", "user");
        const json_t *c = json_object_get(m, "content");
        if (json_is_string(c)) {
            json_array_append_new(out, json_pack("{s:s,s:O}", "role", role, "content", c));
            continue;
        }
        mu_http_buf text = {0}, thinking = {0};
        json_t *calls = json_array();
        size_t k;
        json_t *bl;
        json_array_foreach(c, k, bl) {
            const char *type = mu_jc_str(bl, "type", "");
            char where[96];
            snprintf(where, sizeof where, "messages[%zu].content[%zu]", i, k);
            if (!strcmp(type, "text")) {
                json_t *t = json_object_get(bl, "text");
                if (!json_is_string(t)) goto need_text;
                mu_http_buf_add(&text, json_string_value(t), json_string_length(t));
            } else if (!strcmp(type, "image") && !strcmp(role, "user")) {
                if (!image_block(r, bl, where, im, &text)) goto fail_msg;
            } else if (!strcmp(type, "thinking")) {
                json_t *t = json_object_get(bl, "thinking");
                if (json_is_string(t)) mu_http_buf_add(&thinking, json_string_value(t), json_string_length(t));
            } else if (!strcmp(type, "redacted_thinking")) {
                /* nothing muser can read */
            } else if (!strcmp(type, "tool_use") && !strcmp(role, "assistant")) {
                const char *name = mu_jc_str(bl, "name", NULL);
                if (!name || !*name) {
                    char msg[160];
                    snprintf(msg, sizeof msg, "field '%s.name': is required for a tool_use block", where);
                    mu_http_reply_error(r, 400, msg, where);
                    goto fail_msg;
                }
                json_t *input = json_object_get(bl, "input");
                json_array_append_new(calls, json_pack("{s:s,s:s,s:{s:s,s:O}}", "id", mu_jc_str(bl, "id", ""), "type",
                                                       "function", "function", "name", name, "arguments",
                                                       json_is_object(input) ? input : json_object()));
            } else if (!strcmp(type, "tool_result") && !strcmp(role, "user")) {
                const json_t *trc = json_object_get(bl, "content");
                mu_http_buf tr = {0};
                if (json_is_string(trc)) mu_http_buf_add(&tr, json_string_value(trc), json_string_length(trc));
                size_t ki;
                json_t *inner;
                json_array_foreach(trc, ki, inner) {
                    char iw[128];
                    snprintf(iw, sizeof iw, "%s.content[%zu]", where, ki);
                    const json_t *t = json_object_get(inner, "text");
                    if (json_is_string(t)) mu_http_buf_add(&tr, json_string_value(t), json_string_length(t));
                    else if (!strcmp(mu_jc_str(inner, "type", ""), "image") && !image_block(r, inner, iw, im, &tr)) {
                        mu_http_buf_free(&tr);
                        goto fail_msg;
                    }
                }
                json_array_append_new(out, json_pack("{s:s,s:s,s:s%}", "role", "tool", "tool_call_id",
                                                     mu_jc_str(bl, "tool_use_id", ""), "content", tr.p ? tr.p : "",
                                                     tr.n));
                mu_http_buf_free(&tr);
            } else {
                char msg[200];
                snprintf(msg, sizeof msg, "field '%s.type': '%s' blocks are not supported in a %s message%s", where,
                         type, role,
                         !strcmp(type, "document") ? " (text and image input only)" : "");
                mu_http_reply_error(r, 400, msg, where);
                goto fail_msg;
            }
            continue;
        need_text : {
            char msg[160];
            snprintf(msg, sizeof msg, "field '%s.text': is required for a text block", where);
            mu_http_reply_error(r, 400, msg, where);
            goto fail_msg;
        }
        fail_msg:
            mu_http_buf_free(&text);
            mu_http_buf_free(&thinking);
            json_decref(calls);
            json_decref(out);
            return NULL;
        }
        if (text.n || thinking.n || json_array_size(calls) || !strcmp(role, "assistant")) {
            json_t *n = json_pack("{s:s,s:s%}", "role", role, "content", text.p ? text.p : "", text.n);
            if (thinking.n) json_object_set_new(n, "reasoning_content", json_stringn(thinking.p, thinking.n));
            if (json_array_size(calls)) json_object_set(n, "tool_calls", calls);
            json_array_append_new(out, n);
        }
        mu_http_buf_free(&text);
        mu_http_buf_free(&thinking);
        json_decref(calls);
    }
    return out;
oom:
    mu_http_reply_error(r, 503, "server: out of memory", NULL);
    return NULL;
}

/* Anthropic tools -> OpenAI-shaped tool definitions (for the template). */
static json_t *to_tools(const json_t *tools) {
    json_t *out = json_array();
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        json_t *fn = json_pack("{s:O,s:O}", "name", json_object_get(t, "name"), "parameters",
                               json_object_get(t, "input_schema"));
        if (json_is_string(json_object_get(t, "description")))
            json_object_set(fn, "description", json_object_get(t, "description"));
        json_array_append_new(out, json_pack("{s:s,s:o}", "type", "function", "function", fn));
    }
    return out;
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

/* The prompt of a request (*media: its images, or NULL); false after
 * replying. */
static bool build_prompt(mu_http_req *r, const json_t *body, bool *use_tools, int32_t **ids, int *n,
                         const mu_mprompt **media) {
    mu_http_app *a = mu_http_req_app(r);
    api_images im = {0};
    json_t *msgs = to_template(r, body, &im);
    bool ok = msgs != NULL;
    if (ok) {
        const json_t *tc = json_object_get(body, "tool_choice");
        json_t *tools = json_array_size(json_object_get(body, "tools")) ? to_tools(json_object_get(body, "tools")) : NULL;
        *use_tools = tools && strcmp(mu_jc_str(tc, "type", "auto"), "none");
        ok = api_chat_prompt_media(r, a, msgs, *use_tools ? tools : NULL, NULL, &im, ids, n, media);
        json_decref(msgs);
        json_decref(tools);
    }
    api_images_free(&im);
    return ok;
}

void api_anthropic_count_tokens(mu_http_req *r, const json_t *body) {
    if (!check(r, body)) return;
    bool use_tools;
    int32_t *ids = NULL;
    int n = 0;
    const mu_mprompt *media = NULL;
    if (!build_prompt(r, body, &use_tools, &ids, &n, &media)) return;
    free(ids);
    mu_mprompt_free((mu_mprompt *)media); /* counted: n holds the images' rows */
    mu_http_reply_json(r, 200, json_pack("{s:i}", "input_tokens", n));
}

/* ---- responses ---------------------------------------------------------- */

typedef struct {
    api_job g;
    mu_http_app *a;
    char id[64], model[264];
    bool thinking;        /* return reasoning as thinking blocks */
    int n_prompt;
    int phase;            /* 0: message_start not sent; 1: running; 2: done */
    int open;             /* open block: 0 none, 1 thinking, 2 text */
    int index;            /* index of the next block */
} an_state;

static const char *stop_reason(const api_job *g) {
    if (json_array_size(g->tool_calls)) return "tool_use";
    switch (g->finish) {
    case MU_FINISH_WORD: return "stop_sequence";
    case MU_FINISH_LENGTH: return "max_tokens";
    default: return "end_turn";
    }
}

static json_t *tool_use_block(const json_t *call, bool empty_input) {
    char id[48];
    api_new_id(id, sizeof id, "toolu_");
    json_t *args = json_object_get(call, "arguments");
    return json_pack("{s:s,s:s,s:O,s:O}", "type", "tool_use", "id", id, "name", json_object_get(call, "name"), "input",
                     empty_input || !json_is_object(args) ? json_object() : args);
}

static json_t *usage(const an_state *s) {
    return json_pack("{s:i,s:i,s:i,s:i}", "input_tokens", s->n_prompt - s->g.st.n_reused, "output_tokens", s->g.n_ids,
                     "cache_read_input_tokens", s->g.st.n_reused, "cache_creation_input_tokens", 0);
}

static bool an_poll(void *state, mu_http_req *r) {
    an_state *s = state;
    api_job *g = &s->g;
    if (api_job_poll(g, mu_http_req_fd(r))) return false;
    if (g->finish == MU_FINISH_ERROR || g->finish == MU_FINISH_CANCEL) {
        api_job_reply_failed(r, g);
        return true;
    }
    size_t nr, nc;
    const char *rs = api_job_take_reasoning(g, &nr);
    const char *cs = api_job_take_content(g, &nc);
    json_t *content = json_array();
    if (s->thinking && nr)
        json_array_append_new(content, json_pack("{s:s,s:o,s:s}", "type", "thinking", "thinking", api_json_text(rs, nr),
                                                 "signature", ""));
    if (nc || !json_array_size(g->tool_calls))
        json_array_append_new(content, json_pack("{s:s,s:o}", "type", "text", "text", api_json_text(cs, nc)));
    size_t i;
    json_t *c;
    json_array_foreach(g->tool_calls, i, c) json_array_append_new(content, tool_use_block(c, false));
    json_t *o = json_pack("{s:s,s:s,s:s,s:s,s:o,s:s,s:o,s:o}", "id", s->id, "type", "message", "role", "assistant",
                          "model", s->model, "content", content, "stop_reason", stop_reason(g), "stop_sequence",
                          g->finish == MU_FINISH_WORD ? json_string(g->stop_word) : json_null(), "usage", usage(s));
    json_t *sp = api_spec_timings(&g->st); /* the request's "speculative", what it did */
    if (sp) json_object_set_new(o, "speculative", sp);
    mu_http_reply_json(r, 200, o);
    return true;
}

static void close_block(an_state *s, mu_http_buf *out) {
    if (!s->open) return;
    api_sse_event(out, "content_block_stop", json_pack("{s:i}", "index", s->index));
    s->index++;
    s->open = 0;
}

/* Text of kind (1 thinking, 2 text) into its block, opening it first. */
static void block_text(an_state *s, mu_http_buf *out, int kind, const char *t, size_t n) {
    if (!n) return;
    if (s->open != kind) {
        close_block(s, out);
        json_t *b = kind == 1 ? json_pack("{s:s,s:s,s:s}", "type", "thinking", "thinking", "", "signature", "")
                              : json_pack("{s:s,s:s}", "type", "text", "text", "");
        api_sse_event(out, "content_block_start",
              json_pack("{s:i,s:o}", "index", s->index, "content_block", b));
        s->open = kind;
    }
    json_t *d = kind == 1 ? json_pack("{s:s,s:o}", "type", "thinking_delta", "thinking", api_json_text(t, n))
                          : json_pack("{s:s,s:o}", "type", "text_delta", "text", api_json_text(t, n));
    api_sse_event(out, "content_block_delta",
          json_pack("{s:i,s:o}", "index", s->index, "delta", d));
}

static int an_produce(void *state, mu_http_buf *out, int fd) {
    an_state *s = state;
    api_job *g = &s->g;
    if (s->phase == 2) return 0;
    if (s->phase == 0) {
        s->phase = 1;
        json_t *msg = json_pack("{s:s,s:s,s:s,s:s,s:[],s:n,s:n,s:{s:i,s:i}}", "id", s->id, "type", "message", "role",
                                "assistant", "model", s->model, "content", "stop_reason", "stop_sequence", "usage",
                                "input_tokens", s->n_prompt, "output_tokens", 0);
        api_sse_event(out, "message_start", json_pack("{s:o}", "message", msg));
        api_sse_event(out, "ping", json_object());
        return 1;
    }
    bool running = api_job_poll(g, fd);
    if (g->finish == MU_FINISH_CANCEL) return -1;
    size_t nr = 0, nc = 0;
    const char *rs = api_job_take_reasoning(g, &nr);
    const char *cs = api_job_take_content(g, &nc);
    if (s->thinking) block_text(s, out, 1, rs, nr);
    block_text(s, out, 2, cs, nc);
    if (running) return 1;
    s->phase = 2;
    if (g->finish == MU_FINISH_ERROR) {
        api_sse_event(out, "error", json_pack("{s:{s:s,s:s}}", "error", "type", "api_error", "message",
                                      g->err));
        return 1;
    }
    if (s->index == 0 && !s->open && !json_array_size(g->tool_calls)) {
        /* no text at all: an empty text block, as the plain answer has */
        api_sse_event(out, "content_block_start",
              json_pack("{s:i,s:{s:s,s:s}}", "index", 0, "content_block", "type",
                        "text", "text", ""));
        s->open = 2;
    }
    close_block(s, out);
    size_t i;
    json_t *c;
    json_array_foreach(g->tool_calls, i, c) {
        api_sse_event(out, "content_block_start", json_pack("{s:i,s:o}", "index", s->index,
                                                    "content_block", tool_use_block(c, true)));
        char *args = json_dumps(json_object_get(c, "arguments"), JSON_COMPACT);
        api_sse_event(out, "content_block_delta",
              json_pack("{s:i,s:{s:s,s:s}}", "index", s->index, "delta", "type",
                        "input_json_delta", "partial_json", args ? args : "{}"));
        free(args);
        s->open = 3;
        close_block(s, out);
    }
    json_t *md = json_pack("{s:{s:s,s:o},s:o}", "delta", "stop_reason", stop_reason(g), "stop_sequence",
                           g->finish == MU_FINISH_WORD ? json_string(g->stop_word) : json_null(), "usage", usage(s));
    json_t *sp = api_spec_timings(&g->st);
    if (md && sp) json_object_set_new(md, "speculative", sp);
    else json_decref(sp);
    api_sse_event(out, "message_delta", md);
    api_sse_event(out, "message_stop", json_object());
    return 1;
}

static void an_release(void *state) {
    an_state *s = state;
    api_job_free(&s->g);
    free(s);
}

void api_anthropic_messages(mu_http_req *r, const json_t *body) {
    mu_http_app *a = mu_http_req_app(r);
    if (!check(r, body)) return;
    /* tool_choice any / tool: the answer is a call (mu_gen_req.call_one_of) */
    const json_t *tc = json_object_get(body, "tool_choice");
    const char *tc_type = mu_jc_str(tc, "type", "auto");
    const char *names[MU_GEN_MAX_CALLS];
    int n_names = 0;
    if (!strcmp(tc_type, "any") || !strcmp(tc_type, "tool")) {
        const char *want = !strcmp(tc_type, "tool") ? mu_jc_str(tc, "name", "") : NULL;
        n_names = api_forced_names(json_object_get(body, "tools"), want, names);
        if (!n_names) {
            mu_http_reply_error(r, 400,
                                want ? "field 'tool_choice.name': no tool of that name in 'tools'"
                                     : "field 'tool_choice': type 'any' needs at least one tool in 'tools'",
                                "tool_choice");
            return;
        }
    }
    bool use_tools;
    int32_t *ids = NULL;
    int n = 0;
    const mu_mprompt *media = NULL;
    if (!build_prompt(r, body, &use_tools, &ids, &n, &media)) return;
    mu_gen_req q = {0};
    q.media = media;
    q.chat = true;
    q.n_predict = (int)mu_jc_int(body, "max_tokens", -1);
    q.sp = api_sample_params(a, body, NULL);
    api_spec_params(json_object_get(body, "speculative"), "type", "n_max", "n_min", &q);
    q.call_one_of = n_names ? names : NULL;
    q.n_call_one_of = n_names;
    an_state *s = calloc(1, sizeof *s);
    if (!s) {
        free(ids);
        mu_mprompt_free((mu_mprompt *)media);
        mu_http_reply_error(r, 503, "server: out of memory", NULL);
        return;
    }
    s->a = a;
    s->n_prompt = n;
    s->thinking = !strcmp(mu_jc_str(json_object_get(body, "thinking"), "type", "disabled"), "enabled");
    snprintf(s->model, sizeof s->model, "%s", mu_jc_str(body, "model", a->model_id));
    api_new_id(s->id, sizeof s->id, "msg_");
    if (!api_job_start(r, &s->g, a, ids, n, &q, json_object_get(body, "stop_sequences"))) {
        free(s);
        return;
    }
    if (mu_jc_bool(body, "stream", false)) {
        mu_http_reply_stream(r, "text/event-stream", an_produce, an_release, s);
        return;
    }
    mu_http_reply_later(r, an_poll, an_release, s);
}
