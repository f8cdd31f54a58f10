/* jinja.h: a Jinja2 template interpreter for chat templates.
 * Owns: rendering a template string against a JSON context, with the
 * semantics of Python's Jinja2 in the environment Hugging Face transformers
 * builds for chat templates: ImmutableSandboxedEnvironment(trim_blocks=True,
 * lstrip_blocks=True, extensions=[loopcontrols]), keep_trailing_newline off,
 * `tojson` = json.dumps(ensure_ascii=False), globals raise_exception and
 * strftime_now. docs/chat-format.md lists what is and is not supported.
 * Errors (syntax, runtime, raise_exception, limits) come back as a status
 * and a message "jinja: line N: ..."; bad templates never crash. */
#ifndef MU_MODEL_JINJA_H
#define MU_MODEL_JINJA_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "../base/err.h"

typedef struct mu_jinja_opts {
    size_t max_output_bytes; /* 0: 16 MiB */
    size_t max_memory_bytes; /* arena limit; 0: 256 MiB */
    uint64_t max_steps;      /* evaluation steps; 0: 50 million */
    int max_depth;           /* macro/call recursion; 0: 64 */
    int64_t now_unix;        /* time for strftime_now (UTC); <0: current time */
} mu_jinja_opts;

/* Renders tmpl[0..len) with the variables of ctx (a JSON object, may be NULL).
 * On success *out is a malloc'd NUL-terminated string (free() it) and
 * *out_len its length. On failure returns a negative MU_E_* code:
 * MU_E_FORMAT for template syntax errors, MU_E_ARG for runtime errors
 * (including raise_exception, whose message is kept verbatim),
 * MU_E_NOMEM for limits; *out is untouched. opts may be NULL. */
int mu_jinja_render_opts(const char *tmpl, size_t len, const json_t *ctx, const mu_jinja_opts *opts,
                         char **out, size_t *out_len, mu_err *err);
int mu_jinja_render(const char *tmpl, size_t len, const json_t *ctx, char **out, size_t *out_len,
                    mu_err *err);

#endif
