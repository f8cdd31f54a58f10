/* prompt.h: prompts for the CLI commands: tokenization (BOS per the GGUF). */
#ifndef MU_CMD_PROMPT_H
#define MU_CMD_PROMPT_H

#include <stdint.h>

#include "../../include/muser.h"

/* Tokenizes TEXT or the contents of FILE (exactly one non-NULL). Prints the
 * error line and returns 1 on failure; *ids is malloc'ed. */
int cli_prompt_tokens(const mu_model *m, const char *text, const char *file, int32_t **ids, int *n);

#endif
