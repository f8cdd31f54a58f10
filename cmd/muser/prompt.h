/* prompt.h: text in and text out for the CLI commands: prompt tokenization
 * (BOS per the GGUF) and streaming output of generated tokens. */
#ifndef MU_CMD_PROMPT_H
#define MU_CMD_PROMPT_H

#include <stdint.h>

#include "../../include/muser.h"

/* Tokenizes TEXT or the contents of FILE (exactly one non-NULL). Prints the
 * error line and returns 1 on failure; *ids is malloc'ed. */
int cli_prompt_tokens(const mu_model *m, const char *text, const char *file, int32_t **ids, int *n);

typedef struct cli_text cli_text;
/* Streams token text to stdout; prints why and returns NULL on failure. */
cli_text *cli_text_new(const mu_model *m);
void cli_text_put(cli_text *t, int32_t id);
void cli_text_end(cli_text *t);
void cli_text_free(cli_text *t);

#endif
