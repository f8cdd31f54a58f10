/* prompt.h: prompts for the CLI commands: tokenization (BOS per the GGUF). */
#ifndef MU_CMD_PROMPT_H
#define MU_CMD_PROMPT_H

#include <stdint.h>

#include "../../include/muser.h"

/* Tokenizes TEXT or the contents of FILE (exactly one non-NULL). Prints the
 * error line and returns 1 on failure; *ids is malloc'ed. */
/* A whole file (at most 256 MiB) into *out (malloc'ed); 0, or 1 after the error line. */
int cli_read_file(const char *path, char **out, size_t *n);
int cli_prompt_tokens(const mu_model *m, const char *text, const char *file, int32_t **ids, int *n);
/* A prompt with images (mu_mprompt_new): text or file, the image files in
 * order at the text's media markers, or all before the text when it has
 * none (as llama.cpp's mtmd-cli does). 0, or 1 after the error line. */
int cli_media_prompt(const char *who, mu_engine *e, const mu_mmproj *p, const char *text, const char *file,
                     const char *const *images, int n_images, bool add_bos, mu_mprompt **out);

#endif
