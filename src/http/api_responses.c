/* api_responses.c: OpenAI's Responses API: POST /v1/responses (alias
 * /responses, as llama.cpp's server), streaming and not, on the same
 * generation pipeline as the other protocols.
 * Owns: the input forms (a string, or items: messages with input_text /
 * output_text / input_image parts (data URLs, with --mmproj),
 * function_call, function_call_output, reasoning)
 * turned into the chat template's messages; instructions; flat function
 * tools; tool_choice; text.format (structured output); the response object
 * (output items: reasoning, message, function_call; status, usage) and the
 * typed SSE events (response.created ... response.completed), numbered by
 * sequence_number.
 * Does not own: validation tables (api.c), generation (src/gen), reading a
 * job's events (api_job.c).
 * Design: nothing is stored (store is accepted and false in the answer;
 * previous_response_id is refused); a stream opens an output item when its
 * kind of text first arrives and closes it (with its *.done events) when
 * another kind starts; function calls come whole at the end of the turn. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"

/* The text of content c (a string or parts) at where into b: text parts
 * joined, each input_image part's image into im and its MU_MEDIA_MARKER
 * into the text. False after replying 400 (a part muser does not read). */
static bool parts_text(mu_http_req *r, const json_t *c, const char *where, api_images *im, mu_http_buf *b) {
    if (json_is_string(c)) {
        mu_http_buf_add(b, json_string_value(c), json_string_length(c));
        return true;
    }
    size_t k;
    json_t *p;
    json_array_foreach(c, k, p) {
        const char *pt = mu_jc_str(p, "type", "");
        char f[160], m[256];
        if (!strcmp(pt, "input_text") || !strcmp(pt, "output_text") || !strcmp(pt, "text")) {
            const json_t *t = json_object_get(p, "text");
            if (json_is_string(t)) mu_http_buf_add(b, json_string_value(t), json_string_length(t));
            continue;
        }
        const json_t *u = json_object_get(p, "image_url");
        if (!strcmp(pt, "input_image") && json_is_string(u)) {
            snprintf(f, sizeof f, "%s[%zu].image_url", where, k);
            if (!api_image_part(r, im, json_string_value(u), json_string_length(u), true, f, b)) return false;
            continue;
        }
        if (!strcmp(pt, "input_image"))
            snprintf(m, sizeof m, "field '%s[%zu].image_url': is required for an input_image part (files are not stored)",
                     where, k);
        else
            snprintf(m, sizeof m, "field '%s[%zu].type': '%s' parts are not supported (text and images only)", where, k,
                     pt);
        mu_http_reply_error(r, 400, m, where);
        return false;
    }
    return true;
}

/* instructions + input -> the template's messages (one MU_MEDIA_MARKER per
 * image, the images into im); NULL after replying. */
static json_t *to_template(mu_http_req *r, const json_t *body, api_images *im) {
    json_t *out = json_array();
    const char *ins = mu_jc_str(body, "instructions", NULL);
    if (ins) json_array_append_new(out, json_pack("{s:s,s:s}", "role", "system", "content", ins));
    const json_t *in = json_object_get(body, "input");
    if (json_is_string(in)) {
        json_array_append_new(out, json_pack("{s:s,s:O}", "role", "user", "content", in));
        return out;
    }
    json_t *pending = NULL; /* the assistant message that collects reasoning and calls */
    size_t i;
    json_t *it;
    json_array_foreach(in, i, it) {
        const char *type = mu_jc_str(it, "type", "message");
        char where[64];
        snprintf(where, sizeof where, "input[%zu]", i);
        if (!strcmp(type, "message")) {
            const char *role = mu_jc_str(it, "role", NULL);
            if (!role) {
                char m[128];
                snprintf(m, sizeof m, "field '%s.role': is required for a message", where);
                mu_http_reply_error(r, 400, m, where);
                goto fail;
            }
            char cw[80];
            snprintf(cw, sizeof cw, "%s.content", where);
            mu_http_buf b = {0};
            if (!parts_text(r, json_object_get(it, "content"), cw, im, &b)) {
                mu_http_buf_free(&b);
                goto fail;
            }
            if (!strcmp(role, "assistant") && pending) {
                json_object_set_new(pending, "content", json_stringn(b.p ? b.p : "", b.n));
            } else {
                pending = NULL;
                json_t *m = json_pack("{s:s,s:s%}", "role", !strcmp(role, "developer") ? "system" : role, "content",
                                      b.p ? b.p : "", b.n);
                json_array_append_new(out, m);
                if (!strcmp(role, "assistant")) pending = m;
            }
            mu_http_buf_free(&b);
        } else if (!strcmp(type, "reasoning") || !strcmp(type, "function_call")) {
            if (!pending) {
                pending = json_pack("{s:s,s:s}", "role", "assistant", "content", "");
                json_array_append_new(out, pending);
            }
            if (!strcmp(type, "reasoning")) {
                mu_http_buf b = {0};
                api_content_text(json_object_get(it, "content"), &b);
                if (!b.n) api_content_text(json_object_get(it, "summary"), &b);
                json_object_set_new(pending, "reasoning_content", json_stringn(b.p ? b.p : "", b.n));
                mu_http_buf_free(&b);
            } else {
                json_t *calls = json_object_get(pending, "tool_calls");
                if (!calls) {
                    calls = json_array();
                    json_object_set_new(pending, "tool_calls", calls);
                }
                json_t *args = json_loads(mu_jc_str(it, "arguments", "{}"), 0, NULL);
                json_array_append_new(calls, json_pack("{s:s,s:s,s:{s:s,s:o}}", "id", mu_jc_str(it, "call_id", ""),
                                                       "type", "function", "function", "name", mu_jc_str(it, "name", ""),
                                                       "arguments", json_is_object(args) ? args : json_object()));
                if (!json_is_object(args)) json_decref(args);
            }
        } else { /* function_call_output */
            pending = NULL;
            char ow[80];
            snprintf(ow, sizeof ow, "%s.output", where);
            mu_http_buf b = {0};
            if (!parts_text(r, json_object_get(it, "output"), ow, im, &b)) {
                mu_http_buf_free(&b);
                goto fail;
            }
            json_array_append_new(out, json_pack("{s:s,s:s,s:s%}", "role", "tool", "tool_call_id",
                                                 mu_jc_str(it, "call_id", ""), "content", b.p ? b.p : "", b.n));
            mu_http_buf_free(&b);
        }
    }
    return out;
fail:
    json_decref(out);
    return NULL;
}

/* Flat function tools -> the template's (chat-shaped) tool definitions. */
static json_t *to_tools(const json_t *tools) {
    json_t *out = json_array();
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        json_t *fn = json_pack("{s:O}", "name", json_object_get(t, "name"));
        const char *keys[] = {"description", "parameters", "strict"};
        for (int k = 0; k < 3; k++)
            if (json_object_get(t, keys[k]) && !json_is_null(json_object_get(t, keys[k])))
                json_object_set(fn, keys[k], json_object_get(t, keys[k]));
        json_array_append_new(out, json_pack("{s:s,s:o}", "type", "function", "function", fn));
    }
    return out;
}

/* ---- the answer ---------------------------------------------------------- */

typedef struct {
    api_job g;
    mu_http_app *a;
    json_t *echo;          /* the request fields the response repeats */
    json_t *items;         /* output items done so far */
    char id[64], item_id[64], model[264];
    int64_t created;
    int n_prompt, seq;
    int phase;             /* 0: created not sent; 1: running; 2: done */
    int open;              /* 0 none, 1 reasoning, 2 message */
    size_t item_from;      /* where the open item's text starts in its buffer */
    bool tpt;              /* llama.cpp's timings_per_token: timings in the delta events */
    bool lp;               /* logprobs of the answer tokens (include message.output_text.logprobs,
                              top_logprobs) */
    int lp_from, lp_sent;  /* answer tokens (g.ctoks): where the open message starts, sent so far */
} rs_state;

static json_t *usage(const rs_state *s) {
    return json_pack("{s:i,s:{s:i},s:i,s:{s:i},s:i}", "input_tokens", s->n_prompt, "input_tokens_details",
                     "cached_tokens", s->g.st.n_reused, "output_tokens", s->g.n_ids, "output_tokens_details",
                     "reasoning_tokens", 0, "total_tokens", s->n_prompt + s->g.n_ids);
}

static json_t *response_object(rs_state *s, const char *status) {
    json_t *o = json_pack("{s:s,s:s,s:I,s:s,s:n,s:s,s:O,s:n}", "id", s->id, "object", "response", "created_at",
                          (json_int_t)s->created, "status", status, "error", "model", s->model, "output",
                          s->items, "previous_response_id");
    json_object_update(o, s->echo);
    json_object_set_new(o, "incomplete_details",
                        !strcmp(status, "incomplete") ? json_pack("{s:s}", "reason", "max_output_tokens") : json_null());
    json_object_set_new(o, "usage", !strcmp(status, "in_progress") ? json_null() : usage(s));
    json_t *sp = strcmp(status, "in_progress") ? api_spec_timings(&s->g.st) : NULL;
    if (sp) json_object_set_new(o, "speculative", sp); /* the request's "speculative", what it did */
    return o;
}

static json_t *reasoning_item(const char *id, const char *t, size_t n) {
    return json_pack("{s:s,s:s,s:[],s:[{s:s,s:o}]}", "type", "reasoning", "id", id, "summary", "content", "type",
                     "reasoning_text", "text", api_json_text(t, n));
}

/* lp: the part's logprobs (taken), NULL for none */
static json_t *text_part(const char *t, size_t n, json_t *lp) {
    return json_pack("{s:s,s:o,s:[],s:o}", "type", "output_text", "text", api_json_text(t, n), "annotations",
                     "logprobs", lp ? lp : json_array());
}

/* The logprobs of answer tokens [from, to) when asked for, else NULL. */
static json_t *lp_range(rs_state *s, int from, int to) { return s->lp ? api_answer_logprobs(&s->g, from, to) : NULL; }

static json_t *message_item(const char *id, const char *status, json_t *part) {
    return json_pack("{s:s,s:s,s:s,s:s,s:o}", "type", "message", "id", id, "status", status, "role", "assistant",
                     "content", part ? json_pack("[o]", part) : json_array());
}

static json_t *call_item(const json_t *call, const char *status, bool with_args) {
    char id[48], cid[48];
    api_new_id(id, sizeof id, "fc_");
    api_new_id(cid, sizeof cid, "call_");
    char *args = with_args ? json_dumps(json_object_get(call, "arguments"), JSON_COMPACT) : NULL;
    json_t *o = json_pack("{s:s,s:s,s:s,s:O,s:s,s:s}", "type", "function_call", "id", id, "call_id", cid, "name",
                          json_object_get(call, "name"), "arguments", args ? args : "", "status", status);
    free(args);
    return o;
}

static bool rs_poll(void *state, mu_http_req *r) {
    rs_state *s = state;
    api_job *g = &s->g;
    if (api_job_poll(g, mu_http_req_fd(r))) return false;
    if (g->finish == MU_FINISH_ERROR || g->finish == MU_FINISH_CANCEL) {
        api_job_reply_failed(r, g);
        return true;
    }
    size_t nr, nc;
    const char *rs = api_job_take_reasoning(g, &nr);
    const char *cs = api_job_take_content(g, &nc);
    char id[48];
    if (nr) {
        api_new_id(id, sizeof id, "rs_");
        json_array_append_new(s->items, reasoning_item(id, rs, nr));
    }
    if (nc || !json_array_size(g->tool_calls)) {
        api_new_id(id, sizeof id, "msg_");
        json_array_append_new(s->items, message_item(id, "completed", text_part(cs, nc, lp_range(s, 0, g->n_ctoks))));
    }
    size_t i;
    json_t *c;
    json_array_foreach(g->tool_calls, i, c) json_array_append_new(s->items, call_item(c, "completed", true));
    mu_http_reply_json(r, 200, response_object(s, g->finish == MU_FINISH_LENGTH ? "incomplete" : "completed"));
    return true;
}

static void event(rs_state *s, mu_http_buf *out, const char *type, json_t *data) {
    json_object_set_new(data, "sequence_number", json_integer(s->seq++));
    api_sse_event(out, type, data);
}

/* Closes the open item: its *.done events, and it joins the output. */
static void close_item(rs_state *s, mu_http_buf *out) {
    if (!s->open) return;
    int oi = (int)json_array_size(s->items);
    const mu_http_buf *b = s->open == 1 ? &s->g.reasoning : &s->g.content;
    const char *t = b->p ? b->p + s->item_from : "";
    size_t n = b->n - s->item_from;
    json_t *item;
    if (s->open == 1) {
        event(s, out, "response.reasoning_text.done",
              json_pack("{s:s,s:i,s:i,s:o}", "item_id", s->item_id, "output_index", oi, "content_index", 0, "text",
                        api_json_text(t, n)));
        item = reasoning_item(s->item_id, t, n);
    } else {
        json_t *lp = lp_range(s, s->lp_from, s->lp_sent);
        event(s, out, "response.output_text.done",
              json_pack("{s:s,s:i,s:i,s:o,s:o}", "item_id", s->item_id, "output_index", oi, "content_index", 0, "text",
                        api_json_text(t, n), "logprobs", lp ? json_deep_copy(lp) : json_array()));
        event(s, out, "response.content_part.done",
              json_pack("{s:s,s:i,s:i,s:o}", "item_id", s->item_id, "output_index", oi, "content_index", 0, "part",
                        text_part(t, n, lp ? json_deep_copy(lp) : NULL)));
        item = message_item(s->item_id, "completed", text_part(t, n, lp));
    }
    event(s, out, "response.output_item.done", json_pack("{s:i,s:O}", "output_index", oi, "item", item));
    json_array_append_new(s->items, item);
    s->open = 0;
}

/* Text of kind (1 reasoning, 2 answer) into its item, opening it first. */
static void item_text(rs_state *s, mu_http_buf *out, int kind, const char *t, size_t n) {
    if (!n) return;
    int oi = (int)json_array_size(s->items);
    if (s->open != kind) {
        close_item(s, out);
        oi = (int)json_array_size(s->items);
        const mu_http_buf *b = kind == 1 ? &s->g.reasoning : &s->g.content;
        s->item_from = b->n - n; /* this delta is the end of its buffer */
        api_new_id(s->item_id, sizeof s->item_id, kind == 1 ? "rs_" : "msg_");
        json_t *item = kind == 1 ? json_pack("{s:s,s:s,s:[],s:[]}", "type", "reasoning", "id", s->item_id, "summary",
                                             "content")
                                 : message_item(s->item_id, "in_progress", NULL);
        event(s, out, "response.output_item.added", json_pack("{s:i,s:o}", "output_index", oi, "item", item));
        if (kind == 2) {
            event(s, out, "response.content_part.added",
                  json_pack("{s:s,s:i,s:i,s:o}", "item_id", s->item_id, "output_index", oi, "content_index", 0, "part",
                            text_part("", 0, NULL)));
            s->lp_from = s->lp_sent;
        }
        s->open = kind;
    }
    if (kind == 1)
        event(s, out, "response.reasoning_text.delta",
              json_pack("{s:s,s:i,s:i,s:o}", "item_id", s->item_id, "output_index", oi, "content_index", 0, "delta",
                        api_json_text(t, n)));
    else {
        json_t *lp = lp_range(s, s->lp_sent, s->g.n_ctoks);
        if (s->lp) s->lp_sent = s->g.n_ctoks;
        json_t *d = json_pack("{s:s,s:i,s:i,s:o,s:o}", "item_id", s->item_id, "output_index", oi, "content_index", 0,
                              "delta", api_json_text(t, n), "logprobs", lp ? lp : json_array());
        if (s->tpt) json_object_set_new(d, "timings", api_job_timings(&s->g));
        event(s, out, "response.output_text.delta", d);
    }
}

static int rs_produce(void *state, mu_http_buf *out, int fd) {
    rs_state *s = state;
    api_job *g = &s->g;
    if (s->phase == 2) return 0;
    if (s->phase == 0) {
        s->phase = 1;
        event(s, out, "response.created", json_pack("{s:o}", "response", response_object(s, "in_progress")));
        event(s, out, "response.in_progress", json_pack("{s:o}", "response", response_object(s, "in_progress")));
        return 1;
    }
    bool running = api_job_poll(g, fd);
    if (g->finish == MU_FINISH_CANCEL) return -1;
    for (; g->prog_sent < g->n_prog; g->prog_sent++) { /* return_progress */
        json_t *d = json_pack("{s:o,s:o,s:o}", "response", response_object(s, "in_progress"), "prompt_progress",
                              api_progress_json(&g->prog[g->prog_sent]), "timings",
                              api_progress_timings(&g->prog[g->prog_sent]));
        event(s, out, "response.in_progress", d);
    }
    size_t nr = 0, nc = 0;
    const char *rs = api_job_take_reasoning(g, &nr);
    item_text(s, out, 1, rs, nr);
    const char *cs = api_job_take_content(g, &nc);
    item_text(s, out, 2, cs, nc);
    if (running) return 1;
    s->phase = 2;
    if (g->finish == MU_FINISH_ERROR) {
        event(s, out, "error", json_pack("{s:s,s:s,s:n}", "code", "server_error", "message", g->err, "param"));
        return 1;
    }
    close_item(s, out);
    size_t i;
    json_t *c;
    json_array_foreach(g->tool_calls, i, c) {
        int oi = (int)json_array_size(s->items);
        json_t *item = call_item(c, "in_progress", false);
        const char *iid = json_string_value(json_object_get(item, "id"));
        char *args = json_dumps(json_object_get(c, "arguments"), JSON_COMPACT);
        event(s, out, "response.output_item.added", json_pack("{s:i,s:O}", "output_index", oi, "item", item));
        event(s, out, "response.function_call_arguments.delta",
              json_pack("{s:s,s:i,s:s}", "item_id", iid, "output_index", oi, "delta", args ? args : "{}"));
        event(s, out, "response.function_call_arguments.done",
              json_pack("{s:s,s:i,s:s}", "item_id", iid, "output_index", oi, "arguments", args ? args : "{}"));
        json_object_set_new(item, "arguments", json_string(args ? args : "{}"));
        json_object_set_new(item, "status", json_string("completed"));
        free(args);
        event(s, out, "response.output_item.done", json_pack("{s:i,s:O}", "output_index", oi, "item", item));
        json_array_append_new(s->items, item);
    }
    bool incomplete = g->finish == MU_FINISH_LENGTH;
    json_t *done = json_pack("{s:o}", "response", response_object(s, incomplete ? "incomplete" : "completed"));
    if (s->tpt || g->n_prog) json_object_set_new(done, "timings", api_timings(&g->st)); /* as llama.cpp's */
    event(s, out, incomplete ? "response.incomplete" : "response.completed", done);
    return 1;
}

static void rs_release(void *state) {
    rs_state *s = state;
    api_job_free(&s->g);
    json_decref(s->echo);
    json_decref(s->items);
    free(s);
}

void api_responses(mu_http_req *r, const json_t *body) {
    mu_http_app *a = mu_http_req_app(r);
    mu_err err = {0};
    int rc = mu_jc_check(body, api_schema(mu_http_req_path(r)), &err);
    if (rc) {
        mu_http_reply_status(r, rc, &err);
        return;
    }
    if (!api_model_ok(r, body, "model")) return;
    const json_t *prev = json_object_get(body, "previous_response_id");
    if (prev && !json_is_null(prev)) {
        mu_http_reply_error(r, 400, "field 'previous_response_id': responses are not stored (send the whole input)",
                            "previous_response_id");
        return;
    }
    if (mu_jc_bool(body, "background", false)) {
        mu_http_reply_error(r, 400, "field 'background': not supported (responses are not stored: use stream)",
                            "background");
        return;
    }
    /* tool_choice "required" or a named function: a forced call */
    const json_t *tc = json_object_get(body, "tool_choice");
    const char *names[MU_GEN_MAX_CALLS];
    int n_names = 0;
    if (json_is_object(tc) || (json_is_string(tc) && !strcmp(json_string_value(tc), "required"))) {
        const char *want = json_is_object(tc) ? mu_jc_str(tc, "name", "") : NULL;
        n_names = api_forced_names(json_object_get(body, "tools"), want, names);
        if (!n_names) {
            mu_http_reply_error(r, 400,
                                want ? "field 'tool_choice.name': no tool of that name in 'tools'"
                                     : "field 'tool_choice': 'required' needs at least one tool in 'tools'",
                                "tool_choice");
            return;
        }
    }
    /* text.format: the same shapes as chat's response_format, flattened */
    mu_schema *schema = NULL;
    const json_t *fmt = json_object_get(json_object_get(body, "text"), "format");
    if (fmt && strcmp(mu_jc_str(fmt, "type", "text"), "text")) {
        if (n_names) {
            mu_http_reply_error(r, 400, "field 'tool_choice': a forced tool call cannot be combined with a JSON text.format",
                                "tool_choice");
            return;
        }
        json_t *rf = json_pack("{s:O}", "type", json_object_get(fmt, "type"));
        if (!strcmp(mu_jc_str(fmt, "type", ""), "json_schema")) {
            json_t *js = json_pack("{s:s}", "name", mu_jc_str(fmt, "name", "schema"));
            if (json_object_get(fmt, "schema")) json_object_set(js, "schema", json_object_get(fmt, "schema"));
            json_object_set_new(rf, "json_schema", js);
        }
        json_t *wrap = json_pack("{s:o}", "response_format", rf);
        rc = api_response_schema(r, wrap, "response_format", &schema);
        json_decref(wrap);
        if (rc) return;
    }
    api_images im = {0};
    json_t *msgs = to_template(r, body, &im);
    if (!msgs) {
        api_images_free(&im);
        mu_schema_unref(schema);
        return;
    }
    const json_t *tools_in = json_object_get(body, "tools");
    bool use_tools = json_array_size(tools_in) && !(json_is_string(tc) && !strcmp(json_string_value(tc), "none"));
    json_t *tools = use_tools ? to_tools(tools_in) : NULL;
    const char *effort = mu_jc_str(json_object_get(body, "reasoning"), "effort", NULL);
    if (effort && !strcmp(effort, "minimal")) effort = "low";
    int32_t *ids = NULL;
    int n = 0;
    const mu_mprompt *media = NULL;
    bool ok = api_chat_prompt_media(r, a, msgs, tools, effort, &im, &ids, &n, &media);
    api_images_free(&im);
    json_decref(msgs);
    json_decref(tools);
    if (!ok) {
        mu_schema_unref(schema);
        return;
    }
    mu_gen_req q = {0};
    q.media = media;
    q.chat = true;
    q.schema = schema;
    q.schema_chat = true;
    q.n_predict = (int)mu_jc_int(body, "max_output_tokens", -1);
    q.sp = api_sample_params(a, body, NULL);
    api_spec_params(json_object_get(body, "speculative"), "type", "n_max", "n_min", &q);
    q.call_one_of = n_names ? names : NULL;
    q.n_call_one_of = n_names;
    /* logprobs: asked for by include "message.output_text.logprobs" (OpenAI's
     * switch) or a top_logprobs above 0 */
    bool want_lp = mu_jc_int(body, "top_logprobs", 0) > 0;
    size_t ii;
    const json_t *inc;
    json_array_foreach(json_object_get(body, "include"), ii, inc) want_lp |=
        !strcmp(json_string_value(inc), "message.output_text.logprobs");
    q.logprobs = want_lp;
    q.n_top = want_lp ? (int)mu_jc_int(body, "top_logprobs", 0) : 0;
    /* llama.cpp's return_progress: prompt progress in response.in_progress events (streams) */
    q.progress = mu_jc_bool(body, "return_progress", false) && mu_jc_bool(body, "stream", false);
    rs_state *s = calloc(1, sizeof *s);
    if (!s || !(s->items = json_array())) {
        free(s);
        free(ids);
        mu_mprompt_free((mu_mprompt *)media);
        mu_schema_unref(schema);
        mu_http_reply_error(r, 503, "server: out of memory", NULL);
        return;
    }
    ok = api_job_start(r, &s->g, a, ids, n, &q, NULL);
    mu_schema_unref(schema); /* the job holds its own reference */
    if (!ok) {
        json_decref(s->items);
        free(s);
        return;
    }
    s->a = a;
    s->n_prompt = n;
    s->tpt = mu_jc_bool(body, "timings_per_token", false);
    s->lp = want_lp;
    s->g.want_toks = want_lp;
    s->created = api_unix_now();
    snprintf(s->model, sizeof s->model, "%s", mu_jc_str(body, "model", a->model_id));
    api_new_id(s->id, sizeof s->id, "resp_");
    /* what the response object repeats from the request */
    s->echo = json_pack("{s:o,s:o,s:o,s:b,s:o,s:s,s:b,s:o,s:o,s:o,s:o,s:o}", "instructions",
                        json_object_get(body, "instructions") ? json_incref(json_object_get(body, "instructions"))
                                                              : json_null(),
                        "max_output_tokens",
                        json_object_get(body, "max_output_tokens") ? json_incref(json_object_get(body, "max_output_tokens"))
                                                                   : json_null(),
                        "metadata", json_object_get(body, "metadata") ? json_incref(json_object_get(body, "metadata")) : json_object(),
                        "parallel_tool_calls", mu_jc_bool(body, "parallel_tool_calls", true), "tool_choice",
                        tc ? json_incref((json_t *)tc) : json_string("auto"), "truncation", "disabled", "store", 0, "temperature",
                        json_real(q.sp.temp), "top_p", json_real(q.sp.top_p), "reasoning",
                        json_pack("{s:o,s:n}", "effort", effort ? json_string(effort) : json_null(), "summary"),
                        "tools", tools_in ? json_incref((json_t *)tools_in) : json_array(), "text",
                        json_pack("{s:o}", "format",
                                  fmt ? json_incref((json_t *)fmt) : json_pack("{s:s}", "type", "text")));
    if (mu_jc_bool(body, "stream", false)) {
        mu_http_reply_stream(r, "text/event-stream", rs_produce, rs_release, s);
        return;
    }
    mu_http_reply_later(r, rs_poll, rs_release, s);
}
