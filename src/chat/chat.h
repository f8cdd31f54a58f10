/* chat.h: chat prompts and assistant output for Muse Glimmer.
 * Owns: rendering a conversation (OpenAI-shaped messages, tools) into the
 * prompt text with the GGUF's Jinja template or the built-in Muse template,
 * and splitting the assistant's generated text back into reasoning, content
 * and tool calls, incrementally, for streaming. docs/chat-format.md is the
 * normative description of the format and of the parser's rules. */
#ifndef MU_MODEL_CHAT_H
#define MU_MODEL_CHAT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "../base/err.h"

/* ---- rendering ---- */

/* The built-in Muse chat template (Jinja source), used when a GGUF has no
 * tokenizer.chat_template; a static string. */
const char *mu_chat_muse_template(void);

/* Renders messages (a JSON array of {role, content, tool_calls, reasoning_content,
 * ...}) with template_or_null (NULL or "": the built-in Muse template).
 * tools_or_null: JSON array of tool definitions or NULL. reasoning_strength:
 * "low", "medium", "high", "xhigh" or NULL (templates default to high); it is
 * passed as both reasoning_strength and reasoning_effort. bos/eos: the token
 * texts (NULL: "<|begin_of_text|>" / "<|end_of_text|>").
 * Tool-call arguments given as JSON text (OpenAI style) are parsed into
 * objects first, as transformers-based servers do, so templates see a mapping.
 * *out is malloc'd, NUL-terminated (free()). Errors: MU_E_ARG (bad input,
 * template runtime errors, raise_exception), MU_E_FORMAT (template syntax),
 * MU_E_NOMEM; the message names the template line. */
int mu_chat_render(const char *template_or_null, const json_t *messages, const json_t *tools_or_null,
                   const char *reasoning_strength, bool add_generation_prompt, const char *bos, const char *eos,
                   char **out, mu_err *err);

/* ---- parsing the assistant's output ---- */

enum { MU_CHAT_REASONING = 1, MU_CHAT_CONTENT = 2, MU_CHAT_TOOL_CALL = 3 };

typedef struct mu_chat_event {
    int kind;              /* MU_CHAT_* */
    const char *text;      /* REASONING / CONTENT: the delta (not NUL-terminated) */
    size_t len;
    const char *name;      /* TOOL_CALL: function name (NUL-terminated) */
    const char *arguments; /* TOOL_CALL: arguments as compact JSON object text */
    int index;             /* TOOL_CALL: 0-based index within the assistant turn */
    size_t offset;         /* REASONING / CONTENT: where text[0] is in the parser's whole input (bytes
                              fed since new), or SIZE_MAX for text that is not a copy of the input
                              (a tool message that did not parse, given back as content) */
} mu_chat_event;

/* Called for each event; pointers live until the callback returns. A non-zero
 * return stops parsing and is returned by feed/finish. */
typedef int (*mu_chat_event_fn)(void *user, const mu_chat_event *ev);

typedef struct mu_chat_parser mu_chat_parser;

/* A parser for the text generated after the prompt's `<|start|>assistant`. */
int mu_chat_parser_new(mu_chat_parser **out, mu_err *err);
/* Feeds the next chunk of decoded text (any split, even inside a marker or a
 * UTF-8 character). Text that could be the start of a marker is held back. */
int mu_chat_parser_feed(mu_chat_parser *p, const char *text, size_t n, mu_chat_event_fn fn, void *user, mu_err *err);
/* End of generation: flushes held-back text and any unterminated message. */
int mu_chat_parser_finish(mu_chat_parser *p, mu_chat_event_fn fn, void *user, mu_err *err);
/* True once <|eot|> or <|end_of_text|> has been seen (the turn is over). */
bool mu_chat_parser_done(const mu_chat_parser *p);
void mu_chat_parser_free(mu_chat_parser *p);

#endif
