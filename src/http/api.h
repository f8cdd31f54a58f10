/* api.h: what the protocol adapters (api_openai.c, api_llamacpp.c,
 * api_ollama.c) share: the application state handed to every handler and
 * the reader of a job's events (api_job.c), which collects what the
 * adapters turn into their protocol's shapes. The route table lives in
 * api.c. */
#ifndef MU_HTTP_API_H
#define MU_HTTP_API_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "../../include/muser_gen.h"
#include "../../include/muser_serve.h"
#include "jcheck.h"
#include "server.h"

/* The server's named sessions (api_sessions.c). */
typedef struct api_sessions api_sessions;
int api_sessions_new(api_sessions **out);
void api_sessions_free(api_sessions *t);

typedef struct api_encoder api_encoder; /* api_encode.c */

typedef struct {
    mu_sched *sched;
    const mu_model *model;
    const mu_model_info *info;
    const mu_tok *tok;         /* the model's tokenizer */
    const char *chat_template; /* the GGUF's template text or NULL */
    const char *model_id;      /* general.name (or the file name) */
    const char *model_path;
    uint64_t model_bytes;
    int64_t model_mtime;
    int n_ctx, n_slots;
    mu_embd_pooling pooling;   /* embeddings (--pooling); MU_EMBD_NONE by default, as llama.cpp */
    const char *aliases[MU_SERVE_MAX_ALIASES]; /* the --alias names, sorted, without duplicates;
                                                  model_id is the first (they live as long as the
                                                  server) */
    int n_aliases;
    const char *gguf_name;     /* with aliases: the GGUF's name, still answered to; else NULL */
    bool any_model;            /* every model name is this model (--any-model) */
    mu_http_server *server;    /* set after start; for /metrics */
    int64_t t_start;           /* when the server started (unix seconds; /metrics Process-Start-Time-Unix) */
    char backend[16];          /* "cpu", "cuda": for /snapshot */
    char kernels[32];          /* the CPU kernel table, for /snapshot */
    double t_start_mono;       /* CLOCK_MONOTONIC seconds at start, for /snapshot */
    int (*prefill)(void *user, mu_gen_req *q, mu_err *err); /* mu_serve_opts.prefill */
    void *prefill_user;
    int (*metrics)(void *user, char *buf, size_t cap);      /* mu_serve_opts.metrics */
    void (*prefill_stats)(void *user, mu_lane_stats *st);    /* mu_serve_opts.prefill_stats */
    void *metrics_user;
    mu_kv_cache *cache;        /* the prefix cache (--cache-bytes, --pack-dir), or NULL */
    char slot_dir[4096];       /* --slot-save-path ("" when none) */
    const mu_kv_ident *kv_id;  /* with slot_dir or pack_dir */
    uint8_t kv_key[32];        /* with slot_dir or pack_dir (wiped at stop) */
    char pack_dir[4096];       /* --pack-dir ("" when none): where sessions persist */
    uint64_t pack_max_bytes;   /* --pack-max-bytes: the store's budget (0: none) */
    api_sessions *sessions;    /* /v1/sessions */
    bool has_seed, has_temp;   /* request defaults (mu_serve_opts) */
    uint32_t seed;
    float temp;
    int n_predict;             /* > 0: the limit of a request without one */
    bool cache_prompt;         /* the default of the cache_prompt field (--cache-prompt) */
    bool no_slots, no_ui, no_metrics;
    const char *tags;          /* comma-separated, or NULL (lives as long as the server) */
    const mu_mmproj *mmproj;   /* the vision projector (--mmproj), or NULL: images are refused */
    api_encoder *encoder;      /* the image encode thread (api_encode.c), with mmproj */
} mu_http_app;

/* Route table: all three protocols. Ends with a NULL path. */
extern const mu_http_route mu_http_routes[];

/* ---- shared by the adapters ------------------------------------------- */

/* Model id check: NULL/absent is fine; the served id (or "<id>:latest" for
 * Ollama) is fine; anything else replies 404 and returns false. */
bool api_model_ok(mu_http_req *r, const json_t *body, const char *key);
/* True when name is the served id or an alias (Ollama: also "<name>:latest"),
 * or any name with --any-model. */
bool api_model_name_ok(mu_http_app *a, const char *name, bool ollama);

/* Prompt tokens for text: BOS (when the model adds one) + encode(text). */
int api_tokenize_prompt(mu_http_app *a, const char *text, bool parse_special, int32_t **ids, int *n, mu_err *err);

#define API_PIECE_MAX 1024  /* longest token text handled (bytes) */

/* A generated token as the adapters report it. */
#define API_MAX_TOP 20
typedef struct {
    int32_t id;
    float logprob;
    float prob;              /* post_sampling_probs: the chain's probability (mu_gen_token.prob) */
    int n_top;
    int32_t top_ids[API_MAX_TOP];
    float top_logprobs[API_MAX_TOP];
    float top_probs[API_MAX_TOP];
} api_tok;

/* One PROGRESS event of a job: llama.cpp's prompt_progress. */
typedef struct {
    int total, cache, processed;
    double ms;                /* since the first progress event */
} api_progress;

/* The reader of one job: collects its events into what the adapters send
 * (text per channel, tool calls, tokens) and keeps what is not sent yet. */
typedef struct {
    mu_http_app *app;
    mu_job *job;
    mu_http_buf content, reasoning;  /* text so far */
    size_t content_sent, reasoning_sent;
    json_t *tool_calls;      /* [{name, arguments (object)}] */
    int32_t *ids;
    size_t *cend;            /* per token: where its text ends in content (a token's events come
                                together, so this is the answer text it released) */
    api_tok *toks;           /* when want_toks */
    bool want_toks;
    int n_ids, cap_ids;
    int *ctoks;              /* chat with logprobs: indexes of the answer's tokens (MU_EV_CONTENT_TOKEN) */
    int n_ctoks, cap_ctoks;
    mu_finish finish;        /* MU_FINISH_CTX is reported as MU_FINISH_LENGTH */
    bool ctx_full;           /* it ended because the context was full (llama.cpp's "truncated") */
    char stop_word[264];
    mu_gen_stats st;
    double t_start, t_first;  /* monotonic ms: submitted, first token (0: none yet) */
    api_progress *prog;       /* PROGRESS events (mu_gen_req.progress) in order */
    int n_prog, cap_prog, prog_sent;
    char err[256];
} api_job;

/* Submits the job (its notify wakes r: mu_http_req_wake): req's stops are taken from the JSON stop field (a
 * string or an array of strings). Owns prompt (frees it) and req->media (an
 * image prompt: one choice only; the job frees it, mu_gen_req.media_take). On failure
 * replies (400/429/...) and returns false. */
bool api_job_start(mu_http_req *r, api_job *g, mu_http_app *a, int32_t *prompt, int n_prompt, const mu_gen_req *req,
                   const json_t *stop);
/* 400 for a prompt that does not fit: llama.cpp's exceed_context_size_error
 * (with n_prompt_tokens and n_ctx), Ollama's plain error. */
void api_reply_exceed(mu_http_req *r, int n_prompt, int n_ctx);
/* The n choices of one request: g[0..n) each get a job; choice k samples
 * with seed + k; the scheduler evaluates the prompt once. */
#define API_MAX_CHOICES MU_GEN_MAX_CHOICES
bool api_job_start_n(mu_http_req *r, api_job *g, int n, mu_http_app *a, int32_t *prompt, int n_prompt,
                     const mu_gen_req *req, const json_t *stop);
/* Collects the events that are ready, without waiting; returns true while
 * running, false when finished (g->finish set). Cancels on client hang-up
 * (fd polled). The job's notify (set by api_job_start_n) wakes the request
 * when more is ready. */
bool api_job_poll(api_job *g, int fd);
/* The reply of a job that ended with an error (500 with its message) or a
 * cancel (499). */
void api_job_reply_failed(mu_http_req *r, const api_job *g);
/* Structured output requested by body[key] ("response_format" for OpenAI,
 * "json_schema" for llama.cpp, "format" for Ollama): *out = NULL for free
 * text, else a compiled schema (the caller unrefs it). -1 after replying
 * 400 (unsupported keyword, named with its path) or 503. */
int api_response_schema(mu_http_req *r, const json_t *body, const char *key, mu_schema **out);
/* New text since the last call; *n bytes at the returned pointer. */
const char *api_job_take_content(api_job *g, size_t *n);
/* The content not taken yet up to the end of token i's text (g->cend[i]). */
const char *api_job_take_content_upto(api_job *g, int i, size_t *n);
const char *api_job_take_reasoning(api_job *g, size_t *n);
void api_job_free(api_job *g);

/* Sampling parameters from a body (or Ollama's options), under llama.cpp's
 * server names (temperature, top_k, ..., repeat_penalty, dry_*, xtc_*,
 * mirostat*, logit_bias in its array and object forms); seed_key NULL: no
 * seed accepted. Omitted fields take llama.cpp's defaults. The body was
 * checked against the route's schema, which decides which of the names a
 * protocol accepts. The logit biases and DRY breakers it points at live in
 * thread-local storage (and the body) until the next call on this thread:
 * submit the job before that. */
mu_sample_params api_sample_params(mu_http_app *a, const json_t *o, const char *seed_key);
/* A request's generation limit: n (< 0: none) or the server's --n-predict
 * when the request sets none. */
int api_n_predict(const mu_http_app *a, int n);
/* llama.cpp's ignore_eos: the end-of-generation tokens (eos, eot, eom) get
 * a logit bias of -inf, after p's own biases (same storage rules). */
void api_ban_eog(mu_http_app *a, mu_sample_params *p);

/* Token text (control tokens as their text; see mu_tok_piece): the byte
 * count written, 0 for an id out of range or a piece longer than cap. */
int api_piece(mu_http_app *a, int32_t id, char *buf, size_t cap);
/* Control and unknown tokens, hidden from plain text. */
bool api_is_special(mu_http_app *a, int32_t id);
/* The model's chat template over messages (OpenAI shape) and tools (may be
 * NULL); *out is malloc'ed. */
int api_render(mu_http_app *a, const json_t *msgs, const json_t *tools, const char *reasoning, bool add_gen,
               char **out, mu_err *err);

/* A token's text as a JSON string (invalid UTF-8 replaced by U+FFFD). */
json_t *api_token_str(mu_http_app *a, int32_t id);
json_t *api_token_bytes(mu_http_app *a, int32_t id);
/* Valid-UTF-8 JSON string from bytes (replacing invalid sequences). */
json_t *api_json_text(const char *s, size_t n);
/* Length of the longest prefix of s[0..n) that ends on a UTF-8 boundary. */
size_t api_utf8_complete(const char *s, size_t n);

/* One named server-sent event of Anthropic's and the Responses API's
 * streams: "event: NAME", then "data: " the JSON object {"type": NAME} and
 * data's members after it, then a blank line. Takes data. */
void api_sse_event(mu_http_buf *out, const char *name, json_t *data);
/* The functions a forced tool call may name (Anthropic tool_choice any/tool,
 * Responses required/function), from tools whose entries carry "name": all
 * of them (want NULL) or those named want; at most MU_GEN_MAX_CALLS into
 * names (borrowed from tools). Returns the count. */
int api_forced_names(const json_t *tools, const char *want, const char **names);

/* Time helpers. */
int64_t api_unix_now(void);
/* A response id: prefix, the time and a process-wide counter in hex. */
void api_new_id(char *buf, size_t cap, const char *prefix);
/* The text of a message content: a string, or the "text" of each part of
 * an array of parts (Anthropic blocks, OpenAI Responses parts). */
void api_content_text(const json_t *c, mu_http_buf *b);
void api_iso_time(char *buf, size_t cap);   /* 2024-01-01T00:00:00.000000Z */

/* OpenAI's logprobs entries ({token, logprob, bytes, top_logprobs}) of the
 * answer tokens [from, to) of a chat job with logprobs (g->ctoks): the
 * tokens whose texts join to the answer (chat, Responses). */
json_t *api_answer_logprobs(api_job *g, int from, int to);

/* The timings of a job: its stats once it ended; while it runs, measured
 * by the reader (tokens so far; prompt time from submit to the first
 * token, queue wait included). */
json_t *api_job_timings(const api_job *g);
/* llama.cpp's prompt_progress object and the timings at that point. */
json_t *api_progress_json(const api_progress *p);
json_t *api_progress_timings(const api_progress *p);
/* llama.cpp-style timings object from job stats. */
json_t *api_timings(const mu_gen_stats *st);
/* The speculative-decoding part of api_timings alone (draft_n,
 * draft_n_accepted, spec_steps, spec_accepted_per_step), for the protocols
 * whose responses carry no llama.cpp timings; NULL when the job drafted
 * nothing. */
json_t *api_spec_timings(const mu_gen_stats *st);

/* Prompt builders; each replies (400/429/...) and returns false on failure. */
bool api_chat_prompt(mu_http_req *r, mu_http_app *a, const json_t *msgs, const json_t *tools, const char *effort,
                     int32_t **ids, int *n);
/* OpenAI messages -> the plain shape the template expects (text parts
 * joined, developer as system, tool-call arguments as objects); new ref. */
json_t *api_normalize_messages(const json_t *msgs);
/* The api_chat_prompt_ex mode of a chat body, by llama.cpp's rules (a last
 * assistant message is continued; add_generation_prompt,
 * continue_final_message); -1 after replying 400. */
int api_chat_mode(mu_http_req *r, const json_t *body);
/* api_chat_prompt with a mode: API_PROMPT_GEN (the generation prompt
 * after the messages), API_PROMPT_NOGEN (none), API_PROMPT_PREFILL (the
 * last message, an assistant's, is continued: the prompt ends with its
 * text). text_out (may be NULL): the rendered prompt, malloc'ed. */
enum { API_PROMPT_GEN, API_PROMPT_NOGEN, API_PROMPT_PREFILL };
bool api_chat_prompt_ex(mu_http_req *r, mu_http_app *a, const json_t *msgs, const json_t *tools, const char *effort,
                        int mode, int32_t **ids, int *n, char **text_out);
/* prompt: a string (tokenized with BOS), an array of token ids (as given),
 * or an array mixing strings and ids (llama.cpp's tokenize_mixed: BOS only
 * when a string comes first). text (optional): the prompt as text,
 * malloc'ed. field names the field in error messages. */
bool api_prompt_tokens(mu_http_req *r, mu_http_app *a, const json_t *prompt, const char *field, int32_t **ids,
                       int *n, char **text);
/* api_prompt_tokens for the field "prompt". */
bool api_prompt_ids(mu_http_req *r, mu_http_app *a, const json_t *prompt, int32_t **ids, int *n, char **text);

/* The prompts of a completion request, as llama.cpp's server splits them:
 * a string, or an array holding any token id (ids, or ids mixed with
 * strings), is one prompt; an array of strings and arrays is several
 * (each a string, ids, or a mix). Fills out[] (borrowed from prompt) and
 * returns the count, or 0 after replying 400 (more than max). */
int api_prompt_list(mu_http_req *r, const json_t *prompt, const json_t **out, int max);
/* llama.cpp's extensions every generation route accepts (LLAMA_EXTENSIONS
 * in api.c): replies 400 and returns false for what muser does not do
 * (post_sampling_probs true); sets keep_prefix from cache_prompt. */
bool api_extensions(mu_http_req *r, const json_t *body, mu_gen_req *q);
/* llama.cpp's grammar_lazy, grammar_triggers (a one-token word written as
 * the token trigger it became) and preserved_tokens (ids, ascending) of a
 * request api_extensions accepted, set in its settings object. */
void api_lazy_settings(mu_http_app *a, const json_t *body, json_t *settings);
/* Speculative decoding of one request from object o (may be NULL) under
 * the protocol's key names (docs/api.md): type none|ngram|dflash (llama.cpp's
 * ngram-cache and draft-dflash too), the most and least drafted tokens. */
void api_spec_params(const json_t *o, const char *k_type, const char *k_max, const char *k_min, mu_gen_req *q);

/* A request's settings in llama.cpp's shape and order (its
 * generation_settings; /props and /slots params). */
json_t *api_params_json(mu_http_app *a, const mu_gen_req *q, const json_t *stop, bool stream, bool timings_per_token);

/* llama.cpp's /completion result object of a finished job (also
 * OpenAI's __verbose); settings is referenced, not taken. */
json_t *api_llama_result(mu_http_app *a, api_job *g, int index, const char *content, size_t n, const char *prompt,
                         json_t *settings);

/* ---- images (api_media.c) ----------------------------------------------- */

/* The images of one request: encoded file bytes, base64-decoded (owned). */
typedef struct {
    unsigned char *data;
    size_t size;
} api_image;
typedef struct {
    api_image *v;
    int n, cap;
} api_images;
#define API_MAX_IMAGES 64
void api_images_free(api_images *im);
/* Standard base64 (whitespace skipped, padding optional but only at the
 * end): *out malloc'ed. MU_E_ARG with *bad_at the offset of the offending
 * character (n when the text ends mid-group), MU_E_NOMEM. */
int api_base64_decode(const char *s, size_t n, unsigned char **out, size_t *out_n, size_t *bad_at);
/* Appends one image given as base64, or with url as an image URL: a
 * data:image/...;base64, URL or bare base64 (llama.cpp's image_url.url);
 * http(s) and file URLs are refused (never fetched). On failure msg holds
 * the one-line reply ("field '<field>': ...") and a MU_E_* is returned. */
int api_image_add(api_images *im, const char *s, size_t n, bool url, const char *field, char *msg, size_t cap);
/* OpenAI chat messages: the image_url parts' images, in order. With at
 * least one, *msgs_out is a copy of msgs whose part arrays are flattened as
 * llama.cpp flattens them (text parts joined by '\n', none next to an image,
 * each image as MU_MEDIA_MARKER); otherwise NULL. Replies 400 and returns
 * false for a bad part. */
bool api_openai_images(mu_http_req *r, const json_t *msgs, json_t **msgs_out, api_images *im);
/* An array of base64 strings (Ollama's images, llama.cpp's
 * multimodal_data) named field; replies 400 and returns false on a bad one. */
bool api_b64_images(mu_http_req *r, const json_t *arr, const char *field, api_images *im);
/* The image_url parts of OpenAI chat messages (before
 * api_normalize_messages drops them): api_openai_images, then
 * api_images_gate; false after replying (nothing left to free). With
 * images, *flat holds the messages to render (markers in place of them). */
bool api_chat_images(mu_http_req *r, mu_http_app *a, const json_t *msgs, json_t **flat, api_images *im);
/* llama.cpp's JSON prompt with images ({prompt_string, multimodal_data}
 * with at least one): *has is set; the images are read, their count checked
 * against prompt_string's markers and made into an image prompt
 * (api_media_prompt). *has false: not such a prompt (the text path goes on).
 * False after replying. field names the prompt ("prompt", "prompt[1]"). */
bool api_prompt_media(mu_http_req *r, mu_http_app *a, const json_t *prompt, const char *field, bool *has,
                      int32_t **ids, int *n, const mu_mprompt **media);
/* api_chat_prompt for a request whose messages hold one MU_MEDIA_MARKER
 * per image of im (Anthropic image blocks, Responses input_image parts):
 * without images the text prompt (*media NULL); with images the gate
 * (--mmproj) and the image prompt (api_media_prompt). False after replying. */
bool api_chat_prompt_media(mu_http_req *r, mu_http_app *a, const json_t *msgs, const json_t *tools, const char *effort,
                           const api_images *im, int32_t **ids, int *n, const mu_mprompt **media);
/* One image of a message (s[0..n): base64, or with url a data URL, as
 * api_image_add): it joins im and its marker joins text. False after
 * replying 400 naming field (503 out of memory). */
bool api_image_part(mu_http_req *r, api_images *im, const char *s, size_t n, bool url, const char *field,
                    mu_http_buf *text);
/* How many MU_MEDIA_MARKERs s holds. */
int api_count_markers(const char *s);
/* True when the request has no images or the server has a projector;
 * otherwise replies 400 naming --mmproj and returns false. */
bool api_images_gate(mu_http_req *r, mu_http_app *a, const api_images *im);
/* text (one MU_MEDIA_MARKER per image of im) as an image prompt
 * (mu_mprompt_new): *ids a malloc'ed copy of its ids, *media the prompt for
 * mu_gen_req.media (api_job_start takes it). False after replying (400
 * for an image that does not decode, naming why), or, with the encode
 * thread, while the request waits for it (the handler then frees what it
 * holds and returns without replying; it runs again when the encode is
 * done, api_encode.c). Without the encode thread it encodes here. */
bool api_media_prompt(mu_http_req *r, mu_http_app *a, const char *text, const api_images *im, int32_t **ids,
                      int *n, const mu_mprompt **media);
/* The encode thread (api_encode.c): started with the server when it has a
 * projector, stopped after the server (it finishes the encode under way). */
int api_encoder_start(mu_http_app *a, mu_err *err);
void api_encoder_stop(mu_http_app *a);
/* The k-th image prompt of this handler run: 1 with *mp (an owner's hold)
 * when its encode is done, 0 after queueing it (the request waits,
 * mu_http_reply_rerun), -1 after replying (the encode's error, or 503). */
int api_encode_take(mu_http_req *r, mu_http_app *a, const char *text, const api_images *im, mu_mprompt **mp);

/* Handlers. */
void api_openai_chat(mu_http_req *r, const json_t *body);
void api_openai_completions(mu_http_req *r, const json_t *body);
void api_openai_chat_tokens(mu_http_req *r, const json_t *body);   /* /chat/completions/input_tokens */
void api_llama_rerank(mu_http_req *r, const json_t *body);
void api_llama_props_set(mu_http_req *r, const json_t *body);     /* POST /props */
void api_llama_lora_list(mu_http_req *r, const json_t *body);     /* GET /lora-adapters */
void api_openai_models(mu_http_req *r, const json_t *body);
void api_openai_model(mu_http_req *r, const json_t *body);   /* GET /v1/models/{id} */
void api_llama_completion(mu_http_req *r, const json_t *body);
void api_llama_tokenize(mu_http_req *r, const json_t *body);
void api_llama_infill(mu_http_req *r, const json_t *body);
void api_llama_detokenize(mu_http_req *r, const json_t *body);
void api_llama_apply_template(mu_http_req *r, const json_t *body);
void api_llama_health(mu_http_req *r, const json_t *body);
void api_llama_props(mu_http_req *r, const json_t *body);
void api_llama_slots(mu_http_req *r, const json_t *body);
void api_llama_metrics(mu_http_req *r, const json_t *body);
void api_ollama_generate(mu_http_req *r, const json_t *body);
void api_ollama_chat(mu_http_req *r, const json_t *body);
void api_ollama_tags(mu_http_req *r, const json_t *body);
void api_ollama_show(mu_http_req *r, const json_t *body);
void api_ollama_version(mu_http_req *r, const json_t *body);
void api_ollama_ps(mu_http_req *r, const json_t *body);
/* Anthropic Messages (api_anthropic.c) */
void api_anthropic_messages(mu_http_req *r, const json_t *body);
void api_anthropic_count_tokens(mu_http_req *r, const json_t *body);
/* OpenAI Responses (api_responses.c) */
void api_responses(mu_http_req *r, const json_t *body);
/* GET /: what this server is and serves (api.c) */
/* /v1/embeddings, /embedding, /embeddings, /api/embed, /api/embeddings (api_embed.c) */
void api_embeddings(mu_http_req *r, const json_t *body);

/* Request schemas by route path (NULL for routes without a body); used by
 * the handlers, the fuzz harness and the unit tests. */
const jc_field *api_schema(const char *path);

/* /v1/sessions: GET lists, POST creates; /v1/sessions/{id}: GET, DELETE,
 * POST .../continue|save|restore (api_sessions.c) */
void api_sessions_root(mu_http_req *r, const json_t *body);
/* Enforces --pack-max-bytes on the pack store (keep: a pack name never
 * removed, or NULL); counted for /metrics. */
void api_sessions_budget(mu_http_app *a, const char *keep);
void api_sessions_store_stats(mu_http_app *a, uint64_t *n_evicted, uint64_t *bytes_evicted, uint64_t *store_bytes);
void api_sessions_item(mu_http_req *r, const json_t *body);

/* POST /slots/{id}?action=save|restore|erase (api_slots.c) */
void api_slots_action(mu_http_req *r, const json_t *body);

#endif
