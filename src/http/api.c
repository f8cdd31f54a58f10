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

static const char *const roles_openai[] = {"system", "developer", "user", "assistant", "tool", NULL};
static const char *const roles_ollama[] = {"system", "user", "assistant", "tool", NULL};
static const char *const text_only[] = {"text", NULL};
static const char *const function_only[] = {"function", NULL};
static const char *const tool_choice_modes[] = {"none", "auto", "required", NULL};
static const char *const effort[] = {"low", "medium", "high", "xhigh", NULL};
static const char *const resp_types[] = {"text", "json_object", "json_schema", NULL};

static const jc_field no_image = F_(NULL, 0, .note = " (image input is not supported)");
static const jc_field int_tok_elem = F_(NULL, JC_INT, RANGE(0, 2147483647));
static const jc_field stop_elem = F_(NULL, JC_STR, .max_len = 256);

/* OpenAI messages */
static const jc_field part_fields[] = {
    F_("type", JC_STR, .required = true, .one_of = text_only, .note = " (only text parts are supported)"),
    F_("text", JC_STR, .required = true),
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
static const jc_field tc_fn_fields[] = {F_("name", JC_STR, .required = true), END};
static const jc_field tool_choice_fields[] = {
    F_("type", JC_STR, .required = true, .one_of = function_only),
    F_("function", JC_OBJ, .required = true, .fields = tc_fn_fields),
    END,
};
static const jc_field stream_opt_fields[] = {F_("include_usage", JC_BOOL | JC_NULL), END};
static const jc_field json_schema_fields[] = {
    F_("name", JC_STR, .required = true, .min_len = 1, .max_len = 64),
    F_("description", JC_STR),
    F_("schema", JC_OBJ),   /* compiled by jsonc.c, which names unsupported keywords */
    F_("strict", JC_BOOL | JC_NULL),
    END,
};
static const jc_field resp_format_fields[] = {
    F_("type", JC_STR, .required = true, .one_of = resp_types),
    F_("json_schema", JC_OBJ, .fields = json_schema_fields),
    END,
};

#define OPENAI_SAMPLING                                                                                   \
    F_("model", JC_STR, .max_len = 256), F_("stream", JC_BOOL | JC_NULL),                                 \
        F_("stream_options", JC_OBJ | JC_NULL, .fields = stream_opt_fields),                              \
        F_("max_tokens", JC_INT | JC_NULL, RANGE(1, 1048576)),                                           \
        F_("temperature", JC_NUM | JC_NULL, RANGE(0, 2)), F_("top_p", JC_NUM | JC_NULL, RANGE(0, 1)),     \
        F_("top_k", JC_INT | JC_NULL, RANGE(0, 1000000)), F_("min_p", JC_NUM | JC_NULL, RANGE(0, 1)),     \
        F_("seed", JC_INT | JC_NULL, RANGE(-1, 9007199254740991.0)),                                     \
        F_("stop", JC_STR | JC_ARR | JC_NULL, .elem = &stop_elem, .max_len = 4),                          \
        F_("n", JC_INT | JC_NULL, RANGE(1, API_MAX_CHOICES)),                                             \
        F_("frequency_penalty", JC_NUM | JC_NULL, RANGE(0, 0), .note = " (penalties are not supported)"), \
        F_("presence_penalty", JC_NUM | JC_NULL, RANGE(0, 0), .note = " (penalties are not supported)"),  \
        F_("user", JC_STR, .max_len = 256)

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
    END,
};

static const jc_field openai_completions[] = {
    OPENAI_SAMPLING,
    F_("prompt", JC_STR | JC_ARR, .required = true, .elem = &int_tok_elem, .max_len = 1048576),
    F_("logprobs", JC_INT | JC_NULL, RANGE(0, 5)),
    F_("echo", JC_BOOL | JC_NULL),
    F_("best_of", JC_INT | JC_NULL, RANGE(1, 1), .note = " (one candidate per request)"),
    F_("suffix", JC_NULL, .note = " (suffix is not supported)"),
    END,
};

/* llama.cpp */
static const jc_field llama_completion[] = {
    F_("prompt", JC_STR | JC_ARR, .required = true, .elem = &int_tok_elem, .max_len = 1048576),
    F_("model", JC_STR, .max_len = 256),
    F_("n_predict", JC_INT, RANGE(-1, 1048576)),
    F_("max_tokens", JC_INT, RANGE(-1, 1048576)),
    F_("temperature", JC_NUM, RANGE(0, 100)),
    F_("top_k", JC_INT, RANGE(0, 1000000)),
    F_("top_p", JC_NUM, RANGE(0, 1)),
    F_("min_p", JC_NUM, RANGE(0, 1)),
    F_("seed", JC_INT, RANGE(-1, 9007199254740991.0)),
    F_("stop", JC_ARR, .elem = &stop_elem, .max_len = MU_GEN_MAX_STOPS),
    F_("stream", JC_BOOL),
    F_("n_probs", JC_INT, RANGE(0, 20)),
    F_("cache_prompt", JC_BOOL),
    F_("id_slot", JC_INT, RANGE(-1, -1), .note = " (slots are assigned by the scheduler)"),
    F_("ignore_eos", JC_BOOL),
    F_("return_tokens", JC_BOOL),
    F_("repeat_penalty", JC_NUM, RANGE(1, 1), .note = " (penalties are not supported)"),
    F_("repeat_last_n", JC_INT, RANGE(-1, 1048576)),
    F_("presence_penalty", JC_NUM, RANGE(0, 0), .note = " (penalties are not supported)"),
    F_("frequency_penalty", JC_NUM, RANGE(0, 0), .note = " (penalties are not supported)"),
    F_("typical_p", JC_NUM, RANGE(1, 1), .note = " (typical sampling is not supported)"),
    F_("mirostat", JC_INT, RANGE(0, 0), .note = " (mirostat is not supported)"),
    F_("dynatemp_range", JC_NUM, RANGE(0, 0), .note = " (dynamic temperature is not supported)"),
    F_("xtc_probability", JC_NUM, RANGE(0, 0), .note = " (XTC is not supported)"),
    F_("dry_multiplier", JC_NUM, RANGE(0, 0), .note = " (DRY is not supported)"),
    F_("json_schema", JC_OBJ),   /* structured output; compiled by jsonc.c */
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
    F_("model", JC_STR, .max_len = 256),
    F_("reasoning_effort", JC_STR | JC_NULL, .one_of = effort),
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
    F_("stop", JC_ARR, .elem = &stop_elem, .max_len = MU_GEN_MAX_STOPS),
    F_("repeat_penalty", JC_NUM, RANGE(1, 1), .note = " (penalties are not supported)"),
    F_("presence_penalty", JC_NUM, RANGE(0, 0), .note = " (penalties are not supported)"),
    F_("frequency_penalty", JC_NUM, RANGE(0, 0), .note = " (penalties are not supported)"),
    F_("typical_p", JC_NUM, RANGE(1, 1), .note = " (typical sampling is not supported)"),
    F_("mirostat", JC_INT, RANGE(0, 0), .note = " (mirostat is not supported)"),
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
    F_("images", JC_ARR | JC_NULL, .elem = &no_image),
    F_("tool_calls", JC_ARR, .elem = &ollama_tool_call_elem, .max_len = 128),
    F_("tool_name", JC_STR, .max_len = 256),
    END,
};
static const jc_field ollama_msg_elem = F_(NULL, JC_OBJ, .fields = ollama_msg_fields);
static const char *const ollama_formats[] = {"", NULL};
static const char *const ollama_json_formats[] = {"", "json", NULL};

#define OLLAMA_COMMON                                                                                         \
    F_("model", JC_STR, .max_len = 256), F_("stream", JC_BOOL),                                              \
        F_("format", JC_STR | JC_OBJ, .one_of = ollama_json_formats),                                         \
        F_("options", JC_OBJ, .fields = ollama_options), F_("keep_alive", JC_STR | JC_NUM),                   \
        F_("think", JC_BOOL)

static const jc_field ollama_generate[] = {
    OLLAMA_COMMON,
    F_("prompt", JC_STR),
    F_("system", JC_STR),
    F_("raw", JC_BOOL),
    F_("suffix", JC_STR, .one_of = ollama_formats, .note = " (suffix is not supported)"),
    F_("images", JC_ARR | JC_NULL, .elem = &no_image),
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
    {"GET", "/props", MU_PROTO_LLAMACPP, api_llama_props, false},
    {"GET", "/slots", MU_PROTO_LLAMACPP, api_llama_slots, false},
    {"GET", "/metrics", MU_PROTO_LLAMACPP, api_llama_metrics, false},
    {"POST", "/api/generate", MU_PROTO_OLLAMA, api_ollama_generate, false},
    {"POST", "/api/chat", MU_PROTO_OLLAMA, api_ollama_chat, false},
    {"GET", "/api/tags", MU_PROTO_OLLAMA, api_ollama_tags, false},
    {"POST", "/api/show", MU_PROTO_OLLAMA, api_ollama_show, false},
    {"GET", "/api/version", MU_PROTO_OLLAMA, api_ollama_version, false},
    /* the dashboard (dash.c): the page is public, its data is not */
    {"GET", "/", MU_PROTO_LLAMACPP, api_dash_page, true},
    {"GET", "/dashboard", MU_PROTO_LLAMACPP, api_dash_page, true},
    {"GET", "/snapshot", MU_PROTO_LLAMACPP, api_dash_snapshot, false},
    {"GET", "/telemetry", MU_PROTO_LLAMACPP, api_dash_telemetry, false},
    {NULL, NULL, 0, NULL, false},
};

const jc_field *api_schema(const char *path) {
    static const struct {
        const char *path;
        const jc_field *f;
    } t[] = {
        {"/v1/chat/completions", openai_chat}, {"/v1/completions", openai_completions},
        {"/chat/completions", openai_chat},
        {"/completion", llama_completion},     {"/completions", llama_completion},
        {"/tokenize", llama_tokenize},         {"/detokenize", llama_detokenize},
        {"/apply-template", llama_apply_template}, {"/api/generate", ollama_generate},
        {"/api/chat", ollama_chat},            {"/api/show", ollama_show},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (!strcmp(t[i].path, path)) return t[i].f;
    return NULL;
}
