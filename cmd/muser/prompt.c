/* prompt.c: CLI prompts: prompt text or file -> ids with the model's
 * tokenizer (BOS per tokenizer.ggml.add_bos_token, special tokens not parsed,
 * as llama.cpp's completion tools do). */
#include "prompt.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#define MAX_PROMPT_FILE (256u << 20)

static int read_file(const char *path, char **out, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return cli_fail("muser: cannot open %s: %s", path, strerror(errno));
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (!buf) {
            fclose(f);
            return cli_fail("muser: out of memory reading %s", path);
        }
        len += fread(buf + len, 1, cap - len, f);
        if (len < cap) break;
        if (cap >= MAX_PROMPT_FILE) {
            free(buf);
            fclose(f);
            return cli_fail("muser: %s is larger than %u MiB", path, MAX_PROMPT_FILE >> 20);
        }
        cap *= 2;
        char *nb = realloc(buf, cap);
        if (!nb) free(buf);
        buf = nb;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return cli_fail("muser: cannot read %s", path);
    }
    *out = buf;
    *n = len;
    return 0;
}

int cli_prompt_tokens(const mu_model *m, const char *text, const char *file, int32_t **ids, int *n) {
    char *owned = NULL;
    size_t len = text ? strlen(text) : 0;
    if (file && read_file(file, &owned, &len)) return 1;
    mu_err err = {0};
    int rc = mu_tokenize(m, owned ? owned : text, len, mu_model_get_info(m)->add_bos, false, ids, n, &err);
    free(owned);
    if (rc) return cli_fail("muser: %s", err.msg);
    return 0;
}
