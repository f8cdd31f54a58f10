/* api.c: the route table and every route's request schema.
 * Owns: which paths exist, under which protocol, with which method, and the
 * exact set of fields each body may carry (types, ranges, nesting).
 * docs/api.md mirrors these tables (by hand: no test compares the two);
 * tests/unit/test_http_json.c checks the validation of every route.
 * Design: fields a protocol defines but muser does not implement are still
 * listed, restricted to their neutral value, with a note, so a client that
 * sends the default works and one that asks for the feature gets a 400
 * saying why instead of being silently ignored. */
#include "api.h"
#include "dash.h"

#include <string.h>

#define END {0}
#define BIG 1e15
#define F_(n, t, ...) {.name = n, .types = (t), __VA_ARGS__}
#define RANGE(l, h) .has_range = true, .lo = (l), .hi = (h)

static const char *const roles_openai[] = {"system", "developer", "user", "assistant", "tool",
                                           "function" /* the deprecated functions API's result */, NULL};
static const char *const roles_ollama[] = {"system", "user", "assistant", "tool", NULL};
static const char *const part_types[] = {"text", "image_url", NULL};
static const char *const image_details[] = {"auto", "low", "high", NULL};
static const char *const function_only[] = {"function", NULL};
static const char *const tool_choice_modes[] = {"none", "auto", "required", NULL};
static const char *const effort[] = {"low", "medium", "high", "xhigh", NULL};
static const char *const resp_types[] = {"text", "json_object", "json_schema", NULL};

static const jc_field int_tok_elem = F_(NULL, JC_INT, RANGE(0, 2147483647));
static const jc_field stop_elem = F_(NULL, JC_STR, .max_len = 256);
/* a prompt: a string, token ids, or both mixed; a batch: an array of those */
static const jc_field mixed_elem = F_(NULL, JC_INT | JC_STR, RANGE(0, 2147483647), .max_len = 1048576);
/* an image as base64 or an image URL: up to 64 MiB of text (the body limit,
   --max-body-mb, is the tighter bound) */
#define IMAGE_TEXT_MAX (64u << 20)
static const jc_field b64_image_elem = F_(NULL, JC_STR, .max_len = IMAGE_TEXT_MAX);
/* llama.cpp's JSON prompt: {prompt_string, multimodal_data}: base64 images,
   one "<__media__>" in prompt_string for each */
static const jc_field prompt_obj_fields[] = {
    F_("prompt_string", JC_STR, .required = true, .max_len = 1048576),
    F_("multimodal_data", JC_ARR | JC_NULL, .elem = &b64_image_elem, .max_len = 64),
    END,
};
static const jc_field prompt_elem = F_(NULL, JC_INT | JC_STR | JC_ARR | JC_OBJ, RANGE(0, 2147483647), .elem = &mixed_elem,
                                       .fields = prompt_obj_fields, .max_len = 1048576);

/* OpenAI messages */
/* an image part: a data URL or bare base64 (remote URLs are refused by
   api_media.c); detail has no effect (the projector's own size rule) */
static const jc_field image_url_fields[] = {
    F_("url", JC_STR, .required = true, .max_len = IMAGE_TEXT_MAX),
    F_("detail", JC_STR, .one_of = image_details),
    END,
};
static const jc_field part_fields[] = {
    F_("type", JC_STR, .required = true, .one_of = part_types, .note = " (text and image_url parts are supported)"),
    F_("text", JC_STR), /* required for text parts (api_media.c) */
    F_("image_url", JC_OBJ, .fields = image_url_fields),
    END,
};
static const jc_field part_elem = F_(NULL, JC_OBJ, .fields = part_fields);
static const jc_field fn_call_fields[] = {
    F_("name", JC_STR, .required = true, .max_len = 256),
    F_("arguments", JC_STR, .required = true),
    END,
};
static const jc_field tool_call_fields[] = {
    F_("id", JC_STR, .max_len = 256),
    F_("type", JC_STR, .one_of = function_only),
    F_("function", JC_OBJ, .required = true, .fields = fn_call_fields),
    F_("index", JC_INT, RANGE(0, 1024)),
    END,
};
static const jc_field tool_call_elem = F_(NULL, JC_OBJ, .fields = tool_call_fields);
static const jc_field msg_fields[] = {
    F_("role", JC_STR, .required = true, .one_of = roles_openai),
    F_("content", JC_STR | JC_ARR | JC_NULL, .elem = &part_elem),
    F_("name", JC_STR, .max_len = 256),
    F_("tool_calls", JC_ARR | JC_NULL, .elem = &tool_call_elem, .max_len = 128),
    F_("tool_call_id", JC_STR, .max_len = 256),
    F_("reasoning_content", JC_STR | JC_NULL),
    F_("refusal", JC_NULL),
    /* what an earlier answer's message object carries when a client sends
       it back: annotations have no effect; no audio is ever answered */
    F_("annotations", JC_ARR | JC_NULL),
    F_("audio", JC_NULL, .note = " (audio is not supported)"),
    F_("function_call", JC_OBJ | JC_NULL, .fields = fn_call_fields), /* the deprecated functions API's call */
    END,
};
static const jc_field msg_elem = F_(NULL, JC_OBJ, .fields = msg_fields);

static const jc_field fn_def_fields[] = {
    F_("name", JC_STR, .required = true, .min_len = 1, .max_len = 256),
    F_("description", JC_STR),
    F_("parameters", JC_OBJ),
    F_("strict", JC_BOOL | JC_NULL),
    END,
};
static const jc_field tool_fields[] = {
    F_("type", JC_STR, .required = true, .one_of = function_only),
    F_("function", JC_OBJ, .required = true, .fields = fn_def_fields),
    END,
};
static const jc_field tool_elem = F_(NULL, JC_OBJ, .fields = tool_fields);
static const jc_field fn_def_elem = F_(NULL, JC_OBJ, .fields = fn_def_fields);
static const char *const fn_call_modes[] = {"none", "auto", NULL};
static const jc_field tc_fn_fields[] = {F_("name", JC_STR, .required = true), END};
static const jc_field tool_choice_fields[] = {
    F_("type", JC_STR, .required = true, .one_of = function_only),
    F_("function", JC_OBJ, .required = true, .fields = tc_fn_fields),
    END,
};
static const jc_field stream_opt_fields[] = {F_("include_usage", JC_BOOL | JC_NULL),
                                             F_("include_obfuscation", JC_BOOL | JC_NULL), /* no effect */ END};
static const char *const service_tiers[] = {"auto", "default", "flex", "scale", "priority", NULL};
static const char *const text_only[] = {"text", NULL};
static const jc_field modality_elem = F_(NULL, JC_STR, .one_of = text_only, .note = " (text output only)");
static const char *const verbosities[] = {"low", "medium", "high", NULL};
static const char *const content_only[] = {"content", NULL};
static const jc_field prediction_fields[] = {
    F_("type", JC_STR, .required = true, .one_of = content_only),
    F_("content", JC_STR | JC_ARR, .required = true, .elem = &part_elem),
    END,
};
static const jc_field response_field_elem = F_(NULL, JC_STR, .max_len = 256);

/* Fields OpenAI defines that change nothing here (docs/api.md, "Accepted
 * without effect"), and llama.cpp's extensions its server reads on every
 * generation route (docs/api.md says what each does in muser). */
#define OPENAI_ACCEPTED                                                                                        \
    F_("store", JC_BOOL | JC_NULL), F_("metadata", JC_OBJ | JC_NULL),                                          \
        F_("service_tier", JC_STR | JC_NULL, .one_of = service_tiers)
/* speculative decoding per request (docs/api.md): llama.cpp's flat names
 * on its routes and the OpenAI ones, an object on Anthropic's and the
 * Responses API, options on Ollama's */
static const char *const spec_types[] = {"none", "ngram", "ngram-cache", "dflash", "draft-dflash", NULL};
/* p_min (llama.cpp's minimum draft probability) is accepted without
 * effect: muser's drafts carry no probability it uses (docs/api.md) */
#define SPEC_FIELDS(T, MAX, MIN, PMIN)                                                                         \
    F_(T, JC_STR, .one_of = spec_types), F_(MAX, JC_INT, RANGE(0, MU_SPEC_DRAFT_MAX)),                        \
        F_(MIN, JC_INT, RANGE(0, MU_SPEC_DRAFT_MAX)), F_(PMIN, JC_NUM, RANGE(0, 1))
static const jc_field spec_obj_fields[] = {SPEC_FIELDS("type", "n_max", "n_min", "p_min"), END};
#define LLAMA_EXTENSIONS                                                                                       \
    SPEC_FIELDS("speculative.type", "speculative.n_max", "speculative.n_min", "speculative.p_min"),            \
    F_("cache_prompt", JC_BOOL), F_("timings_per_token", JC_BOOL), F_("return_progress", JC_BOOL),             \
        F_("post_sampling_probs", JC_BOOL, .one_of = NULL),                                                    \
        F_("grammar", JC_STR, .max_len = MU_GRAMMAR_MAX_TEXT_BYTES),                                          \
        /* llama.cpp's lazy grammars (api_triggers in api_job.c) */                                           \
        F_("grammar_lazy", JC_BOOL), F_("grammar_triggers", JC_ARR, .max_len = 1024),                         \
        F_("preserved_tokens", JC_ARR, .elem = &stop_elem, .max_len = 1024),                                   \
        F_("backend_sampling", JC_BOOL), /* no effect: one sampler, on the CPU, either way */                  \
        F_("id_slot", JC_INT, RANGE(-1, MU_SCHED_MAX_SLOTS - 1)),                                            \
        /* the context shift's (muser serve --context-shift; no effect without it, as in llama.cpp) */         \
        F_("n_keep", JC_INT, RANGE(-1, 1 << 24)), F_("n_discard", JC_INT, RANGE(0, 1 << 24))

static const jc_field json_schema_fields[] = {
    F_("name", JC_STR, .min_len = 1, .max_len = 64), /* OpenAI requires it; llama.cpp does not */
    F_("description", JC_STR),
    F_("schema", JC_OBJ),   /* compiled by jsonc.c, which names unsupported keywords */
    F_("strict", JC_BOOL | JC_NULL),
    END,
};
static const jc_field resp_format_fields[] = {
    F_("type", JC_STR, .required = true, .one_of = resp_types),
    F_("json_schema", JC_OBJ, .fields = json_schema_fields),
    F_("schema", JC_OBJ), /* llama.cpp's: {"type": "json_object", "schema": {...}} */
    END,
};

/* llama.cpp's sampler fields (its server reads them on every completion
 * route, /v1 included); N is JC_NULL where null means "default" */
static const jc_field bias_pair_elem = F_(NULL, JC_INT | JC_NUM | JC_STR | JC_BOOL, .max_len = 1024);
static const jc_field bias_elem = F_(NULL, JC_ARR, .elem = &bias_pair_elem, .min_len = 2, .max_len = 2);
static const jc_field breaker_elem = F_(NULL, JC_STR, .max_len = 1024);
#define LLAMA_SAMPLER(N)                                                                                      \
    F_("repeat_penalty", JC_NUM | (N), RANGE(0, BIG)), F_("repeat_last_n", JC_INT | (N), RANGE(-1, 2147483647)), \
        F_("presence_penalty", JC_NUM | (N), RANGE(-BIG, BIG)),                                               \
        F_("frequency_penalty", JC_NUM | (N), RANGE(-BIG, BIG)), F_("typical_p", JC_NUM | (N), RANGE(-BIG, BIG)), \
        F_("top_n_sigma", JC_NUM | (N), RANGE(-BIG, BIG)), F_("xtc_probability", JC_NUM | (N), RANGE(0, 1)),    \
        F_("xtc_threshold", JC_NUM | (N), RANGE(0, 1)), F_("dynatemp_range", JC_NUM | (N), RANGE(0, BIG)),      \
        F_("dynatemp_exponent", JC_NUM | (N), RANGE(-BIG, BIG)),                                              \
        F_("dry_multiplier", JC_NUM | (N), RANGE(0, BIG)), F_("dry_base", JC_NUM | (N), RANGE(-BIG, BIG)),      \
        F_("dry_allowed_length", JC_INT | (N), RANGE(0, 2147483647)),                                         \
        F_("dry_penalty_last_n", JC_INT | (N), RANGE(-1, 2147483647)),                                        \
        F_("dry_sequence_breakers", JC_ARR | (N), .elem = &breaker_elem, .min_len = 1, .max_len = 64),        \
        F_("mirostat", JC_INT | (N), RANGE(0, 2)), F_("mirostat_tau", JC_NUM | (N), RANGE(-BIG, BIG)),          \
        F_("mirostat_eta", JC_NUM | (N), RANGE(-BIG, BIG)), F_("min_keep", JC_INT | (N), RANGE(0, 1048576)),     \
        F_("logit_bias", JC_ARR | JC_OBJ | (N), .elem = &bias_elem, .max_len = 1024)

#define OPENAI_SAMPLING                                                                                   \
    F_("model", JC_STR | JC_NULL, .max_len = 256), F_("stream", JC_BOOL | JC_NULL),                      \
        F_("stream_options", JC_OBJ | JC_NULL, .fields = stream_opt_fields),                              \
        F_("max_tokens", JC_INT | JC_NULL, RANGE(1, 1048576)),                                           \
        F_("temperature", JC_NUM | JC_NULL, RANGE(0, 2)), F_("top_p", JC_NUM | JC_NULL, RANGE(0, 1)),     \
        F_("top_k", JC_INT | JC_NULL, RANGE(0, 1000000)), F_("min_p", JC_NUM | JC_NULL, RANGE(0, 1)),     \
        F_("seed", JC_INT | JC_NULL, RANGE(-1, 9007199254740991.0)),                                     \
        F_("stop", JC_STR | JC_ARR | JC_NULL, .elem = &stop_elem, .max_len = MU_GEN_MAX_STOPS),           \
        F_("n", JC_INT | JC_NULL, RANGE(1, API_MAX_CHOICES)),                                             \
        LLAMA_SAMPLER(JC_NULL), F_("user", JC_STR, .max_len = 256)

static const jc_field openai_chat[] = {
    OPENAI_SAMPLING,
    F_("messages", JC_ARR, .required = true, .min_len = 1, .elem = &msg_elem, .max_len = 4096),
    F_("max_completion_tokens", JC_INT | JC_NULL, RANGE(1, 1048576)),
    F_("logprobs", JC_BOOL | JC_NULL),
    F_("top_logprobs", JC_INT | JC_NULL, RANGE(0, 20)),
    F_("tools", JC_ARR | JC_NULL, .elem = &tool_elem, .max_len = 128),
    F_("tool_choice", JC_STR | JC_OBJ | JC_NULL, .one_of = tool_choice_modes, .fields = tool_choice_fields),
    F_("parallel_tool_calls", JC_BOOL | JC_NULL),
    F_("response_format", JC_OBJ | JC_NULL, .fields = resp_format_fields),
    F_("reasoning_effort", JC_STR | JC_NULL, .one_of = effort),
    OPENAI_ACCEPTED,
    /* OpenAI's, with no effect here: a predicted output (a speed hint),
       verbosity, the cache key (the prompt cache is automatic), the user's
       safety id; text is the only output modality */
    F_("prediction", JC_OBJ | JC_NULL, .fields = prediction_fields),
    F_("verbosity", JC_STR | JC_NULL, .one_of = verbosities),
    F_("prompt_cache_key", JC_STR | JC_NULL, .max_len = 1024),
    F_("safety_identifier", JC_STR | JC_NULL, .max_len = 256),
    F_("modalities", JC_ARR | JC_NULL, .elem = &modality_elem, .max_len = 2),
    /* OpenAI's, refused saying why */
    F_("audio", JC_NULL, .note = " (audio output is not supported)"),
    F_("web_search_options", JC_NULL, .note = " (web search is not supported)"),
    /* the deprecated functions API: functions as tools, function_call as
       tool_choice, the call answered as message.function_call */
    F_("functions", JC_ARR | JC_NULL, .elem = &fn_def_elem, .max_len = 128),
    F_("function_call", JC_STR | JC_OBJ | JC_NULL, .one_of = fn_call_modes, .fields = tc_fn_fields),
    LLAMA_EXTENSIONS,
    F_("n_predict", JC_INT | JC_NULL, RANGE(-1, 1048576)),
    F_("json_schema", JC_OBJ),
    F_("chat_template_kwargs", JC_OBJ),
    /* vLLM's and llama.cpp's: no generation prompt / continue the last
       (assistant) message; not both */
    F_("add_generation_prompt", JC_BOOL | JC_NULL),
    F_("continue_final_message", JC_BOOL | JC_NULL),
    F_("verbose", JC_BOOL | JC_NULL), /* llama.cpp's __verbose: the /completion object of the answer */
    END,
};

static const jc_field openai_completions[] = {
    OPENAI_SAMPLING,
    F_("prompt", JC_STR | JC_ARR, .required = true, .elem = &prompt_elem, .max_len = 1048576),
    F_("logprobs", JC_INT | JC_NULL, RANGE(0, 5)),
    F_("echo", JC_BOOL | JC_NULL),
    F_("best_of", JC_INT | JC_NULL, RANGE(1, 1), .note = " (one candidate per request)"),
    F_("suffix", JC_NULL, .note = " (suffix is not supported)"),
    OPENAI_ACCEPTED,
    LLAMA_EXTENSIONS,
    F_("n_predict", JC_INT | JC_NULL, RANGE(-1, 1048576)),
    F_("json_schema", JC_OBJ),
    F_("verbose", JC_BOOL | JC_NULL),
    END,
};

/* llama.cpp */
/* /completion's fields after prompt (shared with /infill) */
#define LLAMA_COMPLETION_FIELDS                                                                                \
    F_("model", JC_STR | JC_NULL, .max_len = 256),                                                             \
    F_("n_predict", JC_INT, RANGE(-1, 1048576)),                                                               \
    F_("max_tokens", JC_INT, RANGE(-1, 1048576)),                                                              \
    F_("temperature", JC_NUM, RANGE(0, 100)),                                                                  \
    F_("top_k", JC_INT, RANGE(0, 1000000)),                                                                    \
    F_("top_p", JC_NUM, RANGE(0, 1)),                                                                          \
    F_("min_p", JC_NUM, RANGE(0, 1)),                                                                          \
    F_("seed", JC_INT, RANGE(-1, 9007199254740991.0)),                                                         \
    F_("stop", JC_ARR, .elem = &stop_elem, .max_len = MU_GEN_MAX_STOPS),                                       \
    F_("stream", JC_BOOL),                                                                                     \
    F_("n_probs", JC_INT, RANGE(0, 20)),                                                                       \
    F_("ignore_eos", JC_BOOL),                                                                                 \
    F_("return_tokens", JC_BOOL),                                                                              \
    LLAMA_SAMPLER(0),                                                                                          \
    F_("json_schema", JC_OBJ),   /* structured output; compiled by jsonc.c */                                  \
    LLAMA_EXTENSIONS,                                                                                          \
    F_("response_fields", JC_ARR, .elem = &response_field_elem, .max_len = 64),                                \
    F_("n_cmpl", JC_INT, RANGE(1, API_MAX_CHOICES)), /* completions per prompt (alias n) */                    \
    F_("n", JC_INT, RANGE(1, API_MAX_CHOICES)),                                                                \
    F_("verbose", JC_BOOL) /* the result is llama.cpp's object already: no effect */

static const jc_field llama_completion[] = {
    F_("prompt", JC_STR | JC_ARR | JC_OBJ, .required = true, .elem = &prompt_elem, .fields = prompt_obj_fields,
       .max_len = 1048576),
    LLAMA_COMPLETION_FIELDS,
    END,
};
/* /infill: llama.cpp's fill-in-the-middle request (checked, then answered
   501: the Muse vocabulary has no FIM tokens) */
static const jc_field infill_extra_fields[] = {
    F_("text", JC_STR, .required = true),
    F_("filename", JC_STR, .max_len = 4096),
    END,
};
static const jc_field infill_extra_elem = F_(NULL, JC_OBJ, .fields = infill_extra_fields);
static const jc_field llama_infill[] = {
    F_("input_prefix", JC_STR, .required = true, .max_len = 1048576),
    F_("input_suffix", JC_STR, .required = true, .max_len = 1048576),
    F_("input_extra", JC_ARR, .elem = &infill_extra_elem, .max_len = 4096),
    F_("prompt", JC_STR, .max_len = 1048576),
    LLAMA_COMPLETION_FIELDS,
    END,
};
/* /rerank (and its aliases): Jina's fields (documents, top_n,
   return_documents) and TEI's (texts, return_text, raw_scores, truncate,
   truncation_direction), checked before the 501 (no reranking model) */
static const jc_field rerank_doc_elem = F_(NULL, JC_STR, .max_len = 1048576);
static const char *const trunc_dirs[] = {"left", "right", "Left", "Right", NULL};
static const jc_field llama_rerank[] = {
    F_("query", JC_STR, .required = true, .max_len = 1048576),
    F_("documents", JC_ARR, .min_len = 1, .elem = &rerank_doc_elem, .max_len = 4096),
    F_("texts", JC_ARR, .min_len = 1, .elem = &rerank_doc_elem, .max_len = 4096),
    F_("model", JC_STR | JC_NULL, .max_len = 256),
    F_("top_n", JC_INT, RANGE(0, 4096)),
    F_("return_documents", JC_BOOL),
    F_("return_text", JC_BOOL),
    F_("raw_scores", JC_BOOL),
    F_("truncate", JC_BOOL),
    F_("truncation_direction", JC_STR, .one_of = trunc_dirs),
    END,
};
static const jc_field llama_tokenize[] = {
    F_("content", JC_STR, .required = true),
    F_("add_special", JC_BOOL),
    F_("parse_special", JC_BOOL),
    F_("with_pieces", JC_BOOL),
    END,
};
static const jc_field llama_detokenize[] = {
    F_("tokens", JC_ARR, .required = true, .elem = &int_tok_elem, .max_len = 1048576),
    END,
};
static const jc_field llama_apply_template[] = {
    F_("messages", JC_ARR, .required = true, .min_len = 1, .elem = &msg_elem, .max_len = 4096),
    F_("tools", JC_ARR | JC_NULL, .elem = &tool_elem, .max_len = 128),
    F_("model", JC_STR | JC_NULL, .max_len = 256),
    F_("reasoning_effort", JC_STR | JC_NULL, .one_of = effort),
    F_("add_generation_prompt", JC_BOOL | JC_NULL),
    F_("continue_final_message", JC_BOOL | JC_NULL),
    F_("chat_template_kwargs", JC_OBJ), /* reasoning_effort is used; other keys have no effect */
    END,
};

/* Ollama */
static const jc_field ollama_options[] = {
    F_("temperature", JC_NUM, RANGE(0, 100)),
    F_("top_k", JC_INT, RANGE(0, 1000000)),
    F_("top_p", JC_NUM, RANGE(0, 1)),
    F_("min_p", JC_NUM, RANGE(0, 1)),
    F_("seed", JC_INT, RANGE(-1, 9007199254740991.0)),
    F_("num_predict", JC_INT, RANGE(-2, 1048576)),
    F_("num_ctx", JC_INT, RANGE(1, 16777216)),
    /* Ollama's runner settings: no effect (the server's own, set when it
       starts); num_keep: muser never shifts the context */
    F_("num_keep", JC_INT, RANGE(-1, 16777216)), F_("num_batch", JC_INT, RANGE(1, 16777216)),
    F_("num_gpu", JC_INT, RANGE(-1, 1048576)), F_("main_gpu", JC_INT, RANGE(0, 1024)),
    F_("num_thread", JC_INT, RANGE(0, 1048576)), F_("use_mmap", JC_BOOL | JC_NULL),
    F_("use_mlock", JC_BOOL | JC_NULL), F_("numa", JC_BOOL), F_("low_vram", JC_BOOL),
    F_("stop", JC_ARR, .elem = &stop_elem, .max_len = MU_GEN_MAX_STOPS),
    /* Ollama's names for llama.cpp's stages (repeat_last_n -1: the whole context) */
    F_("repeat_penalty", JC_NUM, RANGE(0, BIG)),
    F_("repeat_last_n", JC_INT, RANGE(-1, 2147483647)),
    F_("presence_penalty", JC_NUM, RANGE(-BIG, BIG)),
    F_("frequency_penalty", JC_NUM, RANGE(-BIG, BIG)),
    F_("typical_p", JC_NUM, RANGE(-BIG, BIG)),
    F_("mirostat", JC_INT, RANGE(0, 2)),
    F_("mirostat_tau", JC_NUM, RANGE(-BIG, BIG)),
    F_("mirostat_eta", JC_NUM, RANGE(-BIG, BIG)),
    SPEC_FIELDS("speculative_type", "speculative_n_max", "speculative_n_min", "speculative_p_min"),
    END,
};
static const jc_field ollama_fn_call_fields[] = {
    F_("name", JC_STR, .required = true, .max_len = 256),
    F_("arguments", JC_OBJ, .required = true),
    F_("index", JC_INT, RANGE(0, 1024)),
    END,
};
static const jc_field ollama_tool_call_fields[] = {
    F_("function", JC_OBJ, .required = true, .fields = ollama_fn_call_fields),
    F_("id", JC_STR, .max_len = 256),
    END,
};
static const jc_field ollama_tool_call_elem = F_(NULL, JC_OBJ, .fields = ollama_tool_call_fields);
static const jc_field ollama_msg_fields[] = {
    F_("role", JC_STR, .required = true, .one_of = roles_ollama),
    F_("content", JC_STR),
    F_("thinking", JC_STR),
    F_("images", JC_ARR | JC_NULL, .elem = &b64_image_elem, .max_len = 64),
    F_("tool_calls", JC_ARR, .elem = &ollama_tool_call_elem, .max_len = 128),
    F_("tool_name", JC_STR, .max_len = 256),
    END,
};
static const jc_field ollama_msg_elem = F_(NULL, JC_OBJ, .fields = ollama_msg_fields);
static const char *const ollama_formats[] = {"", NULL};
static const char *const ollama_json_formats[] = {"", "json", NULL};
static const char *const ollama_think_levels[] = {"low", "medium", "high", NULL};

#define OLLAMA_COMMON                                                                                         \
    F_("model", JC_STR, .max_len = 256), F_("stream", JC_BOOL),                                              \
        F_("logprobs", JC_BOOL), F_("top_logprobs", JC_INT, RANGE(0, API_MAX_TOP)),                           \
        F_("format", JC_STR | JC_OBJ, .one_of = ollama_json_formats),                                         \
        F_("options", JC_OBJ, .fields = ollama_options), F_("keep_alive", JC_STR | JC_NUM),                   \
        F_("think", JC_BOOL | JC_STR, .one_of = ollama_think_levels)

static const jc_field ollama_generate[] = {
    OLLAMA_COMMON,
    F_("prompt", JC_STR),
    F_("system", JC_STR),
    F_("raw", JC_BOOL),
    F_("suffix", JC_STR, .one_of = ollama_formats, .note = " (suffix is not supported)"),
    F_("template", JC_STR, .one_of = ollama_formats, .note = " (the model's own template is used)"),
    /* Ollama's deprecated context: the token ids a previous answer returned */
    F_("context", JC_ARR | JC_NULL, .elem = &int_tok_elem, .max_len = 1u << 20),
    F_("images", JC_ARR | JC_NULL, .elem = &b64_image_elem, .max_len = 64),
    END,
};
static const jc_field ollama_chat[] = {
    OLLAMA_COMMON,
    F_("messages", JC_ARR, .elem = &ollama_msg_elem, .max_len = 4096),
    F_("tools", JC_ARR | JC_NULL, .elem = &tool_elem, .max_len = 128),
    END,
};
static const jc_field ollama_show[] = {
    F_("model", JC_STR, .max_len = 256),
    F_("name", JC_STR, .max_len = 256),
    F_("verbose", JC_BOOL),
    END,
};

/* embeddings (api_embed.c) */
static const char *const embd_formats[] = {"float", "base64", NULL};
static const jc_field embd_input_elem = F_(NULL, JC_STR | JC_INT | JC_ARR, RANGE(0, 2147483647),
                                           .elem = &mixed_elem, .max_len = 1048576);
#define EMBD_INPUT(n) F_(n, JC_STR | JC_ARR, .elem = &embd_input_elem, .max_len = 1048576)
static const jc_field openai_embeddings[] = {
    EMBD_INPUT("input"),
    EMBD_INPUT("content"), /* llama.cpp's form */
    F_("model", JC_STR, .max_len = 256),
    F_("encoding_format", JC_STR, .one_of = embd_formats),
    F_("dimensions", JC_INT | JC_NULL, RANGE(1, 1048576)), /* must equal the model's width */
    F_("user", JC_STR, .max_len = 256),
    F_("embd_normalize", JC_INT, RANGE(-1, 100)),
    END,
};
static const jc_field ollama_embed[] = {
    F_("model", JC_STR, .max_len = 256),
    EMBD_INPUT("input"),
    F_("truncate", JC_BOOL),
    F_("dimensions", JC_INT | JC_NULL, RANGE(1, 1048576)),
    F_("options", JC_OBJ, .fields = ollama_options),
    F_("keep_alive", JC_STR | JC_NUM),
    END,
};
static const jc_field ollama_embeddings[] = {
    F_("model", JC_STR, .max_len = 256),
    F_("prompt", JC_STR, .required = true, .max_len = 1048576),
    F_("options", JC_OBJ, .fields = ollama_options),
    F_("keep_alive", JC_STR | JC_NUM),
    END,
};

/* Anthropic Messages (api_anthropic.c) */
static const char *const an_roles[] = {"user", "assistant", NULL};
static const char *const an_block_types[] = {"text", "tool_use", "tool_result", "thinking", "redacted_thinking",
                                             "image", "document", NULL};
static const char *const an_inner_types[] = {"text", "image", NULL};
static const char *const an_text_type[] = {"text", NULL};
static const char *const an_tool_types[] = {"custom", NULL};
static const char *const an_choice_types[] = {"auto", "any", "tool", "none", NULL};
static const char *const an_thinking_types[] = {"enabled", "disabled", NULL};
static const char *const an_tiers[] = {"auto", "standard_only", NULL};
static const jc_field an_inner_fields[] = {
    F_("type", JC_STR, .required = true, .one_of = an_inner_types),
    F_("text", JC_STR), F_("source", JC_OBJ), F_("cache_control", JC_OBJ | JC_NULL),
    F_("citations", JC_ARR | JC_NULL),
    END,
};
static const jc_field an_inner_elem = F_(NULL, JC_OBJ, .fields = an_inner_fields);
static const jc_field an_block_fields[] = {
    F_("type", JC_STR, .required = true, .one_of = an_block_types),
    F_("text", JC_STR), F_("cache_control", JC_OBJ | JC_NULL), F_("citations", JC_ARR | JC_NULL),
    F_("id", JC_STR, .max_len = 256), F_("name", JC_STR, .max_len = 256), F_("input", JC_OBJ),
    F_("tool_use_id", JC_STR, .max_len = 256), F_("content", JC_STR | JC_ARR, .elem = &an_inner_elem),
    F_("is_error", JC_BOOL), F_("thinking", JC_STR), F_("signature", JC_STR), F_("data", JC_STR),
    F_("source", JC_OBJ), F_("title", JC_STR | JC_NULL), F_("context", JC_STR | JC_NULL),
    END,
};
static const jc_field an_block_elem = F_(NULL, JC_OBJ, .fields = an_block_fields);
static const jc_field an_msg_fields[] = {
    F_("role", JC_STR, .required = true, .one_of = an_roles),
    F_("content", JC_STR | JC_ARR, .required = true, .elem = &an_block_elem, .max_len = 4096),
    END,
};
static const jc_field an_msg_elem = F_(NULL, JC_OBJ, .fields = an_msg_fields);
static const jc_field an_text_fields[] = {
    F_("type", JC_STR, .required = true, .one_of = an_text_type),
    F_("text", JC_STR, .required = true), F_("cache_control", JC_OBJ | JC_NULL), F_("citations", JC_ARR | JC_NULL),
    END,
};
static const jc_field an_text_elem = F_(NULL, JC_OBJ, .fields = an_text_fields);
static const jc_field an_tool_fields[] = {
    F_("name", JC_STR, .required = true, .min_len = 1, .max_len = 256),
    F_("description", JC_STR), F_("input_schema", JC_OBJ, .required = true),
    F_("type", JC_STR | JC_NULL, .one_of = an_tool_types, .note = " (server tools are not supported)"),
    F_("cache_control", JC_OBJ | JC_NULL),
    END,
};
static const jc_field an_tool_elem = F_(NULL, JC_OBJ, .fields = an_tool_fields);
static const jc_field an_choice_fields[] = {
    F_("type", JC_STR, .required = true, .one_of = an_choice_types),
    F_("name", JC_STR, .max_len = 256), F_("disable_parallel_tool_use", JC_BOOL),
    END,
};
static const jc_field an_thinking_fields[] = {
    F_("type", JC_STR, .required = true, .one_of = an_thinking_types),
    F_("budget_tokens", JC_INT, RANGE(0, 1048576)), /* no effect: the model ends its reasoning itself */
    END,
};
static const jc_field an_metadata_fields[] = {F_("user_id", JC_STR | JC_NULL, .max_len = 256), END};
#define ANTHROPIC_PROMPT                                                                                      \
    F_("model", JC_STR, .max_len = 256),                                                                      \
        F_("messages", JC_ARR, .required = true, .elem = &an_msg_elem, .max_len = 4096),                      \
        F_("system", JC_STR | JC_ARR, .elem = &an_text_elem, .max_len = 1024),                                \
        F_("tools", JC_ARR, .elem = &an_tool_elem, .max_len = 128),                                           \
        F_("tool_choice", JC_OBJ, .fields = an_choice_fields),                                                \
        F_("thinking", JC_OBJ, .fields = an_thinking_fields)
static const jc_field anthropic_messages[] = {
    ANTHROPIC_PROMPT,
    F_("max_tokens", JC_INT, .required = true, RANGE(1, 1048576)),
    F_("stop_sequences", JC_ARR, .elem = &stop_elem, .max_len = MU_GEN_MAX_STOPS),
    F_("stream", JC_BOOL),
    F_("temperature", JC_NUM, RANGE(0, 1)),
    F_("top_p", JC_NUM, RANGE(0, 1)),
    F_("top_k", JC_INT, RANGE(0, 1000000)),
    F_("metadata", JC_OBJ, .fields = an_metadata_fields),
    F_("service_tier", JC_STR, .one_of = an_tiers),
    F_("container", JC_NULL, .note = " (code execution containers are not supported)"),
    F_("context_management", JC_NULL, .note = " (context editing is not supported)"),
    F_("mcp_servers", JC_NULL, .note = " (MCP servers are not supported)"),
    F_("speculative", JC_OBJ, .fields = spec_obj_fields),
    END,
};
static const jc_field anthropic_count_tokens[] = {ANTHROPIC_PROMPT, END};

/* OpenAI Responses (api_responses.c) */
static const char *const rs_item_types[] = {"message", "function_call", "function_call_output", "reasoning", NULL};
static const char *const rs_roles[] = {"user", "assistant", "system", "developer", NULL};
static const char *const rs_part_types[] = {"input_text", "output_text", "text", "input_image", "input_file",
                                            "refusal", NULL};
static const char *const rs_status[] = {"in_progress", "completed", "incomplete", NULL};
static const char *const rs_choice_modes[] = {"none", "auto", "required", NULL};
static const char *const rs_efforts[] = {"minimal", "low", "medium", "high", "xhigh", NULL};
static const char *const rs_summaries[] = {"auto", "concise", "detailed", NULL};
static const char *const rs_truncation[] = {"auto", "disabled", NULL};
static const char *const rs_verbosity[] = {"low", "medium", "high", NULL};
static const jc_field rs_part_fields[] = {
    F_("type", JC_STR, .required = true, .one_of = rs_part_types),
    F_("text", JC_STR), F_("annotations", JC_ARR), F_("logprobs", JC_ARR), F_("refusal", JC_STR),
    F_("image_url", JC_STR | JC_NULL), F_("file_id", JC_STR | JC_NULL), F_("detail", JC_STR),
    END,
};
static const jc_field rs_part_elem = F_(NULL, JC_OBJ, .fields = rs_part_fields);
static const jc_field rs_summary_fields[] = {F_("type", JC_STR, .required = true), F_("text", JC_STR), END};
static const jc_field rs_summary_elem = F_(NULL, JC_OBJ, .fields = rs_summary_fields);
static const jc_field rs_item_fields[] = {
    F_("type", JC_STR, .one_of = rs_item_types),
    F_("role", JC_STR, .one_of = rs_roles),
    F_("content", JC_STR | JC_ARR, .elem = &rs_part_elem, .max_len = 4096),
    F_("id", JC_STR, .max_len = 256), F_("status", JC_STR | JC_NULL, .one_of = rs_status),
    F_("call_id", JC_STR, .max_len = 256), F_("name", JC_STR, .max_len = 256), F_("arguments", JC_STR),
    F_("output", JC_STR | JC_ARR, .elem = &rs_part_elem),
    F_("summary", JC_ARR, .elem = &rs_summary_elem), F_("encrypted_content", JC_STR | JC_NULL),
    END,
};
static const jc_field rs_item_elem = F_(NULL, JC_OBJ, .fields = rs_item_fields);
static const jc_field rs_tool_fields[] = {
    F_("type", JC_STR, .required = true, .one_of = function_only, .note = " (only function tools are supported)"),
    F_("name", JC_STR, .required = true, .min_len = 1, .max_len = 256),
    F_("description", JC_STR | JC_NULL), F_("parameters", JC_OBJ | JC_NULL), F_("strict", JC_BOOL | JC_NULL),
    END,
};
static const jc_field rs_tool_elem = F_(NULL, JC_OBJ, .fields = rs_tool_fields);
static const jc_field rs_choice_fields[] = {
    F_("type", JC_STR, .required = true, .one_of = function_only),
    F_("name", JC_STR, .required = true, .max_len = 256),
    END,
};
static const jc_field rs_format_fields[] = {
    F_("type", JC_STR, .required = true, .one_of = resp_types),
    F_("name", JC_STR, .max_len = 64), F_("schema", JC_OBJ), F_("strict", JC_BOOL | JC_NULL),
    F_("description", JC_STR),
    END,
};
static const jc_field rs_text_fields[] = {
    F_("format", JC_OBJ, .fields = rs_format_fields), F_("verbosity", JC_STR | JC_NULL, .one_of = rs_verbosity), END,
};
static const jc_field rs_reasoning_fields[] = {
    F_("effort", JC_STR | JC_NULL, .one_of = rs_efforts),
    F_("summary", JC_STR | JC_NULL, .one_of = rs_summaries), /* no effect: reasoning is returned whole */
    F_("generate_summary", JC_STR | JC_NULL, .one_of = rs_summaries),
    END,
};
static const jc_field openai_responses[] = {
    F_("model", JC_STR, .max_len = 256),
    F_("input", JC_STR | JC_ARR, .required = true, .elem = &rs_item_elem, .max_len = 4096),
    F_("speculative", JC_OBJ, .fields = spec_obj_fields),
    F_("instructions", JC_STR | JC_NULL),
    F_("max_output_tokens", JC_INT | JC_NULL, RANGE(1, 1048576)),
    F_("temperature", JC_NUM | JC_NULL, RANGE(0, 2)),
    F_("top_p", JC_NUM | JC_NULL, RANGE(0, 1)),
    F_("stream", JC_BOOL | JC_NULL),
    F_("stream_options", JC_OBJ | JC_NULL, .fields = stream_opt_fields),
    F_("tools", JC_ARR | JC_NULL, .elem = &rs_tool_elem, .max_len = 128),
    F_("tool_choice", JC_STR | JC_OBJ | JC_NULL, .one_of = rs_choice_modes, .fields = rs_choice_fields),
    F_("parallel_tool_calls", JC_BOOL | JC_NULL),
    F_("text", JC_OBJ | JC_NULL, .fields = rs_text_fields),
    F_("reasoning", JC_OBJ | JC_NULL, .fields = rs_reasoning_fields),
    F_("previous_response_id", JC_STR | JC_NULL), /* refused when set: nothing is stored */
    F_("truncation", JC_STR | JC_NULL, .one_of = rs_truncation),
    /* "message.output_text.logprobs" returns logprobs; the others have no effect */
    F_("include", JC_ARR | JC_NULL, .elem = &stop_elem, .max_len = 16),
    F_("user", JC_STR, .max_len = 256), F_("prompt_cache_key", JC_STR, .max_len = 256),
    F_("safety_identifier", JC_STR, .max_len = 256),
    F_("max_tool_calls", JC_INT | JC_NULL, RANGE(1, 1048576)),
    F_("conversation", JC_NULL, .note = " (conversations are not stored: send the whole input)"),
    F_("prompt", JC_NULL, .note = " (stored prompts are not supported: send instructions and input)"),
    F_("top_logprobs", JC_INT | JC_NULL, RANGE(0, 20)),
    F_("background", JC_BOOL | JC_NULL, .one_of = NULL),
    F_("timings_per_token", JC_BOOL), F_("return_progress", JC_BOOL), /* llama.cpp's */
    OPENAI_ACCEPTED,
    END,
};

/* /v1/sessions (api_sessions.c) */
static const jc_field sessions_create[] = {
    F_("id", JC_STR, .max_len = 64, .min_len = 1),
    END,
};
static const jc_field session_id_elem[] = {F_("", JC_INT, RANGE(0, 2147483647)), END};
static const jc_field session_stop_elem[] = {F_("", JC_STR, .max_len = 256), END};
static const jc_field sessions_continue[] = {
    F_("revision", JC_INT, .required = true, RANGE(0, 9007199254740991.0)),
    F_("prompt", JC_STR | JC_ARR, .required = true, .elem = session_id_elem),
    F_("n_predict", JC_INT, RANGE(-1, 1 << 24)),
    F_("temperature", JC_NUM, RANGE(0, 100)),
    F_("top_k", JC_INT, RANGE(0, 1 << 24)),
    F_("top_p", JC_NUM, RANGE(0, 1)),
    F_("min_p", JC_NUM, RANGE(0, 1)),
    F_("seed", JC_INT, RANGE(-1, 4294967295.0)),
    F_("stop", JC_STR | JC_ARR, .elem = session_stop_elem),
    F_("ignore_eos", JC_BOOL),
    F_("logprobs", JC_BOOL),
    F_("stream", JC_BOOL),
    END,
};
static const jc_field sessions_empty[] = {END}; /* save, restore */

const mu_http_route mu_http_routes[] = {
    {"POST", "/v1/chat/completions", MU_PROTO_OPENAI, api_openai_chat, false},
    {"POST", "/v1/completions", MU_PROTO_OPENAI, api_openai_completions, false},
    {"GET", "/v1/models", MU_PROTO_OPENAI, api_openai_models, false},
    /* the OpenAI routes without /v1, as llama.cpp's server answers them */
    {"POST", "/chat/completions", MU_PROTO_OPENAI, api_openai_chat, false},
    {"GET", "/models", MU_PROTO_OPENAI, api_openai_models, false},
    {"POST", "/completion", MU_PROTO_LLAMACPP, api_llama_completion, false},
    {"POST", "/completions", MU_PROTO_LLAMACPP, api_llama_completion, false},
    {"POST", "/tokenize", MU_PROTO_LLAMACPP, api_llama_tokenize, false},
    {"POST", "/detokenize", MU_PROTO_LLAMACPP, api_llama_detokenize, false},
    {"POST", "/apply-template", MU_PROTO_LLAMACPP, api_llama_apply_template, false},
    {"GET", "/health", MU_PROTO_LLAMACPP, api_llama_health, true},
    {"GET", "/v1/health", MU_PROTO_LLAMACPP, api_llama_health, true},
    {"POST", "/props", MU_PROTO_LLAMACPP, api_llama_props_set, false},
    {"GET", "/lora-adapters", MU_PROTO_LLAMACPP, api_llama_lora_list, false},
    {"POST", "/chat/completions/input_tokens", MU_PROTO_OPENAI, api_openai_chat_tokens, false},
    {"POST", "/v1/chat/completions/input_tokens", MU_PROTO_OPENAI, api_openai_chat_tokens, false},
    {"POST", "/rerank", MU_PROTO_LLAMACPP, api_llama_rerank, false},
    {"POST", "/reranking", MU_PROTO_LLAMACPP, api_llama_rerank, false},
    {"POST", "/v1/rerank", MU_PROTO_LLAMACPP, api_llama_rerank, false},
    {"POST", "/v1/reranking", MU_PROTO_LLAMACPP, api_llama_rerank, false},
    {"GET", "/props", MU_PROTO_LLAMACPP, api_llama_props, false},
    {"GET", "/slots", MU_PROTO_LLAMACPP, api_llama_slots, false},
    {"POST", "/slots/*", MU_PROTO_LLAMACPP, api_slots_action, false},
    /* named sessions (api_sessions.c) */
    {"GET", "/v1/sessions", MU_PROTO_OPENAI, api_sessions_root, false},
    {"POST", "/v1/sessions", MU_PROTO_OPENAI, api_sessions_root, false},
    {"GET", "/v1/sessions/*", MU_PROTO_OPENAI, api_sessions_item, false},
    {"POST", "/v1/sessions/*", MU_PROTO_OPENAI, api_sessions_item, false},
    {"DELETE", "/v1/sessions/*", MU_PROTO_OPENAI, api_sessions_item, false},
    {"GET", "/metrics", MU_PROTO_LLAMACPP, api_llama_metrics, false},
    {"POST", "/api/generate", MU_PROTO_OLLAMA, api_ollama_generate, false},
    {"POST", "/api/chat", MU_PROTO_OLLAMA, api_ollama_chat, false},
    {"GET", "/api/tags", MU_PROTO_OLLAMA, api_ollama_tags, false},
    {"POST", "/api/show", MU_PROTO_OLLAMA, api_ollama_show, false},
    {"GET", "/api/version", MU_PROTO_OLLAMA, api_ollama_version, false},
    /* embeddings (api_embed.c) */
    {"POST", "/v1/embeddings", MU_PROTO_OPENAI, api_embeddings, false},
    {"POST", "/embeddings", MU_PROTO_LLAMACPP, api_embeddings, false},
    {"POST", "/embedding", MU_PROTO_LLAMACPP, api_embeddings, false},
    {"POST", "/api/embed", MU_PROTO_OLLAMA, api_embeddings, false},
    {"POST", "/api/embeddings", MU_PROTO_OLLAMA, api_embeddings, false},
    /* model routes (api_openai.c, api_ollama.c) and the root */
    {"GET", "/v1/models/*", MU_PROTO_OPENAI, api_openai_model, false},
    {"GET", "/api/ps", MU_PROTO_OLLAMA, api_ollama_ps, false},
    {"POST", "/infill", MU_PROTO_LLAMACPP, api_llama_infill, false},
    /* OpenAI Responses (api_responses.c) */
    {"POST", "/v1/responses", MU_PROTO_OPENAI, api_responses, false},
    {"POST", "/responses", MU_PROTO_OPENAI, api_responses, false},
    /* Anthropic Messages (api_anthropic.c) */
    {"POST", "/v1/messages", MU_PROTO_ANTHROPIC, api_anthropic_messages, false},
    {"POST", "/v1/messages/count_tokens", MU_PROTO_ANTHROPIC, api_anthropic_count_tokens, false},
    /* the dashboard (dash.c): the page is public, its data is not */
    {"GET", "/", MU_PROTO_LLAMACPP, api_dash_page, true},
    {"GET", "/dashboard", MU_PROTO_LLAMACPP, api_dash_page, true},
    {"GET", "/snapshot", MU_PROTO_LLAMACPP, api_dash_snapshot, false},
    {"GET", "/telemetry", MU_PROTO_LLAMACPP, api_dash_telemetry, false},
    {"POST", "/login", MU_PROTO_LLAMACPP, api_dash_login, true},
    {"POST", "/logout", MU_PROTO_LLAMACPP, api_dash_logout, false},
    {"GET", "/session", MU_PROTO_LLAMACPP, api_dash_session, true},
    {NULL, NULL, 0, NULL, false},
};

const jc_field *api_schema(const char *path) {
    static const struct {
        const char *path;
        const jc_field *f;
    } t[] = {
        {"/v1/chat/completions", openai_chat}, {"/v1/completions", openai_completions},
        {"/chat/completions", openai_chat},
        {"/chat/completions/input_tokens", openai_chat}, {"/v1/chat/completions/input_tokens", openai_chat},
        {"/completion", llama_completion},     {"/completions", llama_completion},
        {"/infill", llama_infill},             {"/rerank", llama_rerank},
        {"/reranking", llama_rerank},          {"/v1/rerank", llama_rerank},
        {"/v1/reranking", llama_rerank},
        {"/tokenize", llama_tokenize},         {"/detokenize", llama_detokenize},
        {"/apply-template", llama_apply_template}, {"/api/generate", ollama_generate},
        {"/api/chat", ollama_chat},            {"/api/show", ollama_show},
        {"/v1/embeddings", openai_embeddings}, {"/embeddings", openai_embeddings},
        {"/embedding", openai_embeddings},     {"/api/embed", ollama_embed},
        {"/api/embeddings", ollama_embeddings},
        {"/v1/responses", openai_responses},   {"/responses", openai_responses},
        {"/v1/messages", anthropic_messages},  {"/v1/messages/count_tokens", anthropic_count_tokens},
        {"/v1/sessions", sessions_create},     {"/v1/sessions/{id}/continue", sessions_continue},
        {"/v1/sessions/{id}/save", sessions_empty}, {"/v1/sessions/{id}/restore", sessions_empty},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (!strcmp(t[i].path, path)) return t[i].f;
    return NULL;
}
