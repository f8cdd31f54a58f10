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
#include "jcheck.h"
#include "server.h"

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
    mu_http_server *server;    /* set after start; for /metrics */
    char backend[16];          /* "cpu", "cuda": for /snapshot */
    char kernels[32];          /* the CPU kernel table, for /snapshot */
    double t_start;            /* CLOCK_MONOTONIC seconds at start, for /snapshot */
} mu_http_app;

/* Route table: all three protocols. Ends with a NULL path. */
extern const mu_http_route mu_http_routes[];

/* ---- shared by the adapters ------------------------------------------- */

/* Model id check: NULL/absent is fine; the served id (or "<id>:latest" for
 * Ollama) is fine; anything else replies 404 and returns false. */
bool api_model_ok(mu_http_req *r, const json_t *body, const char *key);

/* Prompt tokens for text: BOS (when the model adds one) + encode(text). */
int api_tokenize_prompt(mu_http_app *a, const char *text, bool parse_special, int32_t **ids, int *n, mu_err *err);

#define API_PIECE_MAX 1024  /* longest token text handled (bytes) */

/* A generated token as the adapters report it. */
#define API_MAX_TOP 20
typedef struct {
    int32_t id;
    float logprob;
    int n_top;
    int32_t top_ids[API_MAX_TOP];
    float top_logprobs[API_MAX_TOP];
} api_tok;

/* The reader of one job: collects its events into what the adapters send
 * (text per channel, tool calls, tokens) and keeps what is not sent yet. */
typedef struct {
    mu_http_app *app;
    mu_job *job;
    mu_http_buf content, reasoning;  /* text so far */
    size_t content_sent, reasoning_sent;
    json_t *tool_calls;      /* [{name, arguments (object)}] */
    int32_t *ids;
    api_tok *toks;           /* when want_toks */
    bool want_toks;
    int n_ids, cap_ids;
    mu_finish finish;        /* MU_FINISH_CTX is reported as MU_FINISH_LENGTH */
    char stop_word[264];
    mu_gen_stats st;
    char err[256];
} api_job;

/* Submits the job (its notify wakes r: mu_http_req_wake): req's stops are taken from the JSON stop field (a
 * string or an array of strings). Owns prompt (frees it). On failure
 * replies (400/429/...) and returns false. */
bool api_job_start(mu_http_req *r, api_job *g, mu_http_app *a, int32_t *prompt, int n_prompt, const mu_gen_req *req,
                   const json_t *stop);
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
const char *api_job_take_reasoning(api_job *g, size_t *n);
void api_job_free(api_job *g);

/* Sampling parameters from a body with the given key names (NULL = not
 * accepted by this protocol); omitted fields take llama.cpp's defaults. */
mu_sample_params api_sample_params(const json_t *o, const char *seed_key);

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

/* Time helpers. */
int64_t api_unix_now(void);
void api_iso_time(char *buf, size_t cap);   /* 2024-01-01T00:00:00.000000Z */

/* llama.cpp-style timings object from job stats. */
json_t *api_timings(const mu_gen_stats *st);

/* Prompt builders; each replies (400/429/...) and returns false on failure. */
bool api_chat_prompt(mu_http_req *r, mu_http_app *a, const json_t *msgs, const json_t *tools, const char *effort,
                     int32_t **ids, int *n);
/* prompt: a string (tokenized with BOS) or an array of token ids (as given).
 * text (optional): the prompt as text, malloc'ed. */
bool api_prompt_ids(mu_http_req *r, mu_http_app *a, const json_t *prompt, int32_t **ids, int *n, char **text);

/* Handlers. */
void api_openai_chat(mu_http_req *r, const json_t *body);
void api_openai_completions(mu_http_req *r, const json_t *body);
void api_openai_models(mu_http_req *r, const json_t *body);
void api_llama_completion(mu_http_req *r, const json_t *body);
void api_llama_tokenize(mu_http_req *r, const json_t *body);
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

/* Request schemas by route path (NULL for routes without a body); used by
 * the handlers, the fuzz harness and the unit tests. */
const jc_field *api_schema(const char *path);

#endif
