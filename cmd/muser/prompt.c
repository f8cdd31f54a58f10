/* prompt.c: CLI text handling. Until the tokenizer lands, text prompts are
 * refused and output is the raw vocabulary text of each token. */
#include "prompt.h"

#include <stdio.h>
#include <stdlib.h>

#include "../../src/model/model.h"
#include "cli.h"

struct cli_text {
    const mu_model *m;
    mu_gguf_arr tokens;
};

int cli_prompt_tokens(const mu_model *m, const char *text, const char *file, int32_t **ids, int *n) {
    (void)m; (void)text; (void)file; (void)ids; (void)n;
    return cli_fail("muser: text prompts need the tokenizer, which this build lacks; use --prompt-ids");
}

cli_text *cli_text_new(const mu_model *m) {
    cli_text *t = calloc(1, sizeof *t);
    if (!t) {
        cli_fail("muser: out of memory");
        return NULL;
    }
    t->m = m;
    mu_err err;
    if (mu_gguf_get_arr(mu_model_gguf(m), "tokenizer.ggml.tokens", &t->tokens, &err) || t->tokens.type != MU_GGUF_STR) {
        cli_fail("muser: the model has no token texts (tokenizer.ggml.tokens)");
        free(t);
        return NULL;
    }
    return t;
}

void cli_text_put(cli_text *t, int32_t id) {
    if (id < 0 || (uint64_t)id >= t->tokens.n) return;
    const char *s;
    size_t len;
    mu_gguf_arr_str(mu_model_gguf(t->m), &t->tokens, (uint64_t)id, &s, &len);
    fwrite(s, 1, len, stdout);
}

void cli_text_end(cli_text *t) { (void)t; putchar('\n'); }
void cli_text_free(cli_text *t) { free(t); }
